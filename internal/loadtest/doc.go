// Package loadtest is idem's load and chaos tool, the library behind the
// `idem bench` command (whose flags are wired in internal/cli):
//
//   - a ledger (StartLedger, RunLedger): an HTTP upstream that records every
//     effect, in memory and in an optional fsynced log, and that dedups on
//     the forwarded Idempotency-Key (an idempotent upstream) or not;
//   - a driver (Run): Keys scopes × Dups duplicates at Clients clients over
//     one or more targets, a share of same-key-other-body requests, several
//     principals sharing key strings; every request is an invoke line and a
//     completion line (ok, fail, info) in a JSON-lines history (Record);
//     clients may retry a request that is not terminal at once, with the
//     same key (RetryFor), and a drain retries every unresolved request
//     until it is terminal;
//   - a checker (Check, CheckRecords): no duplicated, lost or unexpected
//     effect, byte-identical replays, other bodies refused, no answer
//     across principals or keys, every request terminal, and a per-key
//     linearizability check with porcupine (model.go states the model).
//
// Everything runs in-process: a test starts a ledger, starts the processes
// under test in front of it, calls Run with their URLs while it kills and
// restarts them, then calls Check with the ledger's log and Proxied set.
package loadtest
