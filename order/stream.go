package order

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrBadSequence is returned by Decide when an event's sequence is below
	// 1 (sequences start at 1 in every execution).
	ErrBadSequence = errors.New("order: sequence must be at least 1")

	// ErrBadExecution is returned by Decide when an event names no execution
	// (empty Execution) or an ExecutionSeq below 1.
	ErrBadExecution = errors.New("order: execution must be named with an ExecutionSeq of at least 1")

	// ErrExecutionConflict is returned by Decide when an event carries the
	// stream's ExecutionSeq but another Execution ID: two executions claim
	// the same rank, so neither may be preferred.
	ErrExecutionConflict = errors.New("order: two executions with the same ExecutionSeq")

	// ErrParkedLimit is returned by Decide in ModeDelta mode when parking the
	// event would hold more than Config.MaxParked sequences. Nothing is
	// decided; the caller should not acknowledge the event (let the sender
	// retry it later) or compensate the oldest gap first.
	ErrParkedLimit = errors.New("order: parked limit reached")

	// ErrUnknownGap is returned by Compensated when the gap is not a prefix
	// of the stream's first open gap.
	ErrUnknownGap = errors.New("order: not the first open gap")

	// ErrBadStream is returned (wrapped, with the broken invariant) when a
	// Stream handed in breaks its invariants, e.g. a corrupted stored row.
	ErrBadStream = errors.New("order: stream breaks its invariants")

	// ErrBadConfig is returned (wrapped, naming the field) for an invalid
	// Config.
	ErrBadConfig = errors.New("order: invalid config")

	// ErrBadMode is returned for a Mode other than ModeSnapshot and ModeDelta.
	ErrBadMode = errors.New("order: unknown mode")
)

// Mode says what an event carries, which decides how order is enforced.
type Mode uint8

const (
	// ModeSnapshot events carry the object's whole state: a newer one replaces
	// everything before it, so older ones are dropped and gaps only
	// reported.
	ModeSnapshot Mode = iota + 1
	// ModeDelta events carry a change ("add 10 to paid"): each must be applied
	// once, in order, and none may be skipped.
	ModeDelta
)

// String returns "snapshot" or "delta".
func (m Mode) String() string {
	switch m {
	case ModeSnapshot:
		return "snapshot"
	case ModeDelta:
		return "delta"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// DefaultMaxParked is Config.MaxParked's default.
const DefaultMaxParked = 1024

// Config bounds a stream. A nil *Config means the defaults.
type Config struct {
	// MaxParked is the most sequences a ModeDelta stream holds after a gap;
	// parking one more is refused with ErrParkedLimit. Defaults to
	// DefaultMaxParked (1024).
	MaxParked int
}

func (c *Config) maxParked() int {
	if c == nil || c.MaxParked == 0 {
		return DefaultMaxParked
	}
	return c.MaxParked
}

func (c *Config) validate() error {
	if c != nil && c.MaxParked < 0 {
		return fmt.Errorf("%w: MaxParked %d is negative", ErrBadConfig, c.MaxParked)
	}
	return nil
}

// Gap is a run of missing sequences From..To (both included, From <= To).
type Gap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// FirstSeen is the At of the event whose arrival revealed the gap. A gap
	// that shrinks or splits keeps it.
	FirstSeen time.Time `json:"first_seen"`
}

// Len returns how many sequences the gap misses.
func (g Gap) Len() int64 { return g.To - g.From + 1 }

// Stream is the order state of one stream (one object or one execution).
// It is a plain value meant to be stored in one row (it marshals to JSON);
// Decide and Compensated never modify the Stream they are given.
//
// Invariants (Validate checks them):
//   - ExecutionSeq == 0 means fresh: no Execution, Applied 0, nothing parked.
//   - Applied >= 0 and only grows within one execution.
//   - Parked is strictly increasing and Parked[0] > Applied+1 (otherwise it
//     would have been applied). ModeSnapshot streams never park.
//   - Gaps are exactly the maximal runs of sequences in (Applied,
//     Parked[last]) that are not parked, in order, with FirstSeen
//     non-decreasing. No parked sequences, no gaps.
type Stream struct {
	// Execution is the ID of the execution the stream follows.
	Execution string `json:"execution,omitempty"`
	// ExecutionSeq is that execution's rank (see Incoming.ExecutionSeq).
	ExecutionSeq int64 `json:"execution_seq,omitempty"`
	// Applied is the highest sequence applied; 0 means none yet.
	Applied int64 `json:"applied"`
	// Parked are the ModeDelta sequences received after a gap and held until it
	// fills. The persisted version keeps their payloads in the store.
	Parked []int64 `json:"parked,omitempty"`
	// Gaps are the open gaps before the parked sequences (ModeDelta only).
	Gaps []Gap `json:"gaps,omitempty"`
}

// Validate reports the first broken invariant, wrapped in ErrBadStream.
func (s Stream) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadStream}, args...)...)
	}
	if s.ExecutionSeq < 0 {
		return bad("ExecutionSeq %d is negative", s.ExecutionSeq)
	}
	if s.ExecutionSeq == 0 {
		if s.Execution != "" || s.Applied != 0 || len(s.Parked) != 0 || len(s.Gaps) != 0 {
			return bad("a fresh stream (ExecutionSeq 0) holds state")
		}
		return nil
	}
	if s.Execution == "" {
		return bad("no Execution for ExecutionSeq %d", s.ExecutionSeq)
	}
	if s.Applied < 0 {
		return bad("Applied %d is negative", s.Applied)
	}
	if s.Applied == math.MaxInt64 && len(s.Parked) > 0 {
		return bad("sequences parked after the last possible one")
	}
	prev := s.Applied + 1 // Parked[0] must be above this
	for i, p := range s.Parked {
		if p <= prev {
			return bad("Parked[%d] = %d is not above %d", i, p, prev)
		}
		prev = p
	}
	want := gapsOf(s.Applied, s.Parked, s.Gaps, time.Time{})
	if len(want) != len(s.Gaps) {
		return bad("%d gaps recorded, %d open", len(s.Gaps), len(want))
	}
	for i, g := range s.Gaps {
		if g.From != want[i].From || g.To != want[i].To {
			return bad("Gaps[%d] = %d..%d, open gap is %d..%d", i, g.From, g.To, want[i].From, want[i].To)
		}
		if i > 0 && g.FirstSeen.Before(s.Gaps[i-1].FirstSeen) {
			return bad("Gaps[%d] first seen before Gaps[%d]", i, i-1)
		}
	}
	return nil
}

// clone returns a copy that shares no slice with s.
func (s Stream) clone() Stream {
	s.Parked = slices.Clone(s.Parked)
	s.Gaps = slices.Clone(s.Gaps)
	return s
}

// gapsOf computes the maximal missing runs of (applied, parked[last]) that
// are not parked. Each run keeps the FirstSeen of the old gap containing it;
// a run outside every old gap is new and gets now. Missing runs only shrink
// or appear above the old last parked sequence, so a run lies in at most one
// old gap.
func gapsOf(applied int64, parked []int64, old []Gap, now time.Time) []Gap {
	var gaps []Gap
	next := applied + 1 // lowest sequence not yet accounted for
	for _, p := range parked {
		if p > next {
			g := Gap{From: next, To: p - 1, FirstSeen: now}
			for _, o := range old {
				if o.From <= g.From && g.To <= o.To {
					g.FirstSeen = o.FirstSeen
					break
				}
			}
			gaps = append(gaps, g)
		}
		next = p + 1
	}
	return gaps
}
