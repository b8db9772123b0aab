// Package idem stops duplicate effects. Retries and redeliveries are
// normal; charging a card twice is not.
//
// This root package holds no code, only the tour and runnable examples.
// The packages:
//
//   - key: request keys. Guard.Do runs an operation at most once per
//     (principal, operation, idempotency key) and replays its first result;
//     TxGuard.DoTx commits the operation's own writes together with the
//     stored result, for exactly-once local effects. key/doc.go draws the
//     record's state machine.
//   - store: the storage interface, with its sentinel errors and
//     capabilities; store/storetest is the conformance suite every store
//     passes.
//   - store/sqlitestore: the embedded default (WAL, synchronous=FULL).
//   - store/pgstore: PostgreSQL through pgx, for many processes.
//   - store/redisstore: Redis, one Lua script per atomic step; it reports
//     whether the server's persistence makes claims durable.
//   - store/memstore: the in-memory reference model.
//   - httpidem: net/http middleware for the Idempotency-Key header (HTTP.md),
//     with RFC 9457 problem+json errors and transactional handlers.
//   - proxy: the same contract in front of any HTTP API (`idem proxy`).
//   - signature: sign and verify callbacks, idem scheme and Standard Webhooks.
//   - cmd/idem: the command (idem proxy, migrate, bench, webhook).
//
// The promise, as SYSTEM.md states it: a local effect (written to the same
// SQL database, through DoTx) happens exactly once per key; an external
// effect is attempted at least once, every attempt carrying the same
// downstream key.
package idem
