package inbox

import "github.com/idemhq/idem/order"

// Hooks are called as the processor works, so that metrics can count what
// it does without the processor knowing of any metrics library (package
// prom wires them to Prometheus). Every field may be nil. They are called
// synchronously on the processing goroutine, only after the transaction
// they report on has committed (or, for the failures, after it was given
// up): keep them fast and never block.
type Hooks struct {
	// OnEvent: an event's transaction committed (Process, Requeue), with
	// its result. Compensations are not events and are not reported here.
	OnEvent func(Result)
	// OnGaps: n gaps were recorded in a stream of the given mode (a
	// snapshot's skipped run, or delta gaps held until filled or
	// compensated).
	OnGaps func(mode order.Mode, n int)
	// OnDeadLetters: n dead letters were written (the event's own, or a
	// released parked event's).
	OnDeadLetters func(n int)
	// OnCompensated: a delta gap was closed by the compensation hook.
	OnCompensated func()
	// OnRetry: a transaction was rolled back after a transient apply
	// failure and will be tried again.
	OnRetry func()
	// OnBackpressure: an event was refused (not acknowledged) because its
	// stream had Config.MaxParked events parked.
	OnBackpressure func()
	// OnUnavailable: an event was not acknowledged because the store could
	// not answer or the commit's outcome was unknown.
	OnUnavailable func()
	// OnBatch: a batch of events (Config.Batch) ended, committed or given
	// up (nothing of it committed, and each of its events runs again
	// alone). A batch of one event is not reported.
	OnBatch func(events int, committed bool)
}

// withDefaults fills the nil hooks with ones that do nothing, so that the
// processor calls them without checking.
func (h Hooks) withDefaults() Hooks {
	if h.OnEvent == nil {
		h.OnEvent = func(Result) {}
	}
	if h.OnGaps == nil {
		h.OnGaps = func(order.Mode, int) {}
	}
	if h.OnDeadLetters == nil {
		h.OnDeadLetters = func(int) {}
	}
	if h.OnBatch == nil {
		h.OnBatch = func(int, bool) {}
	}
	for _, f := range []*func(){&h.OnCompensated, &h.OnRetry, &h.OnBackpressure, &h.OnUnavailable} {
		if *f == nil {
			*f = func() {}
		}
	}
	return h
}

// committed reports a committed transaction's result to the hooks.
func (h *Hooks) committed(r Result) {
	if r.housekp {
		if r.Outcome == OutcomeProcessed {
			h.OnCompensated()
		}
	} else if r.Outcome != 0 {
		h.OnEvent(r)
	}
	if r.opened > 0 {
		h.OnGaps(r.mode, r.opened)
	}
	if len(r.DeadLetters) > 0 {
		h.OnDeadLetters(len(r.DeadLetters))
	}
}
