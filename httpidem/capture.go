package httpidem

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/key"
)

// errDiscarded is what the handler's writes return after the middleware
// answered 503 because the outcome could not be recorded.
var errDiscarded = errors.New("httpidem: response discarded: its outcome could not be recorded")

// capture is the http.ResponseWriter a guarded handler writes to. It
// buffers the status, headers and body (up to MaxResponse) and sends
// nothing to the client until the key is settled in the store: completed
// with the response, completed with the not-stored marker (the body
// outgrew MaxResponse: then the rest streams through), released, or left
// unknown. It is used from the handler's goroutine only, like any
// ResponseWriter.
//
// It offers Flush, FlushError, SetReadDeadline, SetWriteDeadline and
// EnableFullDuplex (so http.ResponseController works), but not Hijack nor
// Unwrap: a hijacked connection could not be captured. Flush does nothing
// while the response is buffered. Informational (1xx) responses other than
// 101 are dropped.
type capture struct {
	m         *Middleware
	w         http.ResponseWriter // the client's
	r         *http.Request       // the request as it came (for OnOutcome)
	st        *reqState
	sess      session
	settleCtx context.Context // the claim's parent: not ended by the client going away
	stopFence func() bool

	h           http.Header // what Header returns
	snap        http.Header // h when the status was written
	status      int
	wroteHeader bool
	buf         []byte
	max         int
	charge      *charge // the buffer's share of the memory budget

	handedOver bool // the key is settled
	streaming  bool // the rest of the body goes straight to w
	discard    bool // 503 was sent instead; the handler's writes are dropped
}

func (c *capture) Header() http.Header { return c.h }

