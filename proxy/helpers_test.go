package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// t0 is where test clocks start.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// seen is a request as the upstream received it.
type seen struct {
	method, path, query string
	header              http.Header
	transferEncoding    []string
	body                []byte
}

// upstream is the API behind the proxy. By default it answers 201 with a
// JSON body holding a fresh random id, so that a replay is recognised by
// its bytes.
type upstream struct {
	t     testing.TB
	srv   *http.Server
	addr  string
	url   *url.URL
	calls atomic.Int64
	// handle, if set, answers instead of the default (after the request
	// was recorded and its body read).
	handle atomic.Pointer[func(w http.ResponseWriter, r *http.Request)]
	// keyed counts the requests that carried an Idempotency-Key.
	keyed atomic.Int64

	mu   sync.Mutex
	seen []seen
	wg   sync.WaitGroup
}

func newUpstream(tb testing.TB) *upstream {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := &upstream{t: tb, addr: ln.Addr().String()}
	u.url = &url.URL{Scheme: "http", Host: u.addr}
	u.serve(ln)
	tb.Cleanup(u.stop)
	return u
}

// serve starts serving on ln.
func (u *upstream) serve(ln net.Listener) {
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serveHTTP)}
	srv := u.srv
	u.wg.Go(func() { srv.Serve(ln) })
}

// stop closes the listener and every connection: the address now refuses
// connections.
func (u *upstream) stop() {
	u.srv.Close()
	u.wg.Wait()
}

// restart serves again on the same address.
func (u *upstream) restart() {
	ln, err := net.Listen("tcp", u.addr)
	if err != nil {
		u.t.Fatalf("listen again on %s: %v", u.addr, err)
	}
	u.serve(ln)
}

func (u *upstream) setHandler(h func(w http.ResponseWriter, r *http.Request)) { u.handle.Store(&h) }

func (u *upstream) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, seen{
		method: r.Method, path: r.URL.Path, query: r.URL.RawQuery,
		header: r.Header.Clone(), transferEncoding: r.TransferEncoding, body: body,
	})
	u.mu.Unlock()
	u.calls.Add(1)
	if r.Header.Get("Idempotency-Key") != "" {
		u.keyed.Add(1)
	}
	if h := u.handle.Load(); h != nil {
		(*h)(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/"+rand.Text())
	w.Header().Set("Set-Cookie", "session=1")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": rand.Text(), "method": r.Method, "bytes": len(body)})
}

// last returns the last request the upstream saw.
func (u *upstream) last() seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		u.t.Fatal("the upstream saw no request")
	}
	return u.seen[len(u.seen)-1]
}

// front is a proxy served over loopback, with a client of its own.
type front struct {
	p      *Proxy
	url    string
	addr   string // host:port, for raw connections
	client *http.Client
	counts *counts
	// served gets a value each time the proxy's ServeHTTP returns.
	served chan struct{}
}

// newFront starts a proxy with cfg (Upstream and Store set by the caller;
// Hooks set here), served as `idem proxy` serves it: on a Listener,
// with ConnContext.
func newFront(tb testing.TB, cfg Config) *front {
	tb.Helper()
	c := &counts{n: map[string]float64{}}
	cfg.Hooks = Hooks{
		OnOutcome:       func(o httpidem.Outcome) { c.add("outcome " + string(o)) },
		OnUpstreamError: func(kind string) { c.add("error " + kind) },
	}
	p, err := New(&cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	f := &front{p: p, counts: c, served: make(chan struct{}, 4096)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			select {
			case f.served <- struct{}{}:
			default:
			}
		}()
		p.ServeHTTP(w, r)
	}))
	srv.Listener = Listener(srv.Listener)
	srv.Config.ConnContext = ConnContext
	srv.Start()
	tb.Cleanup(srv.Close)
	f.url, f.addr = srv.URL, srv.Listener.Addr().String()
	tr := &http.Transport{MaxIdleConnsPerHost: 128}
	tb.Cleanup(tr.CloseIdleConnections)
	f.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f
}

// setup returns a proxy on a fresh store of kind with a settable clock
// (Postgres and Redis too), in front of a fresh upstream.
func setup(tb testing.TB, kind string, tweak func(*Config)) (*front, *upstream, store.Store, *testclock.Clock) {
	tb.Helper()
	up := newUpstream(tb)
	clock := testclock.New(t0)
	st := openStores(tb, kind, 1, clock.Now)[0]
	cfg := Config{Upstream: up.url, Store: st}
	if tweak != nil {
		tweak(&cfg)
	}
	return newFront(tb, cfg), up, st, clock
}

