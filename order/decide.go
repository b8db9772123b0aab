package order

import (
	"fmt"
	"slices"
	"time"
)

// Incoming is what Decide needs to know about one received event.
type Incoming struct {
	// Execution is the ID of the execution that produced the event.
	Execution string
	// ExecutionSeq ranks the execution among the runs of the object: the
	// caller supplies it from its own records (e.g. the execution's creation
	// order within its task: 1 for the first run, 2 for the first rerun), so
	// that "newer" never depends on clocks or on comparing IDs. At least 1.
	ExecutionSeq int64
	// Sequence is the event's position within its execution, from 1.
	Sequence int64
	// At is when the event was received (the caller's or the store's
	// clock). Used only as the FirstSeen of a gap the event reveals.
	At time.Time
}

// Action is what to do with an event.
type Action uint8

const (
	// ActionApply: apply the event, then the Released parked events, in order.
	ActionApply Action = iota + 1
	// ActionPark: keep the event (ModeDelta) until the gap before it fills.
	ActionPark
	// ActionDuplicate: the sequence was already applied or parked; drop it,
	// acknowledge it.
	ActionDuplicate
	// ActionStale: an older snapshot than the one applied; drop it, acknowledge it.
	ActionStale
	// ActionSuperseded: the event belongs to an execution older than the one the
	// stream follows; drop it, acknowledge it.
	ActionSuperseded
	// ActionCompensate: returned by Compensated; the gap's facts were brought in by
	// the caller, then the Released parked events apply, in order.
	ActionCompensate
)

