package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/webhook"
)

const secret = "a-secret-of-at-least-16-bytes"

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

// projection is the business side: the paid amount per order, updated in
// the inbox's transaction (undone with it).
type projection struct {
	mu   sync.Mutex
	paid map[string]int
	runs int
}

func (p *projection) apply(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
	var body struct {
		Add int `json:"add"`
	}
	if err := json.Unmarshal(ev.Data, &body); err != nil || body.Add < 0 {
		return inbox.Invalid(errors.New("data must be {\"add\": n} with n >= 0"))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	p.paid[ev.Subject] += body.Add
	tx.OnRollback(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.paid[ev.Subject] -= body.Add
	})
	return nil
}

func (p *projection) get(obj string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paid[obj]
}

type fixture struct {
	h      http.Handler
	proj   *projection
	signer *signature.Signer
	counts *tally
	in     *memstore.Inbox
}

// tally counts the results Hooks.OnRequest reports.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tally) add(result string, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[result]++
}

func (c *tally) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

func newFixture(t *testing.T, tweak func(*inbox.Config, *webhook.Config)) *fixture {
	t.Helper()
	now := func() time.Time { return t0 }
	proj := &projection{paid: map[string]int{}}
	in := memstore.NewInbox()
	icfg := &inbox.Config{Mode: order.ModeDelta, Now: now, Backoff: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, &signature.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	counts := &tally{n: map[string]int{}}
	wcfg := &webhook.Config{Verifier: v, Event: &event.Config{Owner: event.SourcePrefixes("https://shop.example/")},
		Hooks: webhook.Hooks{OnRequest: counts.add}, Logger: slog.New(slog.DiscardHandler), MaxBody: 4096}
	if tweak != nil {
		tweak(icfg, wcfg)
	}
	p, err := inbox.New(in, proj.apply, icfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(p, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := signature.NewSigner(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{h: h, proj: proj, signer: signer, counts: counts, in: in}
}

func orderEvent(obj string, seq int64, add int) event.Event {
	return event.Event{ID: obj + "-" + event.FormatSequence(seq), Source: "https://shop.example/orders", Type: "order.paid",
		Subject: obj, Sequence: seq, DataContentType: "application/json", Data: []byte(`{"add":` + strconv.Itoa(add) + `}`)}
}

// send posts ev signed at ts (binary mode unless structured) and returns the
// response.
func (f *fixture) send(t *testing.T, ev event.Event, mode event.Mode, ts time.Time, mutate func(http.Header, []byte) []byte) *httptest.ResponseRecorder {
	t.Helper()
	hdr, body, err := event.ToHTTP(ev, mode)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := f.signer.Sign(body, &signature.SignOpts{Timestamp: ts})
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range sig {
		hdr[k] = vs
	}
	if mutate != nil {
		body = mutate(hdr, body)
	}
	r := httptest.NewRequest(http.MethodPost, "/webhooks/orders", bytes.NewReader(body))
	r.Header = hdr
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

func decode(t *testing.T, w *httptest.ResponseRecorder) webhook.Response {
	t.Helper()
	var r webhook.Response
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	return r
}

func problemType(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, body %s", ct, w.Body)
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code {
		t.Fatalf("problem %s: %v", w.Body, err)
	}
	return strings.TrimPrefix(p.Type, "https://idem.dev/problems/")
}

func TestOutcomes(t *testing.T) {
	f := newFixture(t, nil)
	// 1 applied, 3 parked, duplicate of 3, 2 releases 3.
	for _, step := range []struct {
		ev      event.Event
		mode    event.Mode
		outcome string
		applied []int64
		paid    int
	}{
		{orderEvent("o-1", 1, 10), event.ModeBinary, "processed", []int64{1}, 10},
		{orderEvent("o-1", 3, 30), event.ModeStructured, "parked", nil, 10},
		{orderEvent("o-1", 3, 30), event.ModeBinary, "duplicate", nil, 10},
		{orderEvent("o-1", 2, 20), event.ModeStructured, "processed", []int64{2, 3}, 60},
		{orderEvent("o-1", 1, 10), event.ModeBinary, "duplicate", nil, 60},
	} {
		w := f.send(t, step.ev, step.mode, t0, nil)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: status %d %s", step.ev.ID, w.Code, w.Body)
		}
		r := decode(t, w)
		if r.Outcome != step.outcome || len(r.Applied) != len(step.applied) || f.proj.get("o-1") != step.paid {
			t.Fatalf("%s: %+v, paid %d; want %s %v paid %d", step.ev.ID, r, f.proj.get("o-1"), step.outcome, step.applied, step.paid)
		}
	}
	for result, want := range map[string]int{"processed": 2, "parked": 1, "duplicate": 2} {
		if got := f.counts.get(result); got != want {
			t.Errorf("Hooks.OnRequest reported %q %d times, want %d", result, got, want)
		}
	}
}

func TestDeadLetterIsAcknowledgedWithReason(t *testing.T) {
	f := newFixture(t, nil)
	ev := orderEvent("o-1", 1, 0)
	ev.Data = []byte(`{"add":-5}`)
	w := f.send(t, ev, event.ModeBinary, t0, nil)
	r := decode(t, w)
	if w.Code != http.StatusOK || r.Outcome != "dead_lettered" || !strings.Contains(r.Reason, "n >= 0") || len(r.DeadLetters) != 1 {
		t.Fatalf("status %d, %+v", w.Code, r)
	}
	if _, _, dead := f.in.Len(); dead != 1 || f.proj.get("o-1") != 0 {
		t.Fatalf("dead letters %d, paid %d", dead, f.proj.get("o-1"))
	}
	// Redelivered: acknowledged, not run, not dead-lettered twice.
	if r := decode(t, f.send(t, ev, event.ModeBinary, t0, nil)); r.Outcome != "duplicate" {
		t.Fatalf("redelivery: %+v", r)
	}
	if _, _, dead := f.in.Len(); dead != 1 {
		t.Fatalf("dead letters %d after redelivery", dead)
	}
}

func TestRejections(t *testing.T) {
	f := newFixture(t, func(ic *inbox.Config, _ *webhook.Config) { ic.MaxParked = 1 })
	good := orderEvent("o-1", 1, 10)
	for _, c := range []struct {
		name   string
		ev     event.Event
		ts     time.Time
		mutate func(http.Header, []byte) []byte
		status int
		slug   string
	}{
		{"tampered body", good, t0, func(h http.Header, b []byte) []byte { return bytes.Replace(b, []byte("10"), []byte("99"), 1) }, 401, webhook.SlugSignatureInvalid},
		{"other secret", good, t0, func(h http.Header, b []byte) []byte {
			s, _ := signature.NewSigner(signature.SchemeIdem, []string{"another-secret-16-bytes"}, nil)
			sig, _ := s.Sign(b, &signature.SignOpts{Timestamp: t0})
			h.Set(signature.HeaderIdemSignature, sig.Get(signature.HeaderIdemSignature))
			return b
		}, 401, webhook.SlugSignatureInvalid},
		{"expired", good, t0.Add(-301 * time.Second), nil, 401, webhook.SlugSignatureExpired},
		{"from the future", good, t0.Add(301 * time.Second), nil, 401, webhook.SlugSignatureExpired},
		{"no signature", good, t0, func(h http.Header, b []byte) []byte { h.Del(signature.HeaderIdemSignature); return b }, 400, webhook.SlugSignatureMalformed},
		{"garbled signature", good, t0, func(h http.Header, b []byte) []byte { h.Set(signature.HeaderIdemSignature, "t=x,v1=zz"); return b }, 400, webhook.SlugSignatureMalformed},
		{"not owned", event.Event{ID: "x", Source: "https://evil.example/orders", Type: "t", Subject: "o-1", Sequence: 1}, t0, nil, 403, webhook.SlugEventNotOwned},
		{"body too large", event.Event{ID: "x", Source: "https://shop.example/orders", Type: "t", Subject: "o-1", Sequence: 1, DataContentType: "text/plain", Data: bytes.Repeat([]byte("x"), 5000)}, t0, nil, 413, webhook.SlugBodyTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := f.send(t, c.ev, event.ModeBinary, c.ts, c.mutate)
			if w.Code != c.status || problemType(t, w) != c.slug {
				t.Fatalf("status %d %s; want %d %s", w.Code, w.Body, c.status, c.slug)
			}
		})
	}
	// Bodies that are signed but not CloudEvents.
	for name, c := range map[string]struct {
		body, ct string
		hdr      map[string]string
		slug     string
	}{
		"no specversion": {`{"id":"1"}`, "application/json", nil, webhook.SlugEventMalformed},
		"bad sequence":   {`{"specversion":"1.0","id":"1","source":"https://shop.example/o","type":"t","sequence":"07"}`, "application/cloudevents+json", nil, webhook.SlugEventBadSequence},
		"missing id":     {`{"specversion":"1.0","source":"https://shop.example/o","type":"t","sequence":"1"}`, "application/cloudevents+json", nil, webhook.SlugEventMalformed},
	} {
		t.Run(name, func(t *testing.T) {
			body := []byte(c.body)
			sig, _ := f.signer.Sign(body, &signature.SignOpts{Timestamp: t0})
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			r.Header = sig
			r.Header.Set("Content-Type", c.ct)
			w := httptest.NewRecorder()
			f.h.ServeHTTP(w, r)
			if w.Code != 400 || problemType(t, w) != c.slug {
				t.Fatalf("status %d %s; want 400 %s", w.Code, w.Body, c.slug)
			}
		})
	}
	t.Run("GET", func(t *testing.T) {
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != 405 || w.Header().Get("Allow") != "POST" || problemType(t, w) != webhook.SlugMethodNotAllowed {
			t.Fatalf("GET: %d %s", w.Code, w.Body)
		}
	})
	t.Run("backlog full", func(t *testing.T) {
		if w := f.send(t, orderEvent("o-9", 2, 1), event.ModeBinary, t0, nil); decode(t, w).Outcome != "parked" {
			t.Fatalf("first park: %s", w.Body)
		}
		w := f.send(t, orderEvent("o-9", 3, 1), event.ModeBinary, t0, nil)
		if w.Code != 503 || w.Header().Get("Retry-After") != "5" || problemType(t, w) != webhook.SlugStreamBacklogFull {
			t.Fatalf("second park over MaxParked 1: %d %v %s", w.Code, w.Header(), w.Body)
		}
		// Not recorded: once the gap fills it is accepted.
		f.send(t, orderEvent("o-9", 1, 1), event.ModeBinary, t0, nil)
		if r := decode(t, f.send(t, orderEvent("o-9", 3, 1), event.ModeBinary, t0, nil)); r.Outcome != "processed" {
			t.Fatalf("after the gap filled: %+v", r)
		}
	})
	if got := f.counts.get(webhook.SlugSignatureInvalid); got != 2 {
		t.Errorf("signature-invalid counted %v, want 2", got)
	}
}

func TestConfigChecks(t *testing.T) {
	in := memstore.NewInbox()
	p, _ := inbox.New(in, func(context.Context, *memstore.Tx, event.Event) error { return nil }, &inbox.Config{Retention: 9 * time.Minute})
	v, _ := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if _, err := webhook.New(p, &webhook.Config{Verifier: v}); err == nil || !strings.Contains(err.Error(), "twice the signature tolerance") {
		t.Fatalf("retention 9m with tolerance 5m: %v", err)
	}
	if _, err := webhook.New(p, nil); err == nil {
		t.Fatal("no verifier and not Unsigned: no error")
	}
	if _, err := webhook.New(p, &webhook.Config{Unsigned: true}); err != nil {
		t.Fatal(err)
	}
}
