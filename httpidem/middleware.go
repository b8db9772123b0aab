package httpidem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/key"
)

// Middleware puts request keys in front of net/http handlers. It is safe
// for concurrent use. Build it with New or NewTx.
type Middleware struct {
	s      settings
	budget *budget
	// claim asks the guard for a request's key: a session when the request
	// holds it, otherwise what to answer.
	claim func(ctx context.Context, req key.Request) (session, key.Result, error)
}

// session is a claimed request's key, settled once: complete with the
// response to store, or fail with the handler's error (released, or held
// as unknown). With NewTx it also holds the handler's transaction, which
// settling commits or rolls back.
type session interface {
	// context is the claim's: cancelled with key.ErrFenced if it is lost.
	context() context.Context
	// tx is the transaction TxFrom returns, or nil.
	tx() any
	complete(ctx context.Context, resp []byte) error
	fail(ctx context.Context, err error) error
}

// plain is the session of New: a key.Claim.
type plain struct{ *key.Claim }

func (s plain) context() context.Context { return s.Context() }
func (s plain) tx() any                  { return nil }
func (s plain) complete(ctx context.Context, resp []byte) error {
	_, err := s.Complete(ctx, resp)
	return err
}
func (s plain) fail(ctx context.Context, err error) error { return s.Fail(ctx, err) }

// inTx is the session of NewTx: a key.TxClaim and its transaction.
type inTx[TX any] struct {
	cl *key.TxClaim[TX]
	t  TX
}

func (s inTx[TX]) context() context.Context { return s.cl.Context() }
func (s inTx[TX]) tx() any                  { return s.t }
func (s inTx[TX]) complete(ctx context.Context, resp []byte) error {
	_, err := s.cl.Commit(ctx, s.t, resp)
	return err
}
func (s inTx[TX]) fail(ctx context.Context, err error) error { return s.cl.Rollback(ctx, s.t, err) }

// New returns middleware over g, for handlers whose effects are not written
// in the store's database (or that need no transaction).
func New(g *key.Guard, cfg *Config) (*Middleware, error) {
	if g == nil {
		return nil, errors.New("httpidem: New: guard is nil")
	}
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	return &Middleware{s: s, budget: &budget{limit: s.MemoryBudget}, claim: func(ctx context.Context, req key.Request) (session, key.Result, error) {
		cl, res, err := g.Claim(ctx, req)
		if cl == nil {
			return nil, res, err
		}
		return plain{cl}, res, nil
	}}, nil
}

// NewTx returns middleware over a transactional guard: each handler runs
// inside the store's transaction, which it gets with TxFrom[TX]; its writes
// and the stored response commit together, and a response that is not
// stored (see doc.go) rolls them back.
func NewTx[TX any](g *key.TxGuard[TX], cfg *Config) (*Middleware, error) {
	if g == nil {
		return nil, errors.New("httpidem: NewTx: guard is nil")
	}
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	return &Middleware{s: s, budget: &budget{limit: s.MemoryBudget}, claim: func(ctx context.Context, req key.Request) (session, key.Result, error) {
		cl, res, err := g.ClaimTx(ctx, req)
		if cl == nil {
			return nil, res, err
		}
		tx, err := cl.Begin() // on failure the claim is released: answered 503
		if err != nil {
			return nil, res, err
		}
		return inTx[TX]{cl, tx}, res, nil
	}}, nil
}

// Wrap returns h behind the middleware; m.Wrap is a
// func(http.Handler) http.Handler. Wrap a route's handler (the operation
// is then its pattern), or a whole *http.ServeMux (the middleware asks the
// mux for the pattern), or any other handler (the operation is the path).
func (m *Middleware) Wrap(h http.Handler) http.Handler {
	mux, _ := h.(*http.ServeMux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, h, mux) })
}

func (m *Middleware) outcome(r *http.Request, o Outcome) {
	if m.s.OnOutcome != nil {
		m.s.OnOutcome(r, o)
	}
}

