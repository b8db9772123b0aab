// Package idem stops duplicate effects. Retries and redeliveries are
// normal; charging a card twice is not.
//
// Wrap an operation with a key, and a retried request runs it at most once
// and replays its first result. This root package holds no code, only this
// tour and the runnable Example (a charge on SQLite, charged once and
// replayed). The sections follow the README's.
//
// # In front of any API: idem proxy
//
// `idem proxy --upstream URL --store sqlite:idem.db --migrate` (package
// proxy) puts the Idempotency-Key contract in front of any HTTP API: a POST
// or PATCH with a key from an authenticated caller reaches the upstream at
// most once per (caller, method and path, key), and its retries get the
// first answer back with Idempotent-Replayed: true. It forwards the key
// unchanged, answers 409 + Retry-After while the first request runs,
// releases the key when the upstream was never reached (502) and holds it
// as "outcome unknown" for --unknown-hold when the upstream's answer was
// lost. When the store fails while the upstream acts, the client gets 503
// and the proxy records the answer once the store is back: the retry gets
// the replay. Several proxies may share one store. `go run
// ./examples/proxydemo` shows it on embedded SQLite.
//
// # In a Go service: the middleware
//
// Package httpidem is the same contract as net/http middleware:
// httpidem.New over a key.Guard, or httpidem.NewTx over a transactional
// guard, whose handlers take the store's transaction with TxFrom so that
// their writes commit together with the stored response. Errors are RFC
// 9457 problem+json.
//
// # Receiving events: signed webhooks, the inbox, per-object order
//
//   - signature: sign and verify bodies with HMAC-SHA256, idem scheme
//     (Idem-Signature: t=,v1=) or Standard Webhooks, several secrets, a
//     ±5 min window.
//   - event: CloudEvents 1.0 on the official SDK, binary or structured,
//     with the sequence and executionid extensions and an ownership check.
//   - order: the pure decision per stream (source, subject): snapshot mode
//     (the newest wins) or delta mode (in order, parked behind gaps, never
//     skipped), executions, compensation.
//   - inbox: one effect per event id, in the caller's transaction, with the
//     order decided by package order, dead letters, compensation of
//     overdue gaps and retention.
//   - webhook: the endpoint that composes them (signature, CloudEvent,
//     ownership, inbox, commit, then the 200), and Admin, the operator's
//     API over dead letters and gaps.
//
// `go run ./examples/orders` shows it: signed events out of order,
// deduplicated and ordered on SQLite.
//
// # Sending effects: the outbox, stable downstream keys, Read-Verify-Write
//
//   - outbox: intents written in the business transaction, delivered by
//     relays that claim them with a lease and an epoch, every attempt with
//     the same key; a response policy per target, Read-Verify-Write for
//     targets without keys, signed CloudEvents callbacks. outbox/doc.go
//     draws the intent's state machine.
//   - keytemplate: the JSONata templates that compute those keys from the
//     intent's data ("= 'charge-' & payload.order.id"), refusing any that
//     reads the clock or randomness.
//
// # Durable executions: idem serve
//
// Package execution holds the states of executions and steps and the
// engine that changes them, each change one transaction with the events
// that report it; the store family is store.ExecutionStore, StepStore and
// AppStore. Package serve is the HTTP API of `idem serve`: tasks created
// with request keys, workers claiming steps under a lease and an epoch,
// events and signed callbacks through the outbox. `go run ./examples/exports`
// shows a task's whole life, a rerun included.
//
// # The core: request keys
//
// Package key runs an operation at most once per (principal, operation,
// idempotency key) and replays its first result: Guard.Do for any store,
// TxGuard.DoTx to commit the operation's own writes together with the
// stored result, so that a local effect happens exactly once; Guard.Claim
// and TxGuard.ClaimTx are the same in two steps, for callers that cannot
// run the operation inside a closure. Outcomes are
// OutcomeExecuted, OutcomeReplayed, OutcomeInFlight, OutcomeUnknown,
// OutcomeConflict and OutcomeUnavailable (the store did not confirm a
// claim: nothing ran). key/doc.go draws the
// record's state machine; RunSweeper deletes expired records.
//
// # Metrics
//
// No component imports a metrics library: each takes Hooks in its Config
// (inbox, outbox, webhook, proxy; httpidem's OnOutcome) and calls them as
// it works. Package prom turns them into Prometheus metrics, one call per
// component (prom.Inbox, prom.Outbox, prom.Webhook, prom.Proxy,
// prom.Middleware); idem proxy --admin serves them on /metrics.
//
// # What is promised
//
// A local effect (written to the same SQL database, through DoTx, NewTx or
// the inbox) happens exactly once per key or event id; an external effect
// is attempted at least once, every attempt carrying the same downstream
// key; an acknowledgement is sent only once what it acknowledges is
// durable. docs/guarantees.md states each guarantee, its limits, and the
// tests that prove it; docs/http.md is the HTTP contract, with every
// problem type; docs/architecture.md the packages and their import rules.
//
// # Stores
//
// Package store is the storage interface (Store, TxStore, InboxStore,
// OutboxStore), with its sentinel errors and capabilities. The
// implementations:
//
//   - store/sqlitestore: the embedded default (WAL, synchronous=FULL),
//     pure Go; shares *sql.Tx with the application.
//   - store/pgstore: PostgreSQL through pgx, for many processes; shares
//     pgx.Tx, claims with FOR UPDATE SKIP LOCKED, wakes relays with
//     LISTEN/NOTIFY.
//   - store/redisstore: Redis, one Lua script per atomic step; request
//     keys only; New refuses a server that does not fsync every write
//     (unless Config.AllowNonDurable).
//   - store/memstore: the in-memory reference model.
//   - store/storetest: the conformance suite every store passes: the
//     storage contract, called directly.
//   - store/storetest/flowtest: key.Guard and inbox.Processor over every
//     store, with faults, and the shared benchmarks.
//
// # The idem command
//
// `go build ./cmd/idem` gives the binary. Every flag of idem proxy has an
// IDEM_* environment variable (--max-body is IDEM_MAX_BODY); the --store of
// idem migrate and idem outbox is IDEM_STORE.
//
//   - idem proxy --upstream URL: the contract in front of any HTTP API
//     (above), with --admin ADDR for /metrics, /healthz and /readyz.
//   - idem serve --task-types T,... [--demo]: the task API (tasks,
//     executions, workers, callbacks) on SQLite or PostgreSQL.
//   - idem app create|list|rotate|disable, idem worker-token create: the
//     applications and worker tokens of idem serve.
//   - idem migrate --store sqlite:PATH|postgres://...: applies the
//     embedded schema migrations (stores never migrate by themselves).
//   - idem bench ledger|run|check: the load and chaos tool; ledger is an
//     upstream that records every effect (deduplicating with --dedup), run
//     drives a target with duplicates, conflicts and several principals and
//     writes a history, check verifies the history against the ledger.
//   - idem webhook sign|verify --scheme idem|standard --secret S: signs a
//     body read on stdin, or verifies one (exit 0, 1 on a failed
//     verification, 2 on usage).
//   - idem inbox dead-letters|requeue|gaps --admin URL: the inbox's dead
//     letters and gaps, through a service's webhook.Admin handler.
//   - idem outbox list|requeue|enable|disabled --store ...: the outbox's
//     intents and disabled targets, straight from the store.
//   - idem template eval --template T: the key a template gives for an
//     intent read on stdin.
package idem
