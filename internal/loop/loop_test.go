package loop

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A pass runs at once, again at once while it reports more, then every
// interval; the loop ends with ctx's error.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		var at []time.Duration
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			done <- Every(ctx, time.Minute, func() bool {
				at = append(at, time.Since(start))
				return len(at) < 3 // two passes with more work, then idle
			})
		}()
		time.Sleep(150 * time.Second)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Every returned %v", err)
		}
		want := []time.Duration{0, 0, 0, time.Minute, 2 * time.Minute}
		if len(at) != len(want) {
			t.Fatalf("passes at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("passes at %v, want %v", at, want)
			}
		}
	})
}
