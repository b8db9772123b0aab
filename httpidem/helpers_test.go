package httpidem_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// t0 is where test clocks start.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	problemBase = "https://idem.dev/problems/"
	route       = "POST /charges"
)

// principalHeader carries the caller in tests; a real Principal reads
// authentication.
const principalHeader = "X-User"

func principalFromHeader(r *http.Request) (string, bool) {
	p := r.Header.Get(principalHeader)
	return p, p != ""
}

// bundle is what setup gives a test besides the handler.
type bundle struct {
	store    *fault.Store // the real memstore, behind a fault plan that passes everything
	clock    *testclock.Clock
	mw       *httpidem.Middleware
	outcomes *outcomeLog
}

// outcomeLog records OnOutcome calls.
type outcomeLog struct {
	mu   sync.Mutex
	list []httpidem.Outcome
}

func (l *outcomeLog) add(_ *http.Request, o httpidem.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, o)
}

func (l *outcomeLog) all() []httpidem.Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]httpidem.Outcome(nil), l.list...)
}

// setup returns middleware over a memstore with a settable clock (behind a
// fault wrapper, to count and fail calls). cfg may be nil; its Principal
// and OnOutcome are filled in when unset. The guard's heartbeat is off:
// the clock only moves when a test says so.
func setup(t *testing.T, cfg *httpidem.Config) *bundle {
	t.Helper()
	clock := testclock.New(t0)
	fs := fault.Wrap(memstore.New(&memstore.Config{Now: clock.Now}))
	g, err := key.New(fs, &key.Config{Lease: 30 * time.Second, Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{store: fs, clock: clock, outcomes: &outcomeLog{}}
	b.mw = newMiddleware(t, g, cfg, b.outcomes)
	return b
}

// other returns middleware over a second guard on b's store, with the same
// settings as setup's: another process sharing the store.
func (b *bundle) other(t *testing.T) *httpidem.Middleware {
	t.Helper()
	g, err := key.New(b.store, &key.Config{Lease: 30 * time.Second, Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	return newMiddleware(t, g, nil, b.outcomes)
}

func withDefaults(cfg *httpidem.Config, log *outcomeLog) *httpidem.Config {
	var c httpidem.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Principal == nil {
		c.Principal = principalFromHeader
	}
	if c.OnOutcome == nil && log != nil {
		c.OnOutcome = log.add
	}
	return &c
}

func newMiddleware(t testing.TB, g *key.Guard, cfg *httpidem.Config, log *outcomeLog) *httpidem.Middleware {
	t.Helper()
	m, err := httpidem.New(g, withDefaults(cfg, log))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mux serves h behind m at route, as a user would register it.
func mux(m *httpidem.Middleware, h http.Handler) *http.ServeMux {
	mx := http.NewServeMux()
	mx.Handle(route, m.Wrap(h))
	return mx
}

// counter is a handler that counts its calls and answers 201 with a body
// naming the call.
type counter struct{ n atomic.Int32 }

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.n.Add(1)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/"+itoa(int(n)))
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"call":`+itoa(int(n))+`,"body_len":`+itoa(len(body))+`}`)
}

func (c *counter) calls() int { return int(c.n.Load()) }

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// req builds a request from Alice with the key (none if k is "-").
func req(method, target, k, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.Header.Set(principalHeader, "alice")
	if k != "-" {
		r.Header.Set(httpidem.HeaderKey, k)
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// wantProblem checks an RFC 9457 answer with status and slug.
func wantProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, slug string) problem {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d (body %s)", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != httpidem.ProblemContentType {
		t.Fatalf("Content-Type %q, want %q", ct, httpidem.ProblemContentType)
	}
	var p problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if p.Type != problemBase+slug || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s%s, status %d, a title and a detail", p, problemBase, slug, status)
	}
	if rec.Header().Get(httpidem.HeaderReplayed) != "" {
		t.Fatalf("a problem must not say it was replayed")
	}
	return p
}

func wantRetryAfter(t *testing.T, rec *httptest.ResponseRecorder, want string) {
	t.Helper()
	if got := rec.Header().Get("Retry-After"); got != want {
		t.Fatalf("Retry-After %q, want %q", got, want)
	}
}

// scope is the scope the middleware builds for Alice at route.
func scope(k string) key.Scope {
	return key.Scope{Principal: "alice", Operation: route, Key: k}
}

func wantNoRecord(t *testing.T, s store.Store, sc key.Scope) {
	t.Helper()
	if rec, err := s.Get(context.Background(), sc.StoreKey()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("record for %+v: %+v, %v; want ErrNotFound", sc, rec, err)
	}
}

func record(t *testing.T, s store.Store, sc key.Scope) store.Record {
	t.Helper()
	rec, err := s.Get(context.Background(), sc.StoreKey())
	if err != nil {
		t.Fatalf("record for %+v: %v", sc, err)
	}
	return rec
}

// wantNoClaim checks that the store was never asked to claim.
func wantNoClaim(t *testing.T, b *bundle) {
	t.Helper()
	if n := b.store.Calls(fault.Claim); n != 0 {
		t.Fatalf("%d claims, want none", n)
	}
}

func wantCalls(t *testing.T, c *counter, n int) {
	t.Helper()
	if got := c.calls(); got != n {
		t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

func wantReplayOf(t *testing.T, first, again *httptest.ResponseRecorder) {
	t.Helper()
	if again.Code != first.Code || again.Body.String() != first.Body.String() {
		t.Fatalf("replay %d %q, want %d %q", again.Code, again.Body, first.Code, first.Body)
	}
	if again.Header().Get(httpidem.HeaderReplayed) != "true" {
		t.Fatalf("replay without %s: true", httpidem.HeaderReplayed)
	}
	if first.Header().Get(httpidem.HeaderReplayed) != "" {
		t.Fatalf("the first response says it was replayed")
	}
}
