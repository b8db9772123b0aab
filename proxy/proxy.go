package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store"
)

// Defaults and bounds of Config.
const (
	DefaultUpstreamTimeout = 30 * time.Second
	MaxUpstreamTimeout     = 24 * time.Hour
	// DefaultUnknownHold is the least default of Config.UnknownHold.
	DefaultUnknownHold = 10 * time.Minute
)

// Config configures a Proxy. Upstream and Store are required; the zero
// value of every other field means its default.
type Config struct {
	// Upstream is where requests are forwarded: scheme (http or https),
	// host, and optionally a base path that request paths are joined to.
	// Required.
	Upstream *url.URL

	// Store keeps the keys. Several proxies that share one store (the same
	// PostgreSQL schema, SQLite file or Redis prefix) and front the same
	// upstream share their keys. The proxy does not close it. Required.
	Store store.Store

	// PrincipalHeader names a header, set by a trusted gateway in front of
	// the proxy, whose value is the caller's identity. Requests without it
	// pass through untouched and are never stored. Defaults to "": the
	// principal is a hash of the Authorization value (its scheme's case
	// folded), so a retry after a token refresh is a new caller (see the
	// package doc), and requests without credentials pass through.
	PrincipalHeader string

	// Methods take part in idempotency; others pass through. Defaults to
	// POST and PATCH.
	Methods []string

	// RequireKey answers 400 idempotency-key-missing to a participating
	// request without an Idempotency-Key. Defaults to false: such requests
	// pass through and nothing is stored.
	RequireKey bool

	// Lease is how long a claim holds a key before another request may take
	// it over; it is extended while the upstream call runs, and after a lost
	// answer it is how long retries get 409 outcome-unknown. Defaults to
	// key.DefaultLease (30s).
	Lease time.Duration

	// Retention is how long a completed key replays its response. Defaults
	// to key.DefaultRetention (24h).
	Retention time.Duration

	// MaxBody is the largest request body accepted from a participating
	// request (413 body-too-large beyond it, before anything is claimed or
	// forwarded). Defaults to httpidem's default (1 MiB).
	MaxBody int64

	// MaxResponse is the largest upstream response body stored for replay;
	// a larger one is delivered once and its key completed without it.
	// Defaults to httpidem's default (1 MiB).
	MaxResponse int64

	// SignificantHeaders are request headers hashed into the fingerprint
	// next to method, path, query and body. Defaults to none.
	SignificantHeaders []string

	// UpstreamTimeout bounds one upstream exchange, from sending the
	// request to the end of its response body (for a switch of protocols,
	// to the 101: the tunnel after it is not bounded). Defaults to
	// DefaultUpstreamTimeout (30s).
	UpstreamTimeout time.Duration

	// UnknownHold is how long a key whose upstream answer was lost (a
	// timeout or reset after the request was sent) stays held: retries get
	// 409 outcome-unknown until it ends, then the next is forwarded again.
	// An upstream may go on working after the proxy gave up on it, so this
	// is what "at most once" rests on: a request is forwarded at most once
	// per key as long as the upstream finishes (or abandons) each request
	// within UnknownHold of receiving it. At least UpstreamTimeout.
	// Defaults to DefaultUnknownHold (10 min) or twice UpstreamTimeout,
	// whichever is longer.
	UnknownHold time.Duration

	// WaitInFlight is how long a duplicate of a request in flight waits
	// for it before it is answered 409 request-in-flight: when the first
	// attempt completes meanwhile, the duplicate gets its replay
	// (key.Config.WaitInFlight). At most UpstreamTimeout. Defaults to 0:
	// 409 at once.
	WaitInFlight time.Duration

	// RecordTimeout is how long the proxy keeps trying to record an
	// upstream answer that the store did not take (it failed while the
	// upstream acted); meanwhile the key stays held and its retries are
	// refused, and once the store answers they get the replay. Defaults to
	// key.DefaultRecordTimeout (1h), or Retention if shorter.
	RecordTimeout time.Duration

	// BodyTimeout bounds reading a participating request's body (408
	// body-timeout after it). Defaults to httpidem's default (30s).
	BodyTimeout time.Duration

	// MemoryBudget bounds the request and response bodies buffered at once
	// (503 server-busy for a request body that does not fit). Defaults to
	// httpidem's default (32 MiB, or MaxBody + MaxResponse if larger).
	MemoryBudget int64

	// Transport sends requests upstream. It must honour
	// net/http/httptrace (http.Transport does): the proxy learns from
	// WroteRequest whether a failed request reached the upstream. Defaults
	// to an http.Transport of the proxy's own, without an outbound proxy.
	Transport http.RoundTripper

	// ProblemBase is the prefix of problem type URIs. Defaults to
	// problem.DefaultBase.
	ProblemBase string

	// Hooks are told of outcomes, upstream latencies and upstream
	// failures, for metrics (prom.Proxy makes Prometheus ones). Defaults to
	// none.
	Hooks Hooks

	// Logger receives upstream failures and warnings. Defaults to
	// discarding.
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.UpstreamTimeout == 0 {
		out.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if out.UnknownHold == 0 {
		out.UnknownHold = max(DefaultUnknownHold, 2*out.UpstreamTimeout)
	}
	if out.MaxResponse == 0 {
		out.MaxResponse = httpidem.DefaultMaxResponse
	}
	if out.Transport == nil {
		out.Transport = newTransport()
	}
	if out.ProblemBase == "" {
		out.ProblemBase = problem.DefaultBase
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.Hooks = out.Hooks.withDefaults()
	return out
}

// ErrBadConfig is wrapped by the error New returns when a Config field is
// missing or out of range; the message names the field.
var ErrBadConfig = errors.New("proxy: bad config")

func (c *Config) validate() error {
	switch {
	case c.Upstream == nil:
		return fmt.Errorf("%w: Config.Upstream is required", ErrBadConfig)
	case c.Upstream.Scheme != "http" && c.Upstream.Scheme != "https":
		return fmt.Errorf("%w: Config.Upstream %q: scheme must be http or https", ErrBadConfig, c.Upstream.Redacted())
	case c.Upstream.Host == "":
		return fmt.Errorf("%w: Config.Upstream %q has no host", ErrBadConfig, c.Upstream.Redacted())
	case c.Store == nil:
		return fmt.Errorf("%w: Config.Store is required", ErrBadConfig)
	case c.UpstreamTimeout < 0 || c.UpstreamTimeout > MaxUpstreamTimeout:
		return fmt.Errorf("%w: Config.UpstreamTimeout %v out of range (0, %v]", ErrBadConfig, c.UpstreamTimeout, MaxUpstreamTimeout)
	case c.WaitInFlight < 0 || c.WaitInFlight > c.UpstreamTimeout:
		return fmt.Errorf("%w: Config.WaitInFlight %v out of range [0, UpstreamTimeout=%v]", ErrBadConfig, c.WaitInFlight, c.UpstreamTimeout)
	case c.UnknownHold < c.UpstreamTimeout:
		return fmt.Errorf("%w: Config.UnknownHold %v is shorter than UpstreamTimeout %v: a retry could be forwarded while the first attempt still runs", ErrBadConfig, c.UnknownHold, c.UpstreamTimeout)
	}
	return nil
}

// Proxy is an http.Handler that forwards requests to the upstream behind
// the Idempotency-Key contract. It is safe for concurrent use.
type Proxy struct {
	handler   http.Handler
	store     store.Store
	guard     *key.Guard
	transport http.RoundTripper
	mw        *httpidem.Middleware
	hooks     Hooks
	serving   atomic.Int64 // requests being served, for Stats
	base      string
	principal principalHeader

	// stop ends the upstream calls still running when Close is called.
	stop     context.Context
	stopCall context.CancelFunc

	mu       sync.RWMutex
	closed   bool
	inFlight sync.WaitGroup
}

// New returns a proxy to cfg.Upstream over cfg.Store.
func New(cfg *Config) (*Proxy, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	g, err := key.New(c.Store, &key.Config{
		Lease: c.Lease, Retention: c.Retention, UnknownHold: c.UnknownHold, RecordTimeout: c.RecordTimeout, Logger: c.Logger,
		WaitInFlight: c.WaitInFlight,
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	principal := authorizationHeader()
	if c.PrincipalHeader != "" {
		principal = gatewayHeader(c.PrincipalHeader)
	}
	mw, err := httpidem.New(g, &httpidem.Config{
		Principal:          principal.get,
		Methods:            c.Methods,
		RequireKey:         c.RequireKey,
		MaxBody:            c.MaxBody,
		MaxResponse:        c.MaxResponse,
		BodyTimeout:        c.BodyTimeout,
		MemoryBudget:       c.MemoryBudget,
		SignificantHeaders: c.SignificantHeaders,
		ProblemBase:        c.ProblemBase,
		OnOutcome:          func(_ *http.Request, o httpidem.Outcome) { c.Hooks.OnOutcome(o) },
		Logger:             c.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	p := &Proxy{store: c.Store, guard: g, mw: mw, transport: c.Transport, hooks: c.Hooks, base: c.ProblemBase, principal: principal}
	p.stop, p.stopCall = context.WithCancel(context.Background())
	f := newForwarder(&c, p.stop, participation(c.Methods, principal.get))
	p.handler = mw.Wrap(f)
	return p, nil
}

// ServeHTTP serves one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c := connFrom(r.Context()); c != nil {
		if ferr := c.refused.Load(); ferr != nil {
			// RFC 9112 §6.1: close the connection after answering, so
			// that nothing after the request is read as another one.
			w.Header().Set("Connection", "close")
			problem.Write(w, p.base, problem.SlugFramingAmbiguous, http.StatusBadRequest, ferr.detail)
			return
		}
	}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		w.Header().Set("Retry-After", "1")
		problem.Write(w, p.base, problem.SlugProxyClosed, http.StatusServiceUnavailable,
			"This proxy is shutting down; retry, another instance may answer.")
		return
	}
	p.inFlight.Add(1)
	p.mu.RUnlock()
	defer p.inFlight.Done()
	p.serving.Add(1)
	defer p.serving.Add(-1)
	if dotSegment(r.URL.Path) {
		problem.Write(w, p.base, problem.SlugPathInvalid, http.StatusBadRequest,
			`The path has a "." or ".." segment (literal or percent-encoded), which could lead outside the upstream's base path; send it without.`)
		return
	}
	if _, _, err := p.principal.of(r); err != nil {
		// Whichever line the upstream reads, the proxy cannot know the
		// caller it answers.
		problem.Write(w, p.base, problem.SlugHeaderRepeated, http.StatusBadRequest,
			"The "+p.principal.name+" header is sent more than once, with different values; send it once.")
		return
	}
	p.handler.ServeHTTP(w, r)
}

// Close aborts the upstream calls still running, refuses new requests
// with 503, and returns when every request being served has returned.
// An aborted call that had reached the upstream has an unknown outcome:
// its key answers 409 outcome-unknown for UnknownHold. Call it after
// http.Server.Shutdown has given in-flight requests their chance to finish,
// then Drain. It closes the transport's idle connections, not the store.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stopCall()
	p.inFlight.Wait()
	if t, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}

// Drain waits, until ctx ends, for the upstream answers the proxy is still
// trying to record because the store failed when they came (see
// Config.RecordTimeout). Call it after Close and before closing the store:
// an answer not yet recorded when the process exits is lost, and a retry
// after the lease may then reach the upstream again.
func (p *Proxy) Drain(ctx context.Context) error { return p.guard.Drain(ctx) }

// dotSegment reports whether path (decoded: %2E is a dot, %2F a slash)
// has a "." or ".." segment. Its request is refused, not normalised: the
// upstream gets the path as the client sent it, or nothing, and a client
// that sends dot segments is probing. A backslash separates segments too,
// as some servers read it.
func dotSegment(path string) bool {
	for seg := range strings.FieldsFuncSeq(path, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// readyKey is read by Ready. Keys written by package key are 32-byte
// hashes; this one is not, so it never names a record.
const readyKey = "idem:proxy:readiness-probe"

// Ready reports whether the store answers: one cheap read of a key that
// does not exist.
func (p *Proxy) Ready(ctx context.Context) error {
	if _, err := p.store.Get(ctx, readyKey); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("proxy: store not ready: %w", err)
	}
	return nil
}
