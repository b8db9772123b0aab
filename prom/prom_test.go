package prom_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/prom"
	"github.com/idemhq/idem/proxy"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/webhook"
)

// value returns the value of the metric name whose labels include
// labels ("k=v" each), and whether it exists.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for _, kv := range labels {
				k, v, _ := strings.Cut(kv, "=")
				if have[k] != v {
					continue metrics
				}
			}
			return read(m), true
		}
	}
	return 0, false
}

func read(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

func want(t *testing.T, reg *prometheus.Registry, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := value(t, reg, name, labels...)
	if !ok || got != v {
		t.Errorf("%s%q = %v (exists: %v), want %v", name, labels, got, ok, v)
	}
}

// TestInboxAndWebhook sends one event through a webhook endpoint and reads
// the metrics both components fed.
func TestInboxAndWebhook(t *testing.T) {
	reg := prometheus.NewRegistry()
	ih, err := prom.Inbox(reg)
	if err != nil {
		t.Fatal(err)
	}
	wh, err := prom.Webhook(reg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := inbox.New(memstore.NewInbox(), func(context.Context, *memstore.Tx, event.Event) error { return nil }, &inbox.Config{Hooks: ih})
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(p, &webhook.Config{Unsigned: true, Hooks: wh})
	if err != nil {
		t.Fatal(err)
	}
	// Before anything happened, every outcome is there at zero.
	want(t, reg, 0, "idem_inbox_events_total", "outcome=dead_lettered")
	want(t, reg, 0, "idem_inbox_gaps_total", "mode=delta")
	want(t, reg, 0, "idem_inbox_batches_total", "result=abandoned")
	ih.OnBatch(3, true)
	want(t, reg, 1, "idem_inbox_batches_total", "result=committed")
	want(t, reg, 3, "idem_inbox_batch_events_total", "result=committed")
	hdr, body, err := event.ToHTTP(event.Event{Source: "https://shop.example/orders", ID: "e-1", Type: "order.paid",
		Subject: "o-1", Sequence: 1, DataContentType: "application/json", Data: []byte(`{}`)}, event.ModeBinary)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/events", strings.NewReader(string(body)))
		r.Header = hdr.Clone()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d %s", w.Code, w.Body)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/events", nil))
	want(t, reg, 1, "idem_inbox_events_total", "outcome=processed")
	want(t, reg, 1, "idem_inbox_events_total", "outcome=duplicate")
	want(t, reg, 1, "idem_webhook_requests_total", "result=processed")
	want(t, reg, 1, "idem_webhook_requests_total", "result=duplicate")
	want(t, reg, 1, "idem_webhook_requests_total", "result="+webhook.SlugMethodNotAllowed)
	want(t, reg, 3, "idem_webhook_request_duration_seconds")
}

// TestOutbox delivers one intent and reads the delivery metrics.
func TestOutbox(t *testing.T) {
	reg := prometheus.NewRegistry()
	hooks, err := prom.Outbox(reg)
	if err != nil {
		t.Fatal(err)
	}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer target.Close()
	s := memstore.NewOutbox(memstore.NewInbox())
	r, err := outbox.New(s, &outbox.Config{Hooks: hooks, Targets: []outbox.Target{{Name: "pay", URL: target.URL,
		Key: func(any) (string, error) { return "charge-o-1", nil }}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.InTx(ctx, func(ctx context.Context, tx *memstore.Tx) error {
		_, err := r.EnqueueTx(ctx, tx, outbox.Intent{Target: "pay", Method: http.MethodPost, Body: []byte(`{}`)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(ctx); n != 1 || err != nil {
		t.Fatalf("RunOnce: %d, %v", n, err)
	}
	want(t, reg, 1, "idem_outbox_deliveries_total", "target=pay", "result=done")
	want(t, reg, 1, "idem_outbox_attempt_duration_seconds")
	want(t, reg, 0, "idem_outbox_fenced_total")
	want(t, reg, 0, "idem_outbox_unknown_outcomes_total")
}

// TestProxy sends a keyed request through a proxy, reading the in-flight
// gauge while the upstream holds it, and the counters after.
func TestProxy(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := prom.Proxy(reg)
	if err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan struct{}), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "charged")
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p, err := proxy.New(&proxy.Config{Upstream: u, Store: memstore.New(nil), Hooks: m.Hooks})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want(t, reg, 0, "idem_proxy_in_flight_requests") // not watched yet
	m.Watch(p)
	front := httptest.NewServer(p)
	defer front.Close()
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/charges", strings.NewReader(`{"amount":10}`))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "k-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	<-arrived
	want(t, reg, 1, "idem_proxy_in_flight_requests")
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want(t, reg, 1, "idem_proxy_requests_total", "outcome="+string(httpidem.OutcomeExecuted))
	want(t, reg, 1, "idem_proxy_upstream_duration_seconds")
	want(t, reg, 0, "idem_proxy_upstream_errors_total", "kind="+proxy.UpstreamUnknown)
	want(t, reg, 0, "idem_proxy_recording_answers")
	want(t, reg, 0, "idem_proxy_buffered_body_bytes")
}

// TestMiddleware counts the middleware's outcomes.
func TestMiddleware(t *testing.T) {
	reg := prometheus.NewRegistry()
	onOutcome, err := prom.Middleware(reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := key.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpidem.New(g, &httpidem.Config{OnOutcome: onOutcome,
		Principal: func(*http.Request) (string, bool) { return "alice", true }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k-1")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	want(t, reg, 1, "idem_http_requests_total", "outcome="+string(httpidem.OutcomeExecuted))
	want(t, reg, 1, "idem_http_requests_total", "outcome="+string(httpidem.OutcomeReplayed))
}

// TestOneOfEachKindPerRegistry: a second component of a kind on one
// registry is refused with ErrAlreadyRegistered, a nil registry with
// ErrBadConfig.
func TestOneOfEachKindPerRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, f := range []func(prometheus.Registerer) error{
		func(r prometheus.Registerer) error { _, err := prom.Inbox(r); return err },
		func(r prometheus.Registerer) error { _, err := prom.Outbox(r); return err },
		func(r prometheus.Registerer) error { _, err := prom.Webhook(r); return err },
		func(r prometheus.Registerer) error { _, err := prom.Proxy(r); return err },
		func(r prometheus.Registerer) error { _, err := prom.Middleware(r); return err },
	} {
		if err := f(reg); err != nil {
			t.Fatal(err)
		}
		if err := f(reg); !errors.Is(err, prom.ErrAlreadyRegistered) {
			t.Errorf("second registration: %v, want ErrAlreadyRegistered", err)
		}
		if err := f(nil); !errors.Is(err, prom.ErrBadConfig) {
			t.Errorf("nil registry: %v, want ErrBadConfig", err)
		}
	}
	// Labelled apart, two of a kind share a registry.
	shared := prometheus.NewRegistry()
	for _, name := range []string{"orders", "refunds"} {
		if _, err := prom.Inbox(prometheus.WrapRegistererWith(prometheus.Labels{"inbox": name}, shared)); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	for _, n := range []string{"idem_inbox_events_total", "idem_outbox_attempt_duration_seconds",
		"idem_webhook_request_duration_seconds", "idem_proxy_in_flight_requests", "idem_proxy_upstream_errors_total"} {
		if !slices.Contains(names, n) {
			t.Errorf("%s not registered; have %q", n, names)
		}
	}
}
