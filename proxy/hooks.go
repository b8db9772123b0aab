package proxy

import (
	"time"

	"github.com/idemhq/idem/httpidem"
)

// Kinds of upstream failure, passed to Hooks.OnUpstreamError.
const (
	// UpstreamUnreachable: the request never reached the upstream (dial
	// refused, DNS failure, TLS handshake, timeout before it was written);
	// the claim was released.
	UpstreamUnreachable = "unreachable"
	// UpstreamUnknown: the request was written and its answer was lost
	// (timeout, connection reset, malformed or truncated response); the
	// key is held for UnknownHold.
	UpstreamUnknown = "unknown"
)

// Hooks are called as the proxy works, so that metrics can count what it
// does without the proxy knowing of any metrics library (package prom wires
// them to Prometheus, with Stats for the gauges). Every field may be nil.
// They are called synchronously on the request's goroutine: keep them fast
// and never block.
type Hooks struct {
	// OnOutcome: a request that took part in idempotency (participating
	// method, a caller, a key) was answered, with its outcome.
	OnOutcome func(httpidem.Outcome)
	// OnUpstream: the upstream answered with headers, or failed, after d.
	OnUpstream func(d time.Duration)
	// OnUpstreamError: an upstream call got no response, of the kind
	// UpstreamUnreachable or UpstreamUnknown.
	OnUpstreamError func(kind string)
}

// withDefaults fills the nil hooks with ones that do nothing.
func (h Hooks) withDefaults() Hooks {
	if h.OnOutcome == nil {
		h.OnOutcome = func(httpidem.Outcome) {}
	}
	if h.OnUpstream == nil {
		h.OnUpstream = func(time.Duration) {}
	}
	if h.OnUpstreamError == nil {
		h.OnUpstreamError = func(string) {}
	}
	return h
}

// Stats is what the proxy holds right now, for gauges.
type Stats struct {
	// InFlight is the number of requests being served.
	InFlight int64
	// Recording is the number of upstream answers the store did not take
	// when they came, still being recorded (their keys stay held).
	Recording int
	// BufferedBytes is the bytes of request and response bodies held in
	// memory beyond each one's allowance: the memory budget's use.
	BufferedBytes int64
}

// Stats returns what the proxy holds right now.
func (p *Proxy) Stats() Stats {
	return Stats{InFlight: p.serving.Load(), Recording: p.guard.Recording(), BufferedBytes: p.mw.InUse()}
}
