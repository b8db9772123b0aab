// Package outbox sends outbound effects exactly as often as the target lets
// it: at least once, every attempt with the same key (SYSTEM.md component
// 8, seed 002's third layer).
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
