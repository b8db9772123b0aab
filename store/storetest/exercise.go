package storetest

import "testing"

// Exercise runs the conformance suite against stores made by newStore.
func Exercise(t *testing.T, newStore NewStore) {
	t.Helper()
	// The suite lands in the next commit; the harness above is its contract.
	t.Fatal("storetest: suite not written yet")
}

// ExerciseTx runs the transactional conformance suite.
func ExerciseTx[TX any](t *testing.T, newStore NewTxStore[TX]) {
	t.Helper()
	t.Fatal("storetest: suite not written yet")
}
