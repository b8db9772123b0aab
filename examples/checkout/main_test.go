package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRun runs the README's command in process and checks its story: 50
// triggers make one run, the charge survives its service's death, the
// operator's retry and start over send nothing twice, and every order has
// one charge and one shipment.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), t.TempDir(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"o-1 triggered 50 times at once: 1 run (1 × 201, 49 × 200 Idempotent-Replayed)",
		"step charge COMPLETED epoch 2",
		"o-9: the operator retried the run after fixing the address: SUCCEEDED",
		"every order: one charge, one shipment",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
