package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/problem"
)

// errClosed ends the upstream calls still running when the proxy closes.
var errClosed = errors.New("proxy: closed while waiting for the upstream")

// exchange is what the forwarder knows about one request while the
// reverse proxy handles it.
type exchange struct {
	// in is the request as the middleware handed it over: MarkUnknown must
	// be called with it.
	in *http.Request
	// participating is true when the middleware claimed a key for it.
	participating bool
	// responded is set when the upstream's response headers arrived.
	responded bool
	// buf holds the prefetched response body; back to the pool at the end.
	buf *bytes.Buffer
	// handshake, for a request to switch protocols, is UpstreamTimeout
	// until the upstream answers: a tunnel after 101 outlives it.
	handshake *time.Timer
	// lost records, once, that the upstream's answer was lost.
	lost sync.Once
}

type exchangeKey struct{}

func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// forwarder is the handler behind the middleware: an
// httputil.ReverseProxy to the upstream, with failures classified.
type forwarder struct {
	rp           *httputil.ReverseProxy
	timeout      time.Duration
	maxResponse  int64
	stop         context.Context
	participates func(*http.Request) bool
	base         string
	hooks        Hooks
	logger       *slog.Logger
	// buffers recycles the buffers of prefetched response bodies.
	buffers sync.Pool
}

// copyBuffers recycles the buffers ReverseProxy copies a response body
// through, which it would otherwise allocate, 32 KiB, for every response:
// half of what a proxied request allocated, whatever its body's size.
type copyBuffers struct{ pool sync.Pool }

// copyBufferSize is ReverseProxy's own size for the buffer.
const copyBufferSize = 32 << 10

func (c *copyBuffers) Get() []byte {
	if b, ok := c.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, copyBufferSize)
}

func (c *copyBuffers) Put(b []byte) {
	if cap(b) == copyBufferSize {
		b = b[:copyBufferSize]
		c.pool.Put(&b)
	}
}

// participation returns whether a request that reached the forwarder
// holds a claim: the middleware let it through with a participating
// method, a principal and a key (a request with an invalid key never gets
// here).
func participation(methods []string, principal func(*http.Request) (string, bool)) func(*http.Request) bool {
	if len(methods) == 0 {
		methods = []string{http.MethodPost, http.MethodPatch} // httpidem's default
	}
	return func(r *http.Request) bool {
		if !slices.Contains(methods, r.Method) || len(r.Header.Values("Idempotency-Key")) == 0 {
			return false
		}
		_, ok := principal(r)
		return ok
	}
}

func newForwarder(c *Config, stop context.Context, participates func(*http.Request) bool) *forwarder {
	f := &forwarder{
		timeout:      c.UpstreamTimeout,
		maxResponse:  c.MaxResponse,
		stop:         stop,
		participates: participates,
		base:         c.ProblemBase,
		hooks:        c.Hooks,
		logger:       c.Logger,
	}
	upstream := *c.Upstream
	f.rp = &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { f.rewrite(pr, &upstream) },
		Transport:      &tracingTransport{base: c.Transport, observe: c.Hooks.OnUpstream},
		ModifyResponse: f.modifyResponse,
		ErrorHandler:   f.errorHandler,
		ErrorLog:       slog.NewLogLogger(c.Logger.Handler(), slog.LevelWarn),
		BufferPool:     new(copyBuffers),
	}
	return f
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{in: r, participating: f.participates(r)}
	ctx, cancel := context.WithCancelCause(r.Context())
	if ex.participating {
		// A client that gives up does not end the upstream call: its
		// answer is then stored, and the client's retry replays it
		// instead of waiting out the lease. A claim lost to another
		// holder does end it: going on could only do harm.
		ctx, cancel = context.WithCancelCause(context.WithoutCancel(r.Context()))
		defer context.AfterFunc(r.Context(), func() {
			if cause := context.Cause(r.Context()); errors.Is(cause, key.ErrFenced) {
				cancel(cause)
			}
		})()
	}
	defer cancel(nil)
	defer context.AfterFunc(f.stop, func() { cancel(errClosed) })()
	if upgrade(r.Header) && !ex.participating {
		// A deadline cannot be lifted once the tunnel is up: a timer
		// bounds the wait for the upstream's answer instead.
		ex.handshake = time.AfterFunc(f.timeout, func() { cancel(context.DeadlineExceeded) })
		defer ex.handshake.Stop()
	} else {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, f.timeout)
		defer cancelTimeout()
	}
	ctx = context.WithValue(ctx, exchangeKey{}, ex)
	f.rp.ServeHTTP(w, r.WithContext(ctx))
	if ex.buf != nil {
		f.putBuffer(ex.buf)
	}
}

// rewrite builds the upstream request. ReverseProxy has already removed the
// hop-by-hop headers (Connection, Keep-Alive, Proxy-*, TE, Trailer,
// Transfer-Encoding, Upgrade, and those Connection lists).
func (f *forwarder) rewrite(pr *httputil.ProxyRequest, upstream *url.URL) {
	pr.SetURL(upstream)
	pr.SetXForwarded()
	// The key the middleware used reaches the upstream unchanged, even if
	// the client listed it in Connection, so that an idempotent upstream
	// dedups too.
	if v, ok := pr.In.Header["Idempotency-Key"]; ok {
		pr.Out.Header["Idempotency-Key"] = slices.Clone(v)
	}
	if ex := exchangeFrom(pr.Out.Context()); ex != nil && ex.participating {
		// A tunnel cannot be stored nor replayed: the upstream is not
		// offered to switch protocols (ReverseProxy put the offer back).
		pr.Out.Header.Del("Connection")
		pr.Out.Header.Del("Upgrade")
		// http.Transport silently re-sends a request that carries an
		// Idempotency-Key and has no body (or a GetBody) when a reused
		// connection breaks after it was written: the upstream might run
		// it twice, and the proxy would never know. A body it cannot
		// rewind forbids that (an empty body goes out chunked).
		pr.Out.GetBody = nil
		if pr.Out.Body == nil || pr.Out.Body == http.NoBody {
			pr.Out.Body = emptyBody{}
		}
	}
}

