package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// upstreamError is a failed upstream call, classified by whether the
// request was written to the upstream.
type upstreamError struct {
	// sent is true when the whole request was written to a connection
	// (httptrace WroteRequest without error) at least once: the upstream
	// may have acted on it, so its outcome is unknown. False means it never
	// got there (dial refused, DNS failure, TLS handshake, a write that
	// failed), and the claim can be released safely.
	sent bool
	err  error
}

func (e *upstreamError) Error() string { return e.err.Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// timeout reports whether err is a deadline: the upstream timeout, or a
// network timeout.
func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// tracingTransport wraps the upstream transport: it records whether each
// request was written, measures the latency to the response headers, and
// turns errors into *upstreamError.
type tracingTransport struct {
	base    http.RoundTripper
	observe func(time.Duration) // Hooks.OnUpstream
}

func (t *tracingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// The flag is never reset: if the transport tries twice and only the
	// first attempt was written, the upstream may still have acted on it.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	}
	start := time.Now()
	res, err := t.base.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	t.observe(time.Since(start))
	if err != nil {
		return nil, &upstreamError{sent: wrote.Load() && !closedIdle(err), err: err}
	}
	return res, nil
}

// closedIdleMessage is the text of net/http's unexported
// errServerClosedIdle: the upstream closed a kept-alive connection while
// it was idle, its FIN crossing the request on the wire. The request was
// written but never read, so it is not a lost answer. net/http re-sends
// such requests itself when it may; the proxy forbids that (see rewrite)
// and releases the claim instead.
const closedIdleMessage = "http: server closed idle connection"

// closedIdle reports whether err is net/http's errServerClosedIdle.
func closedIdle(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == closedIdleMessage {
			return true
		}
	}
	return false
}

// newTransport returns the default upstream transport: a clone of
// http.DefaultTransport without an outbound proxy (the classification of
// failures is about the upstream itself, not a hop before it), with room for
// many idle connections to the one upstream, and an idle timeout shorter
// than common upstream keep-alive timeouts (Node.js closes idle connections
// after 5 s): when the upstream closes a connection just as a request goes
// out on it, net/http cannot always tell whether the upstream read it, and
// the proxy must then hold the key as unknown until its lease ends.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 4 * time.Second
	return t
}
