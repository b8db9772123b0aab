// Package testutil is the fence around idem's test helpers: everything
// under it is imported by tests only (internal/archtest refuses it in any
// other package's non-test files), and every IDEM_TEST_* environment
// variable is read here, once.
//
//   - testclock: the settable clock that stores, guards and relays read.
//   - testdb: a database of the test's own on the real servers (a
//     PostgreSQL schema, a Redis key prefix).
//   - migratetest: a SQL store's migrations taken down and up again.
//   - fault: a store whose calls fail before or after they reach it.
//   - procstat: a process's resident memory, for the backlog and hostile
//     measurements.
package testutil