// emptyBody is a request body with nothing in it that http.Transport cannot
// rewind.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// modifyResponse runs when the upstream's response headers arrived. For a
// request that holds a claim it reads the body, up to one byte more than
// Config.MaxResponse, before the reverse proxy hands the status to the
// middleware: an error while reading means the answer was lost after the
// upstream acted, and must be answered as such (a clean 502 or 504, key
// kept as unknown), never as the upstream's status with a cut body. Past
// MaxResponse the middleware completes the key without the body (it is
// never stored, nor run again) and the rest streams through.
func (f *forwarder) modifyResponse(res *http.Response) error {
	ex := exchangeFrom(res.Request.Context())
	if ex == nil {
		return nil
	}
	ex.responded = true
	if res.StatusCode == http.StatusSwitchingProtocols {
		return f.switched(ex)
	}
	watched := &watchedBody{ReadCloser: res.Body, f: f, ex: ex}
	if !ex.participating || res.Body == http.NoBody {
		res.Body = watched
		return nil
	}
	if res.ProtoMajor == 1 && res.ContentLength < 0 && len(res.TransferEncoding) == 0 {
		// The body ends where the upstream closes the connection: whole or
		// cut, it reads the same. Deliver it, never store it.
		httpidem.MarkNotStored(ex.in)
	}
	ex.buf = f.getBuffer()
	n, err := ex.buf.ReadFrom(io.LimitReader(res.Body, f.maxResponse+1))
	if err != nil {
		return &upstreamError{sent: true, err: err}
	}
	var rd io.Reader = bytes.NewReader(ex.buf.Bytes())
	if n > f.maxResponse {
		rd = io.MultiReader(rd, watched)
	}
	res.Body = struct {
		io.Reader
		io.Closer
	}{rd, res.Body}
	return nil
}

// switched lets a 101 Switching Protocols through: ReverseProxy tunnels
// through its body (which must stay the upstream connection), for as long
// as both sides keep it open, or until Close. The client's connection now
// carries the tunnel, not requests: a Listener stops scanning it. A
// request that holds a claim was not offered to switch: the upstream
// answered what it was not asked, and its outcome is unknown.
func (f *forwarder) switched(ex *exchange) error {
	if ex.participating || ex.handshake == nil {
		return &upstreamError{sent: true, err: errors.New("proxy: the upstream switched protocols unasked")}
	}
	ex.handshake.Stop()
	if c := connFrom(ex.in.Context()); c != nil {
		c.tunnel.Store(true)
	}
	return nil
}

// upgrade reports whether h asks to switch protocols, as ReverseProxy
// reads it: Connection lists "upgrade", and Upgrade names a protocol.
func upgrade(h http.Header) bool {
	if h.Get("Upgrade") == "" {
		return false
	}
	for _, v := range h["Connection"] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return true
			}
		}
	}
	return false
}

// maxPooledBuffer is the largest prefetch buffer kept for reuse; larger
// ones are left to the collector.
const maxPooledBuffer = 64 << 10

func (f *forwarder) getBuffer() *bytes.Buffer {
	if b, ok := f.buffers.Get().(*bytes.Buffer); ok {
		return b
	}
	return new(bytes.Buffer)
}

func (f *forwarder) putBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBuffer {
		b.Reset()
		f.buffers.Put(b)
	}
}

// watchedBody reports a failed read of the upstream body as a lost answer.
type watchedBody struct {
	io.ReadCloser
	f  *forwarder
	ex *exchange
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.f.lost(b.ex, err, "reading the upstream response body")
	}
	return n, err
}

// lost records that ex's answer was lost after the upstream got it.
func (f *forwarder) lost(ex *exchange, err error, during string) {
	ex.lost.Do(func() {
		f.hooks.OnUpstreamError(UpstreamUnknown)
		httpidem.MarkUnknown(ex.in, err)
		f.logger.WarnContext(ex.in.Context(), "upstream answer lost: outcome unknown",
			"during", during, "method", ex.in.Method, "path", ex.in.URL.Path,
			"keyed", ex.participating, "err", err)
	})
}

// errorHandler answers when the upstream gave no response.
func (f *forwarder) errorHandler(w http.ResponseWriter, out *http.Request, err error) {
	ex := exchangeFrom(out.Context())
	var ue *upstreamError
	sent := ex != nil && (ex.responded || errors.As(err, &ue) && ue.sent)
	if !sent {
		f.hooks.OnUpstreamError(UpstreamUnreachable)
		if ex != nil {
			f.logger.WarnContext(ex.in.Context(), "upstream unreachable", "method", ex.in.Method, "path", ex.in.URL.Path, "err", err)
		}
		problem.Write(w, f.base, problem.SlugUpstreamUnreachable, http.StatusBadGateway,
			"The request did not reach the upstream: nothing happened there. Retry; with the same Idempotency-Key it is forwarded again.")
		return
	}
	f.lost(ex, err, "waiting for the upstream response")
	status := http.StatusBadGateway
	if timeout(err) || timeout(context.Cause(out.Context())) {
		status = http.StatusGatewayTimeout
	}
	problem.Write(w, f.base, problem.SlugUpstreamOutcomeUnknown, status,
		"The request reached the upstream but its answer was lost: it may have taken effect. "+
			"Retries with the same Idempotency-Key get 409 outcome-unknown until the lease ends, then the next one is forwarded again.")
}
