package outbox

import "time"

// Hooks are called as the relay works, so that metrics can count what it
// does without the relay knowing of any metrics library (package prom wires
// them to Prometheus). Every field may be nil. They are called
// synchronously on the delivering goroutine: keep them fast and never
// block.
type Hooks struct {
	// OnAttempt: one delivery attempt ended, from the claim to the attempt
	// to record its result (d), with the target's name and the result:
	// "done", "retry", "dead" or "disable".
	OnAttempt func(target, result string, d time.Duration)
	// OnFenced: a result was not recorded because another relay had taken
	// the intent over (this relay outlived its lease).
	OnFenced func()
	// OnUnknown: an attempt got no answer (timeout, reset); the next
	// attempt re-sends with the same key.
	OnUnknown func()
}

// withDefaults fills the nil hooks with ones that do nothing.
func (h Hooks) withDefaults() Hooks {
	if h.OnAttempt == nil {
		h.OnAttempt = func(string, string, time.Duration) {}
	}
	if h.OnFenced == nil {
		h.OnFenced = func() {}
	}
	if h.OnUnknown == nil {
		h.OnUnknown = func() {}
	}
	return h
}
