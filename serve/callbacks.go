package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
)

// The outbox target of every application's callbacks, its attempts'
// timeout and the relay's lease.
const (
	callbackTarget  = "callbacks"
	callbackTimeout = 5 * time.Second
	callbackLease   = 15 * time.Second
)

// eventKey is the outbox key of an event's callback: the CloudEvent id.
func eventKey(input any) (string, error) {
	m, _ := input.(map[string]any)
	md, _ := m["metadata"].(map[string]any)
	id, _ := md["event"].(string)
	if id == "" {
		return "", errors.New("serve: callback without an event id")
	}
	return id, nil
}

// newRelay makes the outbox relay that delivers the callbacks: one target
// whose URL and signer are each application's.
func (srv *Server[TX]) newRelay() (*outbox.Relay[TX], error) {
	return outbox.New[TX](srv.s, &outbox.Config{
		// A relay that dies holding a callback delays it by the lease, so
		// the lease is short (an attempt's timeout plus room to record it).
		Targets: []outbox.Target{{Name: callbackTarget, Key: eventKey, Route: srv.route, Timeout: callbackTimeout}},
		Lease:   callbackLease,
		Now:     srv.cfg.Now,
		Logger:  srv.cfg.Logger,
		Hooks:   srv.cfg.OutboxHooks,
	})
}

// route is the callback target's Route: the application's callback URL,
// signed with its scheme and secrets as they are now.
func (srv *Server[TX]) route(ctx context.Context, in store.Intent) (string, *signature.Signer, error) {
	a, err := srv.s.GetApp(ctx, in.Metadata["app"])
	if err != nil {
		return "", nil, err
	}
	if a.CallbackURL == "" {
		return "", nil, fmt.Errorf("application %q has no callback URL any more", a.Name)
	}
	if !srv.allowed(a.CallbackURL) {
		return "", nil, fmt.Errorf("application %q's callback URL %q: its host is not in the allowed hosts", a.Name, a.CallbackURL)
	}
	scheme := signature.SchemeIdem
	if a.Scheme == "standard" {
		scheme = signature.SchemeStandard
	}
	signer, err := signature.NewSigner(scheme, a.Secrets, nil)
	if err != nil {
		return "", nil, fmt.Errorf("application %q's secrets: %w", a.Name, err)
	}
	return a.CallbackURL, signer, nil
}

// appMemo keys an application in an engine call's memo.
type appMemo string

// onEventTx enqueues, in the transaction that writes ev, its callback to
// the application (when it has a callback URL): a binary-mode CloudEvent
// whose id is stable per event, sequence per execution, subject the task.
// Events of one execution go out one at a time, in order.
func (srv *Server[TX]) onEventTx(ctx context.Context, txAny any, app string, task store.Task, e store.Execution, ev store.Event) error {
	if srv.cfg.OnEventTx != nil {
		if err := srv.cfg.OnEventTx(ctx, txAny, app, task, e, ev); err != nil {
			return err
		}
	}
	if ev.Type == "idem.execution.queued" { // its step was dispatched
		srv.queued.Store(true)
	}
	tx, ok := txAny.(TX)
	if !ok {
		return fmt.Errorf("serve: a transaction of type %T", txAny)
	}
	// Read in the transaction: waiting for a second pooled connection
	// while holding one would deadlock a busy pool. Once per engine call:
	// its other events (a worker's batch) are in the same transaction.
	a, err := execution.Memoized(ctx, appMemo(app), func() (store.App, error) { return srv.s.GetAppTx(ctx, tx, app) })
	if err != nil || a.CallbackURL == "" {
		return err
	}
	seq := strconv.FormatInt(ev.Sequence, 10)
	id := e.ID + "-" + seq
	_, err = srv.relay.EnqueueTx(ctx, tx, outbox.Intent{
		Target: callbackTarget, Method: http.MethodPost, Body: ev.Data,
		Headers: map[string]string{
			"Content-Type":   "application/json",
			"Ce-Specversion": "1.0",
			"Ce-Id":          id,
			"Ce-Source":      srv.cfg.Source,
			"Ce-Type":        ev.Type,
			"Ce-Subject":     subjectOf(e),
			"Ce-Sequence":    seq,
			"Ce-Executionid": e.ID,
			"Ce-Time":        ev.Time.UTC().Format(time.RFC3339Nano),
		},
		Metadata: map[string]string{"app": app, "event": id},
		Stream:   e.ID,
	})
	if err == nil {
		srv.pending.Store(true)
	}
	return err
}

// RunRelay delivers the callbacks until ctx ends (outbox.Relay.Run).
func (srv *Server[TX]) RunRelay(ctx context.Context) error { return srv.relay.Run(ctx) }

// Relay is the callbacks' relay, for a caller that drives it (RunOnce in
// tests, Drain at shutdown).
func (srv *Server[TX]) Relay() *outbox.Relay[TX] { return srv.relay }

// allowed reports whether callbacks may go to raw's host (Config.AllowHosts).
func (srv *Server[TX]) allowed(raw string) bool {
	if len(srv.cfg.AllowHosts) == 0 {
		return true
	}
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	host := strings.ToLower(u.Hostname())
	for _, h := range srv.cfg.AllowHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}
