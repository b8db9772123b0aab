// Package key makes an operation run at most once per idempotency key and
// replays its first result to every retry.
//
// A request names its Scope (principal, operation, key) and a Fingerprint of
// its content. Guard.Do claims the scope in the store, runs the operation,
// and stores its response; a retry with the same scope and fingerprint gets
// the stored response (OutcomeReplayed), one with other content is refused
// (OutcomeConflict), and one that arrives while the first still runs is told to
// come back (OutcomeInFlight). When the store cannot answer, nothing runs
// (OutcomeUnavailable): idem fails closed.
//
// TxGuard.DoTx runs the operation inside the store's transaction (SQLite,
// PostgreSQL), so that its business writes and the stored response commit
// together: a local effect then happens exactly once, whatever crashes.
//
// Do and DoTx take the operation as a closure. A caller that cannot run it
// inside one (the HTTP middleware settles a key in the middle of a
// handler's response, then streams the rest) uses the same steps one by
// one: Guard.Claim returns a Claim, which owns the heartbeat and is
// settled once with Complete, Fail, Release or MarkUnknown;
// TxGuard.ClaimTx adds Begin, Commit and Rollback of the operation's
// transaction. Do and DoTx are built on them.
//
// # The record's state machine
//
//	              claim (new key, or expired record)
//	(absent) ─────────────────────────────────────────┐
//	   ▲                                               ▼
//	   │ retention ends        ┌──────────────── PROCESSING ◄─┐
//	   │ (sweeper deletes)     │ complete        (epoch e,     │ takeover: lease ended,
//	   │                       ▼                  owner o,     │ same fingerprint
//	   ├──────────────────── DONE                 lease until) ┘ (epoch e+1, new owner)
//	   │                    (response)               │
//	   │                                             │ release (operation failed)
//	   └──────────────────── RELEASED ◄──────────────┘
//	                           │ claim, any fingerprint (epoch e+1)
//	                           └──────────────► PROCESSING
//
// PROCESSING may also carry the OutcomeUnknown mark (MarkUnknown): the holder ran an
// external call and lost its answer. The mark changes what waiting callers
// are told (OutcomeUnknown rather than OutcomeInFlight), not the transitions; the holder
// extends the lease to Config.UnknownHold when it marks, so that no retry
// runs before an operation that may still be under way has had its time.
//
// Beside the store, each Guard keeps the set of keys its process holds: an
// operation running, or an outcome waiting to be recorded. A duplicate of
// such a key in the same process is decided there, without the store (see
// Failures).
//
// # Invariants
//
//   - At most one live claim per key: a claim is granted only on an absent,
//     expired or released record, or on a PROCESSING record whose lease has
//     ended, and the store decides that in one atomic step.
//   - Fencing: every write by a holder (complete, release, extend, mark
//     unknown) is a compare-and-set on (epoch, owner, PROCESSING). A holder
//     whose lease was taken over changes nothing and gets ErrFenced.
//   - The epoch grows by one at every claim of a key that still has a record,
//     so a later holder always has a larger epoch than an earlier one. The
//     owner token is fresh at every claim, so even a holder whose record was
//     swept and claimed afresh (epoch 1 again) is fenced.
//   - Leases are measured on the store's clock (PostgreSQL
//     clock_timestamp(), Redis TIME), never on the callers' clocks; SQLite
//     and the memory store, which run in the caller's process, use its
//     clock.
//   - DONE is final until the retention ends; a retry never runs the
//     operation again within it.
//
// # Failures
//
//   - The operation returns an error or panics: the claim is released at
//     once and the retry runs it again (with the next epoch).
//   - The operation returns an error wrapping ErrOutcomeUnknown (MarkUnknown):
//     the claim is kept until the lease ends; meanwhile callers get OutcomeUnknown
//     with the time left; after it, the next caller runs it again.
//   - The process dies while holding a claim: the lease ends and the next
//     caller takes over. For a TxGuard operation nothing had committed; for
//     an external effect the operation may run twice, so it must send a
//     downstream key derived from business data.
//   - A store call fails: a failed claim is read back (the owner token shows
//     whether it landed) and otherwise reported OutcomeUnavailable without running
//     anything; a failed completion is read back and retried once, never
//     resolved by running the operation again.
//   - The store fails while the operation runs or right after it (an
//     outage): the effect happened, so the guard does not let the key go.
//     Do returns the response with ErrUnavailable and ErrRecording, and a
//     background recorder retries the completion (backoff 50 ms doubling to
//     1 s, for Config.RecordTimeout), extending the lease whenever the store
//     answers. Meanwhile a retry in the same process first tries to record
//     the outcome itself and is refused (OutcomeUnavailable) until it can, and a
//     retry elsewhere meets the live lease (OutcomeInFlight). So the first write
//     that reaches the recovered store is the fenced completion and every
//     retry then replays it. The window left: an outage longer than the
//     lease lets another process take the key over if its retry reaches the
//     recovered store before the recorder does (at most one backoff step,
//     1 s); a longer lease closes it. An unknown mark that the store did not
//     take is retried the same way. Drain waits for the recorder at
//     shutdown; a process that dies with outcomes unrecorded is the case
//     above (a downstream key absorbs the rerun).
//   - Validation failures, conflicts and in-flight duplicates store nothing.
package key
