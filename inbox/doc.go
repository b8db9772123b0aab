// Package inbox receives events exactly once per effect: the inbox and
// per-stream order components of idem (docs/guarantees.md, G7 and G8).
//
// A Processor handles one event in one transaction of the caller's store
// (store.InboxStore: SQLite, PostgreSQL, or the memory model), in this
// order:
//
//  1. record (source, id) in the inbox; a row already there means a
//     redelivery: OutcomeDuplicate, nothing runs, nothing is written;
//  2. lock the event's stream (source, subject) and decide with package
//     order: apply, park (delta after a gap), or drop (duplicate sequence,
//     stale snapshot, superseded execution);
//  3. run the caller's ApplyFunc in the same transaction, then the parked
//     events it released, in order;
//  4. store the stream, the parked events, the gap log and any dead letter;
//  5. commit. Only then does Process return a Result that may be
//     acknowledged.
//
// So the inbox row, the order state and the business change commit
// together or not at all: a crash before the commit leaves nothing (the
// sender redelivers and it runs), a crash after it leaves the row (the
// redelivery is an OutcomeDuplicate).
//
// On a store that can compare and set a stream (store.InboxStreamSetter:
// PostgreSQL), an event that is the next in order on a stream whose state
// the Processor committed last (Config.StreamCache) is decided on the state
// it remembers, before its transaction, and applied at once; steps 1, 2 and
// 4 are then one statement that goes out with the apply's first statement
// (or the commit), which records the event and stores the new state only if
// the stream still holds the remembered one, taking the stream's lock as
// step 2 would, ahead of the apply's writes. When the stream moved on
// (another process, the compensator) or the event was recorded before, that
// statement fails, none of the apply's statements runs, the transaction
// rolls back whatever the apply made of the failure, and the event runs
// again as above; the Processor then decides that stream's next events
// under the lock for a while before it guesses again.
//
// With Config.Batch set, events that arrive while others are being
// processed share a transaction: each runs steps 1 to 4 as above, one after
// another, and one commit makes them all durable. The batch commits only
// when every one of its events succeeded; otherwise nothing of it commits
// and each event runs again alone, as without batching. Every rule above
// holds for each event of a batch.
//
// # Failures
//
//   - ApplyFunc returns an error wrapped by Invalid: the transaction rolls
//     back (its writes with it) and runs again at once with the event
//     dead-lettered (reason, stored event, attempts) instead of applied;
//     OutcomeDeadLettered, which is acknowledged so the sender stops
//     retrying. Nothing is lost: Requeue runs it again.
//   - Any other error (or a panic) is transient: the transaction rolls back
//     and is tried again after Config.Backoff (doubling, jittered), up to
//     Config.MaxAttempts; the last attempt dead-letters instead.
//   - A released parked event that fails for good halts the chain: the
//     events before it stay applied, it becomes a gap and a dead letter,
//     the events after it stay parked (order.Decision.Halted). A delta is
//     never skipped.
//   - An event the order core refuses (no sequence in an ordered mode, two
//     executions with one rank) is dead-lettered with the reason.
//   - The store cannot answer, or the commit's outcome is unknown:
//     ErrUnavailable, not acknowledged; the inbox row settles the
//     redelivery either way.
//   - A delta stream already holding Config.MaxParked parked events:
//     ErrBackpressure, not acknowledged.
//
// # Gaps and compensation
//
// Snapshot gaps are recorded (ListGaps, metrics, log) and skipped: the
// newer snapshot holds the facts. Delta gaps are recorded and hold the
// events behind them. Compensate (or RunCompensator) finds streams whose
// oldest gap is older than Config.GapDeadline and calls the caller's
// CompensateFunc in a transaction: it brings the missing facts in (refetch
// the events, or the source's state as of the gap's end), and the stream
// moves past the gap and applies what was parked behind it.
//
// # Retention
//
// Sweep (or RunSweeper) deletes inbox rows and gap records older than
// Config.Retention (default 72 h). A redelivery after that runs again, so
// Retention must cover the sender's retry horizon. Dead rows stay until
// their dead letter is requeued. OutcomeParked events and dead letters live in the
// store only: a backlog costs disk, not memory.
package inbox