func (m *Middleware) passThrough(w http.ResponseWriter, r *http.Request, h http.Handler) {
	defer m.outcome(r, OutcomePassthrough)
	h.ServeHTTP(w, r)
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, h http.Handler, mux *http.ServeMux) {
	if !slices.Contains(m.s.methods, r.Method) {
		if up := strings.ToUpper(r.Method); up != r.Method && slices.Contains(m.s.methods, up) {
			// Method names are case-sensitive, but many servers take "post"
			// for POST: passing it unguarded would let a keyed request run
			// twice.
			m.problem(w, r, OutcomeInvalidMethod, SlugMethodInvalid, http.StatusBadRequest,
				"method names are case-sensitive: "+r.Method+" is not "+up+"; send "+up)
			return
		}
		h.ServeHTTP(w, r)
		return
	}
	principal, ok := m.s.Principal(r)
	if !ok || principal == "" {
		m.passThrough(w, r, h)
		return
	}
	k, err := parseKey(r.Header[HeaderKey])
	switch {
	case errors.Is(err, errKeyAbsent) && !m.s.RequireKey:
		m.passThrough(w, r, h)
		return
	case errors.Is(err, errKeyAbsent):
		m.problem(w, r, OutcomeMissingKey, SlugKeyMissing, http.StatusBadRequest,
			"this endpoint requires an Idempotency-Key header")
		return
	case errors.Is(err, errKeyEmpty):
		m.problem(w, r, OutcomeMissingKey, SlugKeyMissing, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		m.problem(w, r, OutcomeInvalidKey, SlugKeyInvalid, http.StatusBadRequest, err.Error())
		return
	}
	reqCharge := &charge{b: m.budget}
	defer reqCharge.done()
	body, err := m.readBody(w, r, reqCharge)
	if err != nil {
		m.bodyFailed(w, r, err)
		return
	}
	fp, older, err := m.s.request(r, body)
	if err != nil {
		m.problem(w, r, OutcomeInvalidBody, SlugBodyInvalidJSON, http.StatusBadRequest, err.Error())
		return
	}
	req := key.Request{
		Scope:          key.Scope{Principal: principal, Operation: m.operation(r, mux), Key: k},
		Fingerprint:    fp,
		FingerprintFor: older,
	}
	m.guarded(w, r, h, req, body)
}

// bodyFailed answers a body that could not be read whole. The rest of it
// is never read, so the connection is closed after the answer.
func (m *Middleware) bodyFailed(w http.ResponseWriter, r *http.Request, err error) {
	w.Header().Set("Connection", "close")
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		m.problem(w, r, OutcomeBodyTooLarge, SlugBodyTooLarge, http.StatusRequestEntityTooLarge,
			"the request body is larger than "+strconv.FormatInt(m.s.MaxBody, 10)+" bytes")
		return
	}
	switch {
	case errors.Is(err, errOverBudget):
		w.Header().Set("Retry-After", "1")
		m.problem(w, r, OutcomeBusy, SlugServerBusy, http.StatusServiceUnavailable,
			"too many request bodies are held in memory right now; retry with the same Idempotency-Key")
	case errors.Is(err, os.ErrDeadlineExceeded):
		m.problem(w, r, OutcomeBodyTimeout, SlugBodyTimeout, http.StatusRequestTimeout,
			"the request body did not arrive within "+m.s.BodyTimeout.String()+"; nothing was done")
	default:
		m.problem(w, r, OutcomeInvalidBody, SlugBodyUnreadable, http.StatusBadRequest,
			"the request body could not be read")
	}
}

// operation names the request's operation (see Config.Operation).
func (m *Middleware) operation(r *http.Request, mux *http.ServeMux) string {
	if m.s.Operation != nil {
		if op := m.s.Operation(r); op != "" {
			return op
		}
	}
	p := r.Pattern
	if p == "" && mux != nil {
		_, p = mux.Handler(r)
	}
	if p == "" {
		return r.Method + " " + r.URL.Path
	}
	// A pattern is "[METHOD ][HOST]/[PATH]": drop the method, r.Method says it.
	if !strings.HasPrefix(p, "/") {
		if i := strings.IndexAny(p, " \t"); i >= 0 {
			p = strings.TrimLeft(p[i:], " \t")
		}
	}
	return r.Method + " " + p
}

