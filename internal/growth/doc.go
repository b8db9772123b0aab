// Package growth holds no code, only a measurement run as a test: how the
// cost of the request-key stores (SQLite, PostgreSQL, Redis) grows with the
// number of records they hold.
//
// For each store and each size N of 10^3, 10^5 and 10^7 records (capped by
// -growth.max, whose default of 10^4 keeps CI to 10^3 and 10^4), TestGrowth
// fills the store with N completed records written directly in the store's
// own format (one INSERT ... SELECT FROM generate_series in PostgreSQL,
// prepared inserts in large transactions in SQLite, pipelined HSET and
// PEXPIREAT in Redis), keyed as package key keys them (Scope.StoreKey,
// FingerprintOf). It then checks through the store's API that sampled
// records replay (DONE, the same response, the expiry written), and
// measures through the API:
//
//   - latency (p50, p99) of a Claim and Complete on a new key, and of a
//     replay (a Claim on a random stored key with its fingerprint), from 1
//     client and from 16, with the throughput at 16;
//   - on the SQL stores, one Sweep of a batch of 1,000 due records, then
//     one with none due, as key.Sweep ends every pass;
//   - bytes per record: the file and its write-ahead log (SQLite), the
//     table with its indexes (PostgreSQL), used_memory (Redis);
//   - the Go heap in use after a GC, before and after each size, which
//     must stay flat: the records live in the store, not in the process;
//   - at the largest size, new-key throughput from 1 to 256 clients.
//
// Every store is a private one, removed at the end: a temporary SQLite
// file, a PostgreSQL schema of the test's own (testdb, IDEM_TEST_POSTGRES),
// and a redis-server of the test's own on a Unix socket, without
// persistence, so that ten million keys neither fill the shared server nor
// mix other tests' keys into its used_memory. redis-server must be on the
// PATH; an unreachable PostgreSQL or a Redis that does not start fails the
// test, which never skips.
//
// It asserts what must hold (sampled records replay, every operation
// succeeds, the record counts add up, the Go heap grows by at most 64 MiB
// from the smallest size to the largest) and never a timing; the tables are
// logged. The full run, whose tables are in docs/performance.md:
//
//	go test ./internal/growth -run Growth -v -timeout 60m -args -growth.max=10000000
package growth