func (c *capture) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	if c.wroteHeader || (code < 200 && code != http.StatusSwitchingProtocols) {
		return
	}
	c.wroteHeader = true
	c.status = code
	c.snap = c.h.Clone()
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func (c *capture) Write(p []byte) (int, error) {
	if c.discard {
		return 0, errDiscarded
	}
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(c.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if c.streaming {
		return c.w.Write(p)
	}
	if len(c.buf)+len(p) <= c.max {
		c.buf = append(c.buf, p...)
		c.charge.grow(cap(c.buf), true)
		return len(p), nil
	}
	// The body outgrows MaxResponse: settle the key first (the marker),
	// then send what was buffered and stream the rest.
	msg, o := c.decide(true)
	if err := c.settle(msg); !accepted(err, msg) {
		c.failed(err)
		return 0, errDiscarded
	}
	c.sendHead(false)
	c.h = c.w.Header() // later trailers go to the client's header map
	c.streaming = true
	c.m.outcome(c.r, o)
	if len(c.buf) > 0 {
		if _, err := c.w.Write(c.buf); err != nil {
			return 0, err
		}
	}
	c.buf = nil
	return c.w.Write(p)
}

// finish settles the key after the handler returned, then sends the
// response.
func (c *capture) finish() {
	if c.handedOver {
		return // settled when the body outgrew MaxResponse
	}
	if !c.wroteHeader {
		c.wroteHeader, c.status, c.snap = true, http.StatusOK, c.h
	}
	if _, ok := c.snap["Content-Type"]; !ok && len(c.buf) > 0 {
		// Sniff now, as net/http would, so that the stored and the first
		// response carry the same Content-Type.
		c.snap.Set("Content-Type", http.DetectContentType(c.buf))
	}
	msg, o := c.decide(false)
	if err := c.settle(msg); !accepted(err, msg) {
		c.failed(err)
		return
	}
	c.sendHead(true)
	if len(c.buf) > 0 {
		_, _ = c.w.Write(c.buf)
	}
	c.copyTrailers()
	c.m.outcome(c.r, o)
}

// handled is how a guarded request settles its key: with the response to
// store, or with an error (released, or held as unknown).
type handled struct {
	resp []byte
	err  error
}

// decide says how the key is settled for the response so far.
func (c *capture) decide(overflow bool) (handled, Outcome) {
	switch cause := c.st.unknownCause(); {
	case cause != nil:
		return handled{err: key.MarkUnknown(cause)}, OutcomeMarkedUnknown
	case !storable(c.status):
		return handled{err: errNotStored}, OutcomeReleased
	case overflow || c.st.bodyNotStored():
		return handled{resp: encodeMarker(c.status)}, OutcomeNotStored
	}
	return handled{resp: encodeResponse(c.status, c.snap, c.keep(), c.buf)}, OutcomeExecuted
}

// keep returns the names of the headers to store: the allow-list, less any
// header the response's Connection header names (hop-by-hop by RFC 9110).
func (c *capture) keep() []string {
	conn := c.snap["Connection"]
	if len(conn) == 0 {
		return c.m.s.keep
	}
	return slices.DeleteFunc(slices.Clone(c.m.s.keep), func(name string) bool {
		for _, v := range conn {
			for tok := range strings.SplitSeq(v, ",") {
				if http.CanonicalHeaderKey(strings.TrimSpace(tok)) == name {
					return true
				}
			}
		}
		return false
	})
}

// settle settles the key as msg says, in the request's goroutine, and
// returns the session's error.
func (c *capture) settle(msg handled) error {
	c.stopFence()
	c.handedOver = true
	if msg.err != nil {
		return c.sess.fail(c.settleCtx, msg.err)
	}
	return c.sess.complete(c.settleCtx, msg.resp)
}

// accepted reports whether the key was settled as msg asked: a nil error
// for a stored response, or msg's own error back (released, or kept as
// unknown). Anything else means the store failed or the claim was lost,
// and (in a transaction) the handler's writes were rolled back.
func accepted(err error, msg handled) bool {
	return err == nil || (msg.err != nil && errors.Is(err, msg.err))
}

// failed answers 503 in place of a response whose outcome could not be
// recorded: acknowledging it would promise a replay that may never come.
func (c *capture) failed(err error) {
	c.discard = true
	c.m.s.Logger.WarnContext(c.r.Context(), "httpidem: handler ran but its outcome could not be recorded; answered 503", "err", err)
	c.m.unavailable(c.w, c.r)
}

// sendHead writes the captured status and headers to the client. With
// whole set, the body is all in buf and its length is declared.
func (c *capture) sendHead(whole bool) {
	h := c.w.Header()
	clear(h)
	maps.Copy(h, c.snap)
	_, lengthSet := h["Content-Length"]
	_, trailers := h["Trailer"]
	if whole && !lengthSet && !trailers && bodyAllowed(c.status) {
		h.Set("Content-Length", strconv.Itoa(len(c.buf)))
	}
	c.w.WriteHeader(c.status)
}

// copyTrailers passes trailer values the handler set after writing the
// status (declared in Trailer, or with http.TrailerPrefix).
func (c *capture) copyTrailers() {
	h := c.w.Header()
	for name, vals := range c.h {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			h[name] = vals
		}
	}
	for _, decl := range c.snap["Trailer"] {
		for tok := range strings.SplitSeq(decl, ",") {
			if vals, ok := c.h[http.CanonicalHeaderKey(strings.TrimSpace(tok))]; ok {
				h[http.CanonicalHeaderKey(strings.TrimSpace(tok))] = vals
			}
		}
	}
}

// Flush sends what was written when the response streams; while it is
// buffered (not yet settled) it does nothing.
func (c *capture) Flush() { _ = c.FlushError() }

// FlushError is Flush for http.ResponseController.
func (c *capture) FlushError() error {
	if !c.streaming {
		return nil
	}
	return http.NewResponseController(c.w).Flush()
}

// SetReadDeadline passes through to the client's connection.
func (c *capture) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(c.w).SetReadDeadline(t)
}

// SetWriteDeadline passes through to the client's connection.
func (c *capture) SetWriteDeadline(t time.Time) error {
	return http.NewResponseController(c.w).SetWriteDeadline(t)
}

// EnableFullDuplex passes through to the client's connection.
func (c *capture) EnableFullDuplex() error {
	return http.NewResponseController(c.w).EnableFullDuplex()
}
