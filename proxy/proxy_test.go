package proxy

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store/memstore"
)

// concurrently sends n copies of q at once (they wait on one barrier), half
// of them through each front in turn, and returns the replies.
func concurrently(tb testing.TB, n int, q req, fronts ...*front) []reply {
	tb.Helper()
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		f := fronts[i%len(fronts)]
		wg.Go(func() {
			<-start
			replies[i] = f.send(tb, q)
		})
	}
	close(start)
	wg.Wait()
	return replies
}

// checkOnce checks the replies of identical concurrent requests: exactly
// one executed, every other one 409 request-in-flight with Retry-After or a
// byte-identical replay. It returns the executed reply.
func checkOnce(tb testing.TB, replies []reply) reply {
	tb.Helper()
	firstAt := -1
	for i, r := range replies {
		r.must(tb)
		if r.status == http.StatusCreated && !r.replayed() {
			if firstAt >= 0 {
				tb.Fatalf("two executions: %q and %q", replies[firstAt].body, r.body)
			}
			firstAt = i
		}
	}
	if firstAt < 0 {
		tb.Fatal("no reply came from the upstream")
	}
	first := &replies[firstAt]
	var inFlight, replayed int
	for i, r := range replies {
		switch {
		case i == firstAt:
		case r.status == http.StatusConflict:
			if r.slug() != "request-in-flight" || r.header.Get("Retry-After") == "" {
				tb.Fatalf("409 without request-in-flight and Retry-After: %v %q", r.header, r.body)
			}
			inFlight++
		case r.replayed():
			if !sameReply(*first, r) || r.header.Get("Location") != first.header.Get("Location") {
				tb.Fatalf("replay differs from the first answer:\n%d %q %v\n%d %q %v", first.status, first.body, first.header, r.status, r.body, r.header)
			}
			replayed++
		default:
			tb.Fatalf("unexpected reply %d %q", r.status, r.body)
		}
	}
	tb.Logf("%d replies: 1 executed, %d replayed, %d in flight", len(replies), replayed, inFlight)
	return *first
}

func TestReplay(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f, up, _, _ := setup(t, kind, nil)
			q := req{key: "order-42", body: `{"amount":100}`}

			first := checkOnce(t, concurrently(t, 64, q, f))
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream called %d times, want 1", n)
			}
			if got := up.last().header.Get("Idempotency-Key"); got != "order-42" {
				t.Fatalf("upstream got Idempotency-Key %q", got)
			}

			again := f.send(t, q).expect(t, http.StatusCreated, "")
			if !again.replayed() || !sameReply(first, again) {
				t.Fatalf("retry: %v %q, want a replay of %q", again.header, again.body, first.body)
			}
			if again.header.Get("Set-Cookie") != "" {
				t.Fatal("Set-Cookie replayed")
			}

			f.send(t, req{key: "order-42", body: `{"amount":999}`}).expect(t, http.StatusUnprocessableEntity, "idempotency-key-reused")
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream called %d times after a reused key, want 1", n)
			}
		})
	}
}

func TestSharedStore(t *testing.T) {
	t.Parallel()
	for _, kind := range sharedKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			stores := openStores(t, kind, 2, nil)
			a := newFront(t, Config{Upstream: up.url, Store: stores[0]})
			b := newFront(t, Config{Upstream: up.url, Store: stores[1]})

			q := req{key: "shared-1", body: `{"amount":5}`}
			first := checkOnce(t, concurrently(t, 64, q, a, b))
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream called %d times through two proxies, want 1", n)
			}
			for _, f := range []*front{a, b} {
				if r := f.send(t, q).must(t); !r.replayed() || !sameReply(first, r) {
					t.Fatalf("retry through the other proxy: %d %q, want a replay", r.status, r.body)
				}
			}
		})
	}
}

