package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/webhook"
)

// eventID is the CloudEvents id of an order's event: unique per (order,
// sequence), the same on every redelivery.
func eventID(orderID string, seq int64) string { return fmt.Sprintf("%s.%d", orderID, seq) }

// newEvent returns the order event of the given type and sequence with data
// encoded as JSON.
func newEvent(typ, orderID string, seq int64, data any) event.Event {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err) // the payload types always encode
	}
	return event.Event{
		ID: eventID(orderID, seq), Source: source, Type: typ, Subject: orderID, Sequence: seq,
		DataContentType: "application/json", Data: b,
	}
}

// payload is an event rendered as the headers and body of its HTTP request,
// once: every delivery of it sends these bytes.
type payload struct {
	header http.Header
	body   []byte
}

// render renders ev in the CloudEvents HTTP content mode.
func render(ev event.Event, mode event.Mode) (payload, error) {
	h, body, err := event.ToHTTP(ev, mode)
	if err != nil {
		return payload{}, err
	}
	return payload{header: h, body: body}, nil
}

// sender is the shop's side of the webhook: it signs a payload with a fresh
// timestamp and posts it, as a sender does on every attempt (a retry is
// signed again, so that it is never refused as expired).
type sender struct {
	client *http.Client
	signer *signature.Signer
}

// newSender returns a sender over client, signing with secret.
func newSender(client *http.Client) (*sender, error) {
	s, err := signature.NewSigner(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		return nil, err
	}
	return &sender{client: client, signer: s}, nil
}

// answer is an endpoint's answer to one delivery.
type answer struct {
	Status int
	// Response is a 200's body: the event's outcome.
	Response webhook.Response
	// Problem is the slug of a problem answer (4xx, 5xx), Detail its detail.
	Problem, Detail string
}

// Outcome returns the outcome of a 200 answer, or the problem's slug.
func (a answer) Outcome() string {
	if a.Status == http.StatusOK {
		return a.Response.Outcome
	}
	return a.Problem
}

// post delivers p to url once. With tamper set, one hex digit of the
// signature is changed after signing, as a forger would have to. An error
// means no answer was read (the connection failed or broke).
func (s *sender) post(ctx context.Context, url string, p payload, tamper bool) (answer, error) {
	sig, err := s.signer.Sign(p.body, &signature.SignOpts{Timestamp: time.Now()})
	if err != nil {
		return answer{}, err
	}
	if tamper {
		v := sig.Get(signature.HeaderIdemSignature)
		last := byte('0')
		if v[len(v)-1] == '0' {
			last = '1'
		}
		sig.Set(signature.HeaderIdemSignature, v[:len(v)-1]+string(last))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(p.body))
	if err != nil {
		return answer{}, err
	}
	maps.Copy(req.Header, p.header)
	maps.Copy(req.Header, sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{Status: resp.StatusCode}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &a.Response); err != nil {
			return a, fmt.Errorf("200 with a body that is not a webhook.Response: %q: %w", body, err)
		}
		return a, nil
	}
	var prob problem.Details
	if err := json.Unmarshal(body, &prob); err != nil {
		return a, fmt.Errorf("%d with a body that is not a problem: %q: %w", resp.StatusCode, body, err)
	}
	a.Problem, a.Detail = strings.TrimPrefix(prob.Type, problem.DefaultBase), prob.Detail
	return a, nil
}
