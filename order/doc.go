// Package order decides, per stream, what to do with an event that may
// arrive late, early, twice, or from a superseded execution. It is the pure
// core of idem's per-stream order (docs/guarantees.md, G8): no storage, no
// clock. The persisted version loads a Stream, calls Decide inside the
// transaction that applies the event, and stores Decision.Next.
//
// A stream is one object or one execution; sequences (from 1) are compared
// only within a stream, never across streams or executions.
//
// # Executions
//
// A projection follows one execution. Every Incoming names its Execution and
// that execution's rank, ExecutionSeq, which the caller supplies from its
// own records (the execution's creation order within its task: a rerun has
// a larger one). Ranks, not clocks or IDs, say which execution is newer:
//
//   - ev.ExecutionSeq > stream's: the stream starts afresh (Decision.Reset,
//     old parked sequences in Decision.Discarded), then ev is decided.
//   - ev.ExecutionSeq < stream's: ActionSuperseded; it never overwrites the newer
//     execution, whatever its sequence.
//   - equal rank, other Execution ID: ErrExecutionConflict.
//
// # ModeSnapshot mode
//
// Each event carries the whole state, so the newest wins:
//
//	seq >  Applied   → ActionApply (Applied = seq); if seq > Applied+1 the skipped
//	                   run is reported as Decision.Gap (not kept: the snapshot
//	                   already holds its facts)
//	seq == Applied   → ActionDuplicate
//	seq <  Applied   → ActionStale
//
// # ModeDelta mode
//
// Each event carries a change that must be applied once, in order:
//
//	seq == Applied+1      → ActionApply, then Released: the parked successors
//	                        Applied+2, Applied+3, ... that are now contiguous
//	seq >  Applied+1      → ActionPark (held in Parked; the run missing just below
//	                        it is Decision.Gap and is kept in Gaps with the
//	                        FirstSeen of its discovery)
//	seq <= Applied        → ActionDuplicate
//	seq already parked    → ActionDuplicate
//	parking past MaxParked → ErrParkedLimit (nothing decided)
//
// Overdue lists the gaps older than a deadline; the caller's compensation
// hook refetches their facts and Compensated moves the stream past the gap,
// releasing the parked events behind it.
//
// # Invariants (docs/guarantees.md, G8)
//
//   - Per stream and execution, applied sequences strictly increase; Applied
//     never goes backwards except by a Reset to a newer execution.
//   - ModeDelta: the applied sequences are exactly 1..Applied, each once, in
//     order (received, released, or compensated); no delta is skipped.
//   - ModeDelta: every sequence above Applied that was received is parked until
//     the gap before it fills or is compensated; gaps are reported when
//     they open and stay in Stream.Gaps until then.
//   - Parked is bounded by Config.MaxParked, so a Stream row stays small.
//   - Decide, Compensated and Overdue never modify their input.
//
// Bad input gets a sentinel error and decides nothing: a sequence below 1
// (ErrBadSequence), an unnamed execution (ErrBadExecution), a Stream that
// breaks its invariants (ErrBadStream).
package order
