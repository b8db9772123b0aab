package store_test

import (
	"testing"

	"github.com/idemhq/idem/store"
)

// CheckSettle refuses a transition that follows no step update of its own
// application, which would let a store's guard check another's step.
func TestCheckSettle(t *testing.T) {
	us := []store.StepUpdate{{App: "a", ID: "s1"}, {App: "b", ID: "s2"}}
	ts := []store.Transition{{App: "a", ID: "e1"}, {App: "b", ID: "e2"}}
	if err := store.CheckSettle(us, ts, []int{0, 1}); err != nil {
		t.Fatalf("a settle of its own steps: %v", err)
	}
	for name, after := range map[string][]int{
		"too few":            {0},
		"out of range":       {0, 2},
		"negative":           {-1, 1},
		"another app's step": {1, 0},
	} {
		if err := store.CheckSettle(us, ts, after); err == nil {
			t.Errorf("%s (%v): accepted", name, after)
		}
	}
}
