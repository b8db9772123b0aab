// Package outbox sends outbound effects exactly as often as the target lets
// it: at least once, every attempt with the same key (docs/guarantees.md,
// G1).
//
// # Intent, then delivery
//
// Relay.EnqueueTx writes an intent (target, method, path, body, headers,
// metadata, optional stream) in the caller's business transaction: it
// exists if and only if the business change committed. Its idempotency key
// is computed there, by the target's key template over the intent's data
// (KeyInput: the body as "payload"), and stored with it, so that every
// attempt — after a crash, a redeploy, an operator's requeue — sends the
// same key, and "charge-" and "ship-" keys of one order never collide. A
// key that cannot be computed refuses the intent inside the transaction.
//
// A Relay claims due intents with a lease and an epoch (several relays may
// share the store; PostgreSQL claims with FOR UPDATE SKIP LOCKED), sends
// each, and records the result fenced by the claim: a relay that outlived
// its lease (paused, partitioned) cannot record anything, and the intent is
// someone else's. Intents of one stream go one at a time, in order, each
// after the previous one ended. Relays wake on the store's notifications
// (PostgreSQL LISTEN/NOTIFY) or Notify, and otherwise poll.
//
// # The intent's state machine
//
//	                  EnqueueTx (commits with the business change)
//	(absent) ─────────────────────────────────────────────► PENDING ◄───────────────────┐
//	   ▲                                                    (due at)                    │
//	   │                                                       │                        │ RetryIntent:
//	   │                                   ClaimIntents: due,  │                        │ a retryable answer, or
//	   │                                   target enabled,     │                        │ none, with budget left
//	   │                                   head of its stream  │                        │ (due after Retry-After
//	   │                                   (epoch+1,           │                        │ or backoff); 410
//	   │                                   attempts+1)         ▼                        │ (target disabled)
//	   │                           ┌────────────────────── IN_FLIGHT ───────────────────┘
//	   │                           │                    (epoch e, owner o, ◄──┐
//	   │                           │ CompleteIntent      lease until) ────────┘ takeover: the lease
//	   │                           │                           │                ended (epoch e+1,
//	   │ SweepIntents              ▼                           │ KillIntent     attempts+1, new owner)
//	   └──────────────────────── DONE                          ▼
//	     (Retention after done) (status)                      DEAD ── RequeueIntent ──► PENDING
//	                                                                  (attempts 0)
//
// # Invariants
//
//   - An intent exists if and only if its business transaction committed:
//     EnqueueTx writes it in that transaction, and a rollback takes it back
//     (with its place in its stream).
//   - Its key is computed once, when it is enqueued, and stored with it:
//     every attempt, whichever relay makes it, sends that key.
//   - At most one live claim per intent: ClaimIntents is one atomic step,
//     and a row goes to one relay. The epoch grows by one at every claim
//     and the owner token is fresh, and every result (CompleteIntent,
//     RetryIntent, KillIntent) is a compare-and-set on (epoch, owner,
//     IN_FLIGHT): a relay that outlived its lease gets store.ErrFenced and
//     changes nothing.
//   - A claim is an attempt: Attempts counts claims, takeovers included.
//   - One intent of a stream at a time: a row is claimed only when every
//     earlier row of its stream is DONE or DEAD, so a stream is delivered in
//     enqueue order, each after the previous one ended.
//   - DONE is final until Sweep (or RunSweeper, every SweepInterval) deletes it, Config.Retention after it
//     ended; DEAD is final until an operator requeues it.
//   - Due times and leases are measured on the relays' clock (Config.Now),
//     not the store's: relays that share a store need clocks that agree
//     well within the lease.
//
// # Failures
//
//   - The relay dies, or stalls past its lease, holding an intent: the next
//     claim takes it over (epoch+1) and sends it again with the same key;
//     the stalled relay's late result is fenced (logged, and reported to
//     Hooks.OnFenced: idem_outbox_fenced_total through prom.Outbox).
//   - No answer (timeout, reset, refused connection): the outcome is
//     unknown; it is logged and retried with the same key.
//   - The result cannot be recorded (the store does not answer): logged;
//     the lease ends and the intent is sent again with the same key.
//   - The relay shuts down (Run's context ends): a result already known
//     (done, dead) is still recorded, within 10 s, so that a delivered
//     intent is not sent again; a retry is not recorded, and the lease runs
//     out instead.
//   - Out of budget: a retryable failure recorded after MaxAttempts
//     attempts makes the intent DEAD instead.
//   - 410 Gone: the target is disabled (DisableTarget) and the intent put
//     back PENDING; relays skip a disabled target's intents, which wait,
//     holding their streams, until EnableTarget.
//   - Requeue: a DEAD intent does not hold its stream (DEAD ends its turn),
//     so once requeued it is delivered after the intents that followed it.
//
// # Response policy
//
//	| answer                          | result                                                      |
//	|---------------------------------|-------------------------------------------------------------|
//	| 2xx                             | done                                                        |
//	| 409                             | done (ConflictDone: "already exists") or retry (ConflictRetry: "in progress") |
//	| 410                             | target disabled: its intents wait until EnableTarget        |
//	| 429, 503                        | retry after Retry-After (seconds or date), else backoff     |
//	| 408, other 5xx                  | retry with backoff                                          |
//	| other 4xx                       | dead (ClientErrorsFail) or done as data (ClientErrorsComplete) |
//	| 3xx                             | dead: redirects are not followed                            |
//	| timeout, reset, no answer       | unknown outcome: logged, retried with the same key          |
//
// Retries back off exponentially (Backoff doubling to MaxBackoff, full
// jitter over the upper half); a claim is an attempt, so a relay that dies
// on an intent spends its budget too; after MaxAttempts the intent is dead.
// Dead intents are listed and requeued (ListIntents, RequeueIntent) with a
// new budget.
//
// # Read-Verify-Write
//
// For a target without idempotency keys, Target.Verify asks, before each
// write, whether the effect already exists (by business identifier);
// found completes the intent without writing, and the target's
// unique-constraint conflict (409, ConflictDone) counts as done. This
// narrows the window but cannot close it: if the relay crashes after the
// target applied the write and before the result is recorded, and the
// target has no unique constraint on the business identifier, a concurrent
// or later verify that runs before the target's write is visible can
// write again. Use it with the target's natural unique constraint.
//
// # Signed callbacks
//
// A target with Signer signs each body (idem scheme or Standard Webhooks,
// whose webhook-id is the key); with Events it sends CloudEvents in binary
// mode with id = the key, subject = the stream and sequence = the intent's
// place in it, so that an idem receiver (package webhook) dedups and orders
// them.
package outbox