// readBody reads the whole body, at most MaxBody bytes: a longer one (by
// its Content-Length, or once MaxBody+1 bytes were read) is an
// *http.MaxBytesError, and no more of it is read. The limit goes through
// http.MaxBytesReader so that the server closes the connection after the
// answer instead of draining the rest. The body's bytes are read as sent:
// a Content-Encoding is never decoded. Reading is bounded by BodyTimeout
// (os.ErrDeadlineExceeded), and the buffer by the memory budget, charged
// to ch by the declared length up front and as the buffer grows
// (errOverBudget).
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request, ch *charge) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > m.s.MaxBody {
		return nil, &http.MaxBytesError{Limit: m.s.MaxBody}
	}
	if r.ContentLength > 0 && !ch.grow(int(r.ContentLength)+1, false) {
		return nil, errOverBudget
	}
	if m.s.BodyTimeout > 0 {
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(m.s.BodyTimeout)) == nil {
			defer rc.SetReadDeadline(time.Time{})
		}
	}
	// Trust a declared length for the first allocation only up to a point:
	// a client that declares MaxBody and sends nothing costs little.
	size := 512
	if r.ContentLength >= 0 {
		size = int(min(r.ContentLength+1, 256<<10)) // +1: room for the read that sees EOF
	}
	buf := make([]byte, 0, size)
	rd := http.MaxBytesReader(w, r.Body, m.s.MaxBody)
	for {
		if len(buf) == cap(buf) {
			grown := append(buf, 0)[:len(buf)]
			if !ch.grow(cap(grown), false) {
				return nil, errOverBudget
			}
			buf = grown
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// errNotStored is the session's failure for a response that is not
// stored: the claim is released (and a transaction rolled back).
var errNotStored = errors.New("httpidem: response status is not stored")

// errHandlerPanicked is the session's failure when the handler panicked.
var errHandlerPanicked = errors.New("httpidem: handler panicked")

func (m *Middleware) guarded(w http.ResponseWriter, r *http.Request, h http.Handler, req key.Request, body []byte) {
	// The claim's context does not end with the client's connection: a
	// claim whose handler ran must be completed (or released) even if the
	// client has gone.
	gctx := context.WithoutCancel(r.Context())
	sess, res, err := m.claim(gctx, req)
	if sess == nil {
		m.answer(w, r, res, err)
		return
	}

	st := &reqState{tx: sess.tx()}
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), stateKey{}, st))
	defer cancel(nil)
	// If the heartbeat finds the claim taken over, the handler's context
	// ends with key.ErrFenced, so it can stop before doing more harm.
	cctx := sess.context()
	stopFence := context.AfterFunc(cctx, func() {
		if cause := context.Cause(cctx); errors.Is(cause, key.ErrFenced) {
			cancel(cause)
		}
	})
	r2 := r.WithContext(ctx)
	r2.Body, r2.GetBody = http.NoBody, nil
	if len(body) > 0 {
		// No GetBody: with it, net/http's client silently sends a request
		// that carries an Idempotency-Key again when a reused connection
		// breaks after writing it, and a handler forwarding the request
		// would deliver it twice without knowing.
		r2.Body = io.NopCloser(bytes.NewReader(body))
	}
	cw := &capture{
		m: m, w: w, r: r, st: st, sess: sess, settleCtx: gctx, stopFence: stopFence,
		h: w.Header().Clone(), max: int(m.s.MaxResponse), charge: &charge{b: m.budget},
	}
	defer cw.charge.done()
	if cw.h == nil {
		cw.h = http.Header{}
	}
	m.execute(cw, h, r2)
}