// req is a request to send through the proxy. Zero fields mean POST
// /charges as "Bearer alice" without a key.
type req struct {
	method, path, key, auth, body string
	header                        http.Header
	ctx                           context.Context
}

// reply is what the client got.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (f *front) send(tb testing.TB, q req) reply {
	tb.Helper()
	if q.method == "" {
		q.method = http.MethodPost
	}
	if q.path == "" {
		q.path = "/charges"
	}
	if q.auth == "" {
		q.auth = "Bearer alice"
	}
	if q.ctx == nil {
		q.ctx = context.Background()
	}
	r, err := http.NewRequestWithContext(q.ctx, q.method, f.url+q.path, strings.NewReader(q.body))
	if err != nil {
		tb.Fatal(err)
	}
	for k, vs := range q.header {
		r.Header[k] = vs
	}
	if q.key != "" {
		r.Header.Set("Idempotency-Key", q.key)
	}
	if q.auth != "-" {
		r.Header.Set("Authorization", q.auth)
	}
	res, err := f.client.Do(r)
	if err != nil {
		return reply{err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: body, err: err}
}

// must fails the test on a transport error.
func (r reply) must(tb testing.TB) reply {
	tb.Helper()
	if r.err != nil {
		tb.Fatalf("request failed: %v", r.err)
	}
	return r
}

// slug is the problem type's last path segment, or "".
func (r reply) slug() string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(r.body, &p) != nil {
		return ""
	}
	return p.Type[strings.LastIndexByte(p.Type, '/')+1:]
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// expect fails unless r has status and, when slug is set, that problem.
func (r reply) expect(tb testing.TB, status int, slug string) reply {
	tb.Helper()
	r.must(tb)
	if r.status != status || (slug != "" && r.slug() != slug) {
		tb.Fatalf("got %d %s %q, want %d %s", r.status, r.header.Get("Content-Type"), r.body, status, slug)
	}
	return r
}

// counts counts the proxy's Hooks calls.
type counts struct {
	mu sync.Mutex
	n  map[string]float64
}

func (c *counts) add(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[what]++
}

func (c *counts) get(what string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[what]
}

// outcomes returns how often Hooks.OnOutcome reported outcome.
func (f *front) outcomes(outcome string) float64 { return f.counts.get("outcome " + outcome) }

// waitServed waits until the proxy has returned from n more requests.
func (f *front) waitServed(tb testing.TB, n int) {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-f.served:
		case <-timeout:
			tb.Fatal("the proxy did not finish serving in 10s")
		}
	}
}

// drainServed forgets the requests served so far.
func (f *front) drainServed() {
	for {
		select {
		case <-f.served:
		default:
			return
		}
	}
}

// sameReply reports whether b replays a: same status, body and
// Content-Type.
func sameReply(a, b reply) bool {
	return a.status == b.status && bytes.Equal(a.body, b.body) && a.header.Get("Content-Type") == b.header.Get("Content-Type")
}

// upstreamErrors returns how often Hooks.OnUpstreamError reported kind.
func (f *front) upstreamErrors(kind string) float64 { return f.counts.get("error " + kind) }

// raw is a connection to the proxy for requests written by hand.
type raw struct {
	net.Conn
	br *bufio.Reader
}

// dial opens a raw connection to the proxy; every read or write on it
// fails after 30 s.
func (f *front) dial(tb testing.TB) *raw {
	tb.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &raw{Conn: c, br: bufio.NewReader(c)}
}

// exchange writes request, bytes as they go on the wire, and reads one
// response.
func (c *raw) exchange(tb testing.TB, request string) reply {
	tb.Helper()
	if _, err := io.WriteString(c, request); err != nil {
		tb.Fatal(err)
	}
	return c.read()
}

// read reads one response.
func (c *raw) read() reply {
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return reply{err: err}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: body, err: err}
}

// expectClosed fails unless the other side closes the connection, within
// 10 s, without sending anything more.
func (c *raw) expectClosed(tb testing.TB) {
	tb.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := c.br.ReadByte()
	switch {
	case err == nil:
		tb.Fatalf("the connection is still open: read %q", b)
	case errors.Is(err, os.ErrDeadlineExceeded):
		tb.Fatal("the connection is still open after 10 s")
	}
}
