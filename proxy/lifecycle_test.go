package proxy

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store/memstore"
)

func TestStoreDown(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	fs := fault.Wrap(memstore.New(nil))
	f := newFront(t, Config{Upstream: up.url, Store: fs})
	ctx := context.Background()
	if err := f.p.Ready(ctx); err != nil {
		t.Fatalf("Ready on a working store: %v", err)
	}

	fs.SetPlan(func(fault.Op) fault.Mode { return fault.Before })
	if err := f.p.Ready(ctx); err == nil {
		t.Fatal("Ready on a failing store: nil")
	}
	r := f.send(t, req{key: "down-1", body: "x"}).expect(t, http.StatusServiceUnavailable, "store-unavailable")
	if r.header.Get("Retry-After") == "" || up.calls.Load() != 0 {
		t.Fatalf("store down: Retry-After %q, %d upstream calls; want one, and none", r.header.Get("Retry-After"), up.calls.Load())
	}
	// Requests that do not take part never touch the store.
	f.send(t, req{method: http.MethodGet}).expect(t, http.StatusCreated, "")
	f.send(t, req{key: "down-1", body: "x", auth: "-"}).expect(t, http.StatusCreated, "")

	fs.SetPlan(nil)
	f.send(t, req{key: "down-1", body: "x"}).expect(t, http.StatusCreated, "")
}

// TestClose: Close aborts a call still waiting on the upstream (its outcome
// is unknown), then refuses new requests.
func TestClose(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	arrived := make(chan struct{})
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done() // until the proxy gives up
	})
	got := make(chan reply, 1)
	go func() { got <- f.send(t, req{key: "close-1", body: "x"}) }()
	<-arrived
	if err := f.p.Close(); err != nil {
		t.Fatal(err)
	}
	(<-got).expect(t, http.StatusBadGateway, problem.SlugUpstreamOutcomeUnknown)
	f.send(t, req{key: "close-2", body: "x"}).expect(t, http.StatusServiceUnavailable, "proxy-closed")
}

// TestRealLease runs the lost-answer cycle on SQLite's own clock with a
// short hold: 409 outcome-unknown until it ends, then the same key is
// forwarded again.
func TestRealLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	up := newUpstream(t)
	st := openStores(t, "SQLite", 1, nil)[0]
	f := newFront(t, Config{Upstream: up.url, Store: st, Lease: lease, UnknownHold: lease, UpstreamTimeout: lease})
	up.setHandler(hangUp)
	q := req{key: "real-1", body: "x"}
	start := time.Now()
	f.send(t, q).expect(t, http.StatusBadGateway, problem.SlugUpstreamOutcomeUnknown)
	f.send(t, q).expect(t, http.StatusConflict, "outcome-unknown")
	up.handle.Store(nil)

	// The lease runs out in real time here; retry as a client would.
	for {
		r := f.send(t, q).must(t)
		if r.status == http.StatusConflict {
			if elapsed := time.Since(start); elapsed > 10*lease {
				t.Fatalf("still 409 after %v with a %v lease", elapsed, lease)
			}
			time.Sleep(lease / 10)
			continue
		}
		r.expect(t, http.StatusCreated, "")
		break
	}
	if elapsed := time.Since(start); elapsed < lease {
		t.Fatalf("forwarded again after %v, before the %v lease ended", elapsed, lease)
	}
	if n := up.calls.Load(); n != 2 || up.last().header.Get("Idempotency-Key") != "real-1" {
		t.Fatalf("%d upstream calls, last key %q", n, up.last().header.Get("Idempotency-Key"))
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st := memstore.New(nil)
	u := &url.URL{Scheme: "http", Host: "127.0.0.1:1"}
	for name, cfg := range map[string]*Config{
		"Nil":             nil,
		"NoUpstream":      {Store: st},
		"BadScheme":       {Upstream: &url.URL{Scheme: "ftp", Host: "x"}, Store: st},
		"NoHost":          {Upstream: &url.URL{Scheme: "http"}, Store: st},
		"NoStore":         {Upstream: u},
		"NegativeTimeout": {Upstream: u, Store: st, UpstreamTimeout: -time.Second},
		"SafeMethod":      {Upstream: u, Store: st, Methods: []string{"GET"}},
		"LeaseTooLong":    {Upstream: u, Store: st, Lease: 2 * time.Hour, Retention: time.Hour},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