// execute runs the handler into cw and settles the key. A panic (or
// runtime.Goexit) in the handler releases the claim, then goes on
// unchanged, as if there were no middleware: net/http logs it (except
// http.ErrAbortHandler) and drops the connection. If the handler had called
// MarkUnknown before it panicked (httputil.ReverseProxy panics with
// http.ErrAbortHandler when copying a response fails), the claim is kept
// instead: the effect may have happened, so no retry may run it before the
// lease ends.
func (m *Middleware) execute(cw *capture, h http.Handler, r *http.Request) {
	returned := false
	defer func() {
		if !returned && !cw.handedOver {
			if cause := cw.st.unknownCause(); cause != nil {
				cw.settle(handled{err: key.MarkUnknown(fmt.Errorf("%w (then the handler panicked)", cause))})
				m.outcome(cw.r, OutcomeMarkedUnknown)
				return
			}
			cw.settle(handled{err: errHandlerPanicked})
			m.outcome(cw.r, OutcomeReleased)
		}
	}()
	h.ServeHTTP(cw, r)
	returned = true
	cw.finish()
}

// answer writes the response to a request whose handler did not run.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, res key.Result, err error) {
	switch res.Outcome {
	case key.OutcomeReplayed:
		m.replay(w, r, res.Response)
	case key.OutcomeInFlight:
		ra := retryAfter(res.RetryAfter)
		w.Header().Set("Retry-After", ra)
		m.problem(w, r, OutcomeInFlight, SlugRequestInFlight, http.StatusConflict,
			"a request with this Idempotency-Key is still being processed; retry after "+ra+" s")
	case key.OutcomeUnknown:
		ra := retryAfter(res.RetryAfter)
		w.Header().Set("Retry-After", ra)
		m.problem(w, r, OutcomeUnknown, SlugOutcomeUnknown, http.StatusConflict,
			"the first request with this Idempotency-Key may or may not have taken effect; "+
				"it is retried after its lease ends, in "+ra+" s")
	case key.OutcomeConflict:
		m.problem(w, r, OutcomeConflict, SlugKeyReused, http.StatusUnprocessableEntity,
			"this Idempotency-Key was used with a different request (method, path, query, headers or body); use a new key")
	default: // Unavailable, or anything the guard did not expect
		m.s.Logger.WarnContext(r.Context(), "httpidem: store unavailable; request refused", "err", err)
		m.unavailable(w, r)
	}
}

func (m *Middleware) unavailable(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	m.problem(w, r, OutcomeUnavailable, SlugStoreUnavailable, http.StatusServiceUnavailable,
		"the idempotency store could not confirm this request; retry with the same Idempotency-Key")
}

// replay writes a stored response (or the not-stored marker's 409).
func (m *Middleware) replay(w http.ResponseWriter, r *http.Request, resp []byte) {
	sr, err := decodeResponse(resp)
	if err != nil {
		m.s.Logger.ErrorContext(r.Context(), "httpidem: stored response unreadable", "err", err)
		m.problem(w, r, OutcomeUnavailable, SlugStoredResponseUnreadable, http.StatusInternalServerError,
			"the stored response to this Idempotency-Key cannot be read")
		return
	}
	if sr.marker {
		m.problem(w, r, OutcomeResponseNotStored, SlugResponseNotStored, http.StatusConflict,
			"the first request with this Idempotency-Key completed, but its response ("+strconv.Itoa(sr.status)+
				") was too large to store; it is not run again")
		return
	}
	if !m.negotiate(r, &sr) {
		m.problem(w, r, OutcomeEncodingNotAcceptable, SlugEncodingNotAcceptable, http.StatusNotAcceptable,
			"the response to this Idempotency-Key was stored with Content-Encoding "+sr.header.Get("Content-Encoding")+
				", which this request's Accept-Encoding refuses; it is not run again to get another encoding")
		return
	}
	h := w.Header()
	for name, vals := range sr.header {
		h[name] = vals
	}
	h.Set(HeaderReplayed, "true")
	if bodyAllowed(sr.status) {
		h.Set("Content-Length", strconv.Itoa(len(sr.body)))
	}
	w.WriteHeader(sr.status)
	_, _ = w.Write(sr.body)
	m.outcome(r, OutcomeReplayed)
}