func TestForwarding(t *testing.T) {
	t.Parallel()

	t.Run("KeyUnchanged", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", nil)
		// The structured-field form names the same key as the bare one; the
		// upstream still gets exactly what the client sent.
		f.send(t, req{key: `"k-1"`, body: "x"}).expect(t, http.StatusCreated, "")
		if got := up.last().header.Values("Idempotency-Key"); len(got) != 1 || got[0] != `"k-1"` {
			t.Fatalf("upstream got Idempotency-Key %q", got)
		}
		if r := f.send(t, req{key: "k-1", body: "x"}); !r.replayed() {
			t.Fatalf("bare form of the same key: %d %q, want a replay", r.status, r.body)
		}
		// Listed in Connection, the key is still forwarded: it is the key
		// the proxy used.
		h := http.Header{"Connection": {"Idempotency-Key"}}
		f.send(t, req{key: "k-2", body: "x", header: h}).expect(t, http.StatusCreated, "")
		if got := up.last().header.Get("Idempotency-Key"); got != "k-2" {
			t.Fatalf("upstream got Idempotency-Key %q, want k-2", got)
		}
	})

	t.Run("HopByHop", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", nil)
		up.setHandler(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "X-Resp-Hop")
			w.Header().Set("X-Resp-Hop", "1")
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set("X-Resp-End", "1")
			w.WriteHeader(http.StatusOK)
		})
		h := http.Header{
			"Connection":          {"X-Hop, keep-alive"},
			"X-Hop":               {"1"},
			"Keep-Alive":          {"timeout=5"},
			"Te":                  {"gzip"},
			"Upgrade":             {"h2c"},
			"Proxy-Authorization": {"Basic eA=="},
			"Proxy-Connection":    {"keep-alive"},
			"X-End-To-End":        {"1"},
		}
		for _, key := range []string{"hop-1", ""} { // with and without a key
			r := f.send(t, req{key: key, body: "x", header: h}).expect(t, http.StatusOK, "")
			got := up.last()
			for _, name := range []string{"Connection", "X-Hop", "Keep-Alive", "Te", "Upgrade", "Proxy-Authorization", "Proxy-Connection", "Transfer-Encoding"} {
				if v, ok := got.header[name]; ok {
					t.Errorf("key %q: hop-by-hop %s: %q forwarded", key, name, v)
				}
			}
			if got.header.Get("X-End-To-End") != "1" || got.header.Get("Authorization") != "Bearer alice" {
				t.Errorf("key %q: end-to-end headers lost: %v", key, got.header)
			}
			for _, name := range []string{"X-Resp-Hop", "Keep-Alive"} {
				if v, ok := r.header[name]; ok {
					t.Errorf("key %q: response hop-by-hop %s: %q delivered", key, name, v)
				}
			}
			if r.header.Get("X-Resp-End") != "1" {
				t.Errorf("key %q: response end-to-end header lost: %v", key, r.header)
			}
		}
	})

	t.Run("NoPrincipal", func(t *testing.T) {
		t.Parallel()
		f, up, st, _ := setup(t, "Memory", nil)
		q := req{key: "anon-1", body: "hello", auth: "-", header: http.Header{"X-Trace": {"t1"}}}
		a := f.send(t, q).expect(t, http.StatusCreated, "")
		b := f.send(t, q).expect(t, http.StatusCreated, "")
		if a.replayed() || b.replayed() || up.calls.Load() != 2 {
			t.Fatalf("without a principal: %d upstream calls, replayed %v %v; want 2 plain calls", up.calls.Load(), a.replayed(), b.replayed())
		}
		got := up.last()
		if string(got.body) != "hello" || got.header.Get("Idempotency-Key") != "anon-1" || got.header.Get("X-Trace") != "t1" {
			t.Fatalf("request changed on the way: %q %v", got.body, got.header)
		}
		if n := st.(*memstore.Store).Len(); n != 0 {
			t.Fatalf("%d records stored for unauthenticated requests", n)
		}
	})

	t.Run("PrincipalHeader", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", func(c *Config) { c.PrincipalHeader = "X-User" })
		// Authorization is ignored: without X-User nothing is stored.
		f.send(t, req{key: "p-1", body: "x"}).expect(t, http.StatusCreated, "")
		f.send(t, req{key: "p-1", body: "x"}).expect(t, http.StatusCreated, "")
		alice := http.Header{"X-User": {"alice"}}
		f.send(t, req{key: "p-1", body: "x", header: alice}).expect(t, http.StatusCreated, "")
		if r := f.send(t, req{key: "p-1", body: "x", header: alice, auth: "Bearer other"}); !r.replayed() {
			t.Fatalf("same X-User, other Authorization: %d %q, want a replay", r.status, r.body)
		}
		bob := http.Header{"X-User": {"bob"}}
		if r := f.send(t, req{key: "p-1", body: "x", header: bob}); r.replayed() {
			t.Fatal("a response crossed principals")
		}
		if n := up.calls.Load(); n != 4 {
			t.Fatalf("upstream called %d times, want 4", n)
		}
	})

	t.Run("PrincipalsApart", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", nil)
		a := f.send(t, req{key: "same", body: "x", auth: "Bearer alice"}).expect(t, http.StatusCreated, "")
		b := f.send(t, req{key: "same", body: "x", auth: "Bearer bob"}).expect(t, http.StatusCreated, "")
		if b.replayed() || sameReply(a, b) || up.calls.Load() != 2 {
			t.Fatal("a response crossed principals")
		}
		if got := up.last().header.Get("Authorization"); got != "Bearer bob" {
			t.Fatalf("Authorization not forwarded: %q", got)
		}
	})

	t.Run("SafeMethodsPassThrough", func(t *testing.T) {
		t.Parallel()
		f, up, st, _ := setup(t, "Memory", nil)
		for range 2 {
			if r := f.send(t, req{method: http.MethodGet, key: "g-1"}).expect(t, http.StatusCreated, ""); r.replayed() {
				t.Fatal("GET replayed")
			}
		}
		if up.calls.Load() != 2 || st.(*memstore.Store).Len() != 0 {
			t.Fatalf("GET: %d upstream calls, %d records; want 2, 0", up.calls.Load(), st.(*memstore.Store).Len())
		}
	})

	t.Run("RedirectNotFollowed", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", nil)
		up.setHandler(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusSeeOther)
		})
		r := f.send(t, req{key: "r-1", body: "x"}).expect(t, http.StatusSeeOther, "")
		if r.header.Get("Location") != "/elsewhere" || up.calls.Load() != 1 {
			t.Fatalf("redirect: Location %q, %d upstream calls", r.header.Get("Location"), up.calls.Load())
		}
	})

	t.Run("PathAndQuery", func(t *testing.T) {
		t.Parallel()
		up := newUpstream(t)
		base := *up.url
		base.Path = "/api"
		st := openStores(t, "Memory", 1, nil)[0]
		f := newFront(t, Config{Upstream: &base, Store: st})
		f.send(t, req{path: "/charges?b=2&a=1", key: "q-1", body: "x"}).expect(t, http.StatusCreated, "")
		if got := up.last(); got.path != "/api/charges" || got.query != "b=2&a=1" {
			t.Fatalf("upstream got %s?%s", got.path, got.query)
		}
		// Another query is another request.
		f.send(t, req{path: "/charges?a=2", key: "q-1", body: "x"}).expect(t, http.StatusUnprocessableEntity, "idempotency-key-reused")
	})

	t.Run("BodyTooLarge", func(t *testing.T) {
		t.Parallel()
		f, up, st, _ := setup(t, "Memory", func(c *Config) { c.MaxBody = 16 })
		f.send(t, req{key: "big", body: strings.Repeat("x", 17)}).expect(t, http.StatusRequestEntityTooLarge, "body-too-large")
		if up.calls.Load() != 0 || st.(*memstore.Store).Len() != 0 {
			t.Fatal("an oversized body was forwarded or stored")
		}
		f.send(t, req{key: "big", body: strings.Repeat("x", 16)}).expect(t, http.StatusCreated, "")
	})

	t.Run("RequireKey", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", func(c *Config) { c.RequireKey = true })
		f.send(t, req{body: "x"}).expect(t, http.StatusBadRequest, "idempotency-key-missing")
		if up.calls.Load() != 0 {
			t.Fatal("a request without its required key was forwarded")
		}
	})
}

// With WaitInFlight, identical concurrent requests wait for the first one's
// answer and get its replay: one forwarded, none answered 409.
func TestWaitInFlight(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "SQLite", func(c *Config) { c.WaitInFlight = 10 * time.Second })
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond) // the duplicates arrive meanwhile
		w.Header().Set("Location", "/charges/ch_1")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	})
	replies := concurrently(t, 16, req{key: "order-7", body: `{"amount":100}`}, f)
	checkOnce(t, replies)
	for _, r := range replies {
		if r.status == http.StatusConflict {
			t.Fatalf("a duplicate was answered 409 while it could wait: %q", r.body)
		}
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("the upstream saw %d calls, want 1", n)
	}
}
