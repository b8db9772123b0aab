// Package archtest holds no code, only the tests that keep idem's package
// rules: which of the module's packages may import which, which outside
// packages (database drivers, net/http, testing) each may reach, and that no
// public API names a type from internal/. The rules are tables in
// imports_test.go; docs/architecture.md states them in prose.
//
// The tests read the module with `go list` and fail on any crossing, on a
// package that is in no layer yet, and on an exception that is no longer
// needed, so that the tables stay the truth.
package archtest
