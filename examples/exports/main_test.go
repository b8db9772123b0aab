package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestRun runs the README's command in process and checks its story: the
// lost answer retried into the same task, the callbacks applied in order,
// the rerun's events winning over the old run's late one.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), t.TempDir(), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"Idempotent-Replayed: true",
		"inbox applied run 1: created, queued, running, progress",
		"inbox applied run 2: created, queued, running, progress, succeeded",
		`"outcome":"superseded"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
