// Package chaos holds the proxy chaos test: four `idem proxy` processes share
// one store (PostgreSQL, SQLite, Redis) in front of a deduplicating ledger;
// one proxy is killed with SIGKILL at random intervals and restarted while
// `idem bench run` drives duplicates, conflicting bodies and several
// principals through all four; after a drain, `bench check` verifies over the
// history and the ledger: no duplicated or lost effect, byte-identical
// replays, other bodies never replayed, no response across principals, every
// key terminal, and per-key linearizability (porcupine).
//
// The short version runs in CI. The long one (10,000 requests over 2,000
// keys, a kill every 2 s for 60 s) runs with
//
//	go test ./internal/chaos -run Chaos -timeout 30m -v -args -chaos.long
package chaos
