// Package flowtest runs idem's own packages over a store: key.Guard,
// key.TxGuard, inbox.Processor and execution.Engine, as users call them, with faults
// injected between them and the store; and the engine's benchmarks. It is
// not part of the storage contract, which package storetest checks by
// calling the store alone: flowtest checks that the packages built on that
// contract keep their promises on every store, so a store's test runs both
// on the same Open:
//
//	func TestConformance(t *testing.T) { storetest.Exercise(t, open) }
//	func TestFlows(t *testing.T)       { flowtest.Exercise(t, open) }
//
// The flows live here rather than in storetest so that the contract
// depends on package store alone, and here rather than in the tests of
// package key and inbox so that each store's own test (and its benchmarks,
// beside their hand-written baselines) runs them, with the store's own
// setup.
package flowtest

import (
	"testing"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// Exercise runs, each as a parallel subtest, every flow that the store open
// returns serves: "Guard" (key.Guard, and faults) over a store.Store,
// "TxGuard" (key.TxGuard) over a store.TxStore[TX], "Processor"
// (inbox.Processor) over a store.InboxStore[TX]. It fails when the store
// serves none of them.
func Exercise[TX any](t *testing.T, open storetest.Open[TX]) {
	t.Helper()
	probe := open(t, nil).Store
	flows := []struct {
		name string
		is   bool
		run  func(*testing.T, storetest.Open[TX])
	}{
		{"Guard", storetest.Implements[store.Store](t, probe), exerciseGuard[TX]},
		{"TxGuard", storetest.Implements[store.TxStore[TX]](t, probe), exerciseTxGuard[TX]},
		{"Processor", storetest.Implements[store.InboxStore[TX]](t, probe), exerciseProcessor[TX]},
		{"Engine", storetest.Implements[execution.Store[TX]](t, probe), exerciseEngine[TX]},
	}
	ran := 0
	for _, f := range flows {
		if !f.is {
			continue
		}
		ran++
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			f.run(t, open)
		})
	}
	if ran == 0 {
		t.Fatalf("%T serves none of the flows", probe)
	}
}
