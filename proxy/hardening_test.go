package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/problem"
)

// outageStore wraps one handle of a store of kind so that a test can make
// every call fail, as a store outage does.
type outageStore struct {
	*fault.Store
	down atomic.Bool
}

func withOutage(f *fault.Store) *outageStore {
	o := &outageStore{Store: f}
	f.SetPlan(func(fault.Op) fault.Mode {
		if o.down.Load() {
			return fault.Before
		}
		return fault.Pass
	})
	return o
}

// The store fails while the upstream (which does not honour keys: every
// request is an effect) acts, and stays down far past the lease. The client
// gets 503, never the unrecorded answer; retries meanwhile get 503 from
// this proxy and are refused by another; once the store is back, every
// retry gets the replay and the upstream has acted once.
func TestStoreOutageDuringUpstreamCall(t *testing.T) {
	t.Parallel()
	for _, kind := range append([]string{"Memory"}, sharedKinds...) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			clock := testclock.New(t0)
			n := 2
			if kind == "Memory" {
				n = 1
			}
			handles := openStores(t, kind, n, clock.Now)
			st := withOutage(fault.Wrap(handles[0]))
			f := newFront(t, Config{Upstream: up.url, Store: st, Lease: 2 * time.Second})
			up.setHandler(func(w http.ResponseWriter, r *http.Request) {
				st.down.Store(true) // the store fails while the effect happens
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"charge":"ch_1"}`)
			})
			q := req{key: "charge-1", body: `{"amount":100}`}
			f.send(t, q).expect(t, http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
			clock.Advance(time.Hour) // the outage outlasts the lease many times
			f.send(t, q).expect(t, http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
			if n == 2 {
				other := newFront(t, Config{Upstream: up.url, Store: withOutage(fault.Wrap(handles[1])), Lease: 2 * time.Second})
				st.down.Store(false)
				// The recorder got there first (the store answers again):
				// another process replays too.
				if err := f.p.guard.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
				r := other.send(t, q).expect(t, http.StatusCreated, "")
				if !r.replayed() || string(r.body) != `{"charge":"ch_1"}` {
					t.Fatalf("another proxy after recovery: replayed=%v %q", r.replayed(), r.body)
				}
			}
			st.down.Store(false)
			r := f.send(t, q).expect(t, http.StatusCreated, "")
			if !r.replayed() || string(r.body) != `{"charge":"ch_1"}` {
				t.Fatalf("retry after recovery: replayed=%v %q", r.replayed(), r.body)
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("the upstream acted %d times", n)
			}
		})
	}
}

// A POST answered 303 See Other happened: its retry replays the redirect,
// Location included, and the upstream is not called again.
func TestRedirectAfterPostReplayed(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/orders/42", http.StatusSeeOther)
	})
	first := f.send(t, req{key: "order-42", body: "x"}).expect(t, http.StatusSeeOther, "")
	again := f.send(t, req{key: "order-42", body: "x"}).expect(t, http.StatusSeeOther, "")
	if !again.replayed() || again.header.Get("Location") != first.header.Get("Location") || up.calls.Load() != 1 {
		t.Fatalf("retry: replayed=%v Location %q (first %q), upstream calls %d",
			again.replayed(), again.header.Get("Location"), first.header.Get("Location"), up.calls.Load())
	}
}

// An upstream slower than the upstream timeout may still act after the
// proxy gave up: the key stays unknown for UnknownHold, far past the lease,
// and only then is a retry forwarded.
func TestUnknownHeldPastTheLease(t *testing.T) {
	t.Parallel()
	f, up, _, clock := setup(t, "SQLite", func(c *Config) {
		c.Lease = 2 * time.Second
		c.UpstreamTimeout = 100 * time.Millisecond
		c.UnknownHold = time.Minute
	})
	slow := make(chan struct{})
	defer close(slow)
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-slow: // still working long after the proxy's timeout
		case <-r.Context().Done():
		}
	})
	q := req{key: "k", body: "x"}
	f.send(t, q).expect(t, http.StatusGatewayTimeout, problem.SlugUpstreamOutcomeUnknown)
	clock.Advance(10 * time.Second) // five leases
	f.send(t, q).expect(t, http.StatusConflict, httpidem.SlugOutcomeUnknown)
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("forwarded %d times while the first may still run", n)
	}
	clock.Advance(time.Minute)
	up.setHandler(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	f.send(t, q).expect(t, http.StatusCreated, "")
}

// A body delimited by closing the connection cannot be told whole from cut:
// it is delivered once and never stored or replayed; the retry gets 409
// response-not-stored and the upstream acts once.
func TestCloseDelimitedBodyNotStored(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		c, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nthe first half")
		buf.Flush()
		c.Close() // cut here, or the end: nobody can tell
	})
	r := f.send(t, req{key: "k", body: "x"}).expect(t, http.StatusOK, "")
	if string(r.body) != "the first half" {
		t.Fatalf("first: %q", r.body)
	}
	f.send(t, req{key: "k", body: "x"}).expect(t, http.StatusConflict, httpidem.SlugResponseNotStored)
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream acted %d times", n)
	}
}

// A keyed "post" would pass unguarded, and many upstreams run it as POST:
// the proxy refuses it before the upstream sees it.
func TestMethodInAnotherCaseRefused(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	for range 2 {
		f.send(t, req{method: "post", key: "k", body: "x"}).expect(t, http.StatusBadRequest, httpidem.SlugMethodInvalid)
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("upstream called %d times", n)
	}
}

// ?item=a&item=b and ?item=b&item=a are different requests to an upstream
// that reads the values as a list: the same key with the other order is
// refused (422), not replayed.
func TestQueryValueOrderIsContent(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	f.send(t, req{path: "/charges?item=a&item=b", key: "k", body: "x"}).expect(t, http.StatusCreated, "")
	f.send(t, req{path: "/charges?item=b&item=a", key: "k", body: "x"}).expect(t, http.StatusUnprocessableEntity, httpidem.SlugKeyReused)
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times", n)
	}
}

// An upstream's gzip answer is replayed as stored to a retry that accepts
// gzip, and decoded for one that asks for identity.
func TestReplayFollowsAcceptEncoding(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, `{"charge":"ch_1"}`)
	zw.Close()
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		w.Write(zipped.Bytes())
	})
	q := req{key: "k", body: "x", header: http.Header{"Accept-Encoding": {"gzip"}}}
	first := f.send(t, q).expect(t, http.StatusCreated, "")
	if !bytes.Equal(first.body, zipped.Bytes()) {
		t.Fatalf("first: %q", first.body)
	}
	if again := f.send(t, q).expect(t, http.StatusCreated, ""); !again.replayed() || !bytes.Equal(again.body, zipped.Bytes()) {
		t.Fatalf("gzip retry: replayed=%v %q", again.replayed(), again.body)
	}
	q.header = http.Header{"Accept-Encoding": {"identity"}}
	plain := f.send(t, q).expect(t, http.StatusCreated, "")
	if !plain.replayed() || string(plain.body) != `{"charge":"ch_1"}` || plain.header.Get("Content-Encoding") != "" {
		t.Fatalf("identity retry: replayed=%v %q Content-Encoding %q", plain.replayed(), plain.body, plain.header.Get("Content-Encoding"))
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times", n)
	}
}