// String returns the action's name in lower case.
func (a Action) String() string {
	switch a {
	case ActionApply:
		return "apply"
	case ActionPark:
		return "park"
	case ActionDuplicate:
		return "duplicate"
	case ActionStale:
		return "stale"
	case ActionSuperseded:
		return "superseded"
	case ActionCompensate:
		return "compensate"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Decision is the outcome of Decide or Compensated. It is a result, not an
// error: duplicates and stale events are normal at-least-once traffic.
type Decision struct {
	Action Action
	// Sequence is the event's sequence (for ActionCompensate: the gap's To).
	Sequence int64
	// Reset is true when the event came from a newer execution: the stream
	// was started afresh before deciding it. The projection must follow the
	// new execution from now on.
	Reset bool
	// Discarded are the parked sequences of the superseded execution that a
	// Reset threw away (the store deletes their payloads).
	Discarded []int64
	// Released are parked sequences that became applicable, in the order to
	// apply them, after the event (ActionApply) or the gap (ActionCompensate).
	Released []int64
	// Gap is the run of sequences this event revealed as missing, or nil.
	// ModeSnapshot: reported only (the snapshot holds the facts). ModeDelta: also
	// recorded in Next.Gaps until it fills.
	Gap *Gap
	// Next is the stream after the decision. It shares no memory with the
	// Stream given to Decide.
	Next Stream
}

// Applied returns the sequences to apply, in order: the event's own (for
// ActionApply) followed by Released. Empty for every other action.
func (d Decision) Applied() []int64 {
	switch d.Action {
	case ActionApply:
		return append([]int64{d.Sequence}, d.Released...)
	case ActionCompensate:
		return slices.Clone(d.Released)
	}
	return nil
}

// Decide decides what to do with event ev on stream s in the given mode,
// and returns the stream after it (Decision.Next). It is pure: no clock, no
// storage, s is not modified. The persisted version calls it inside the
// transaction that applies the event and stores Next.
//
// Errors (nothing decided, s unchanged): ErrBadMode, ErrBadConfig,
// ErrBadStream, ErrBadExecution, ErrBadSequence, ErrExecutionConflict and
// (ModeDelta) ErrParkedLimit.
func Decide(mode Mode, s Stream, ev Incoming, cfg *Config) (Decision, error) {
	if mode != ModeSnapshot && mode != ModeDelta {
		return Decision{}, fmt.Errorf("%w: %d", ErrBadMode, uint8(mode))
	}
	if err := cfg.validate(); err != nil {
		return Decision{}, err
	}
	if err := s.Validate(); err != nil {
		return Decision{}, err
	}
	if mode == ModeSnapshot && len(s.Parked) > 0 {
		return Decision{}, fmt.Errorf("%w: parked sequences in a snapshot stream", ErrBadStream)
	}
	if ev.Execution == "" || ev.ExecutionSeq < 1 {
		return Decision{}, fmt.Errorf("%w: execution %q, ExecutionSeq %d", ErrBadExecution, ev.Execution, ev.ExecutionSeq)
	}
	if ev.Sequence < 1 {
		return Decision{}, fmt.Errorf("%w: got %d", ErrBadSequence, ev.Sequence)
	}

	d := Decision{Sequence: ev.Sequence}
	switch {
	case ev.ExecutionSeq < s.ExecutionSeq:
		d.Action, d.Next = ActionSuperseded, s.clone()
		return d, nil
	case ev.ExecutionSeq == s.ExecutionSeq && ev.Execution != s.Execution:
		return Decision{}, fmt.Errorf("%w: %q and %q both rank %d", ErrExecutionConflict, s.Execution, ev.Execution, ev.ExecutionSeq)
	case ev.ExecutionSeq > s.ExecutionSeq:
		d.Reset = s.ExecutionSeq != 0
		d.Discarded = slices.Clone(s.Parked)
		s = Stream{Execution: ev.Execution, ExecutionSeq: ev.ExecutionSeq}
	default:
		s = s.clone()
	}

	if mode == ModeSnapshot {
		return decideSnapshot(d, s, ev), nil
	}
	return decideDelta(d, s, ev, cfg.maxParked())
}

func decideSnapshot(d Decision, s Stream, ev Incoming) Decision {
	switch {
	case ev.Sequence == s.Applied:
		d.Action = ActionDuplicate
	case ev.Sequence < s.Applied:
		d.Action = ActionStale
	default:
		if ev.Sequence-1 > s.Applied {
			d.Gap = &Gap{From: s.Applied + 1, To: ev.Sequence - 1, FirstSeen: ev.At}
		}
		d.Action = ActionApply
		s.Applied = ev.Sequence
	}
	d.Next = s
	return d
}

func decideDelta(d Decision, s Stream, ev Incoming, maxParked int) (Decision, error) {
	seq := ev.Sequence
	if seq <= s.Applied {
		d.Action, d.Next = ActionDuplicate, s
		return d, nil
	}
	i, found := slices.BinarySearch(s.Parked, seq)
	if found {
		d.Action, d.Next = ActionDuplicate, s
		return d, nil
	}
	if seq-1 == s.Applied {
		d.Action = ActionApply
		s.Applied = seq
		n := 0
		for n < len(s.Parked) && s.Parked[n]-1 == s.Applied {
			s.Applied = s.Parked[n]
			n++
		}
		d.Released = slices.Clone(s.Parked[:n])
		s.Parked = slices.Clone(s.Parked[n:])
	} else {
		if len(s.Parked) >= maxParked {
			return Decision{}, fmt.Errorf("%w: %d parked, sequence %d after %d", ErrParkedLimit, len(s.Parked), seq, s.Applied)
		}
		d.Action = ActionPark
		s.Parked = slices.Insert(s.Parked, i, seq)
		// The run just below seq that is now missing: it starts after the
		// previous parked (or applied) sequence.
		from := s.Applied + 1
		if i > 0 {
			from = s.Parked[i-1] + 1
		}
		if from <= seq-1 {
			d.Gap = &Gap{From: from, To: seq - 1}
		}
	}
	s.Gaps = gapsOf(s.Applied, s.Parked, s.Gaps, ev.At)
	if d.Gap != nil {
		for _, g := range s.Gaps {
			if g.To == d.Gap.To {
				d.Gap.FirstSeen = g.FirstSeen
			}
		}
	}
	if len(s.Parked) == 0 {
		s.Parked, s.Gaps = nil, nil
	}
	d.Next = s
	return d, nil
}

// Overdue returns, in order, the open gaps of s first seen at least
// deadline before now: the caller runs its compensation hook for them
// (refetch the missing facts) and then calls Compensated. Gaps are opened in
// sequence order, so the overdue ones are always a prefix of s.Gaps. A
// deadline <= 0 makes every open gap overdue.
func Overdue(s Stream, now time.Time, deadline time.Duration) []Gap {
	var out []Gap
	for _, g := range s.Gaps {
		if now.Sub(g.FirstSeen) < deadline {
			break
		}
		out = append(out, g)
	}
	return out
}

// Compensated records that the caller has brought the missing facts of gap
// g into the projection by other means (it refetched the missing events, or
// the source's state as of g.To), in the same transaction as the returned
// Next. g must start the stream's first open gap (g.From == Applied+1) and
// may end before it (a partial refetch). The Decision is ActionCompensate with
// Sequence g.To and the parked sequences that now apply in Released.
//
// This is the only way a ModeDelta stream moves past a sequence it never
// received, and only because the caller vouches for the facts: a delta is
// never skipped silently.
func Compensated(s Stream, g Gap) (Decision, error) {
	if err := s.Validate(); err != nil {
		return Decision{}, err
	}
	if len(s.Gaps) == 0 || g.From != s.Gaps[0].From || g.To < g.From || g.To > s.Gaps[0].To {
		return Decision{}, fmt.Errorf("%w: %d..%d", ErrUnknownGap, g.From, g.To)
	}
	s = s.clone()
	d := Decision{Action: ActionCompensate, Sequence: g.To}
	s.Applied = g.To
	n := 0
	for n < len(s.Parked) && s.Parked[n]-1 == s.Applied {
		s.Applied = s.Parked[n]
		n++
	}
	d.Released = slices.Clone(s.Parked[:n])
	s.Parked = slices.Clone(s.Parked[n:])
	s.Gaps = gapsOf(s.Applied, s.Parked, s.Gaps, time.Time{})
	if len(s.Parked) == 0 {
		s.Parked, s.Gaps = nil, nil
	}
	d.Next = s
	return d, nil
}

// Halted returns the stream as it must be stored when applying d stopped at
// sequence failed: the event failed could not be applied (its payload was
// invalid and it went to the dead letters), so neither it nor anything
// after it counts as applied. Applied becomes failed-1; the sequences of
// d.Applied() after failed go back to Parked; failed itself is missing again,
// so it opens a gap if anything is parked behind it (FirstSeen at, or the
// FirstSeen of an older gap behind it). failed
// must be one of d.Applied() (ErrUnknownGap otherwise, for want of a better
// sentinel: it names no sequence d applied). d is not modified.
//
// This keeps the delta promise when a released event turns out to be bad:
// its predecessors stay applied, it is reported as a gap, and its successors
// wait for the gap to fill (a requeue) or be compensated.
func (d Decision) Halted(failed int64, at time.Time) (Stream, error) {
	applied := d.Applied()
	i := slices.Index(applied, failed)
	if i < 0 {
		return Stream{}, fmt.Errorf("%w: sequence %d was not applied by this decision", ErrUnknownGap, failed)
	}
	s := d.Next.clone()
	s.Applied = failed - 1
	s.Parked = append(slices.Clone(applied[i+1:]), s.Parked...)
	s.Gaps = gapsOf(s.Applied, s.Parked, s.Gaps, at)
	// The new gap comes before older ones: it takes the oldest FirstSeen
	// after it, so that gaps stay ordered by FirstSeen and Overdue still
	// finds the first gap overdue no later than the ones it holds back.
	for i := len(s.Gaps) - 2; i >= 0; i-- {
		if s.Gaps[i].FirstSeen.After(s.Gaps[i+1].FirstSeen) {
			s.Gaps[i].FirstSeen = s.Gaps[i+1].FirstSeen
		}
	}
	if len(s.Parked) == 0 {
		s.Parked, s.Gaps = nil, nil
	}
	return s, s.Validate()
}
