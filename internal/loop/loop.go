// Package loop runs the background passes of idem's concerns (sweepers,
// compensators) in one shape: a pass at once, then every interval, until
// the context ends.
package loop

import (
	"context"
	"time"
)

// Every calls pass at once, then again at once while it reports more work,
// and otherwise after interval, until ctx ends; it returns ctx's error.
// pass handles (logs) its own errors: one failed pass never ends the loop.
func Every(ctx context.Context, interval time.Duration, pass func() (more bool)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if pass() {
			t.Reset(0)
		} else {
			t.Reset(interval)
		}
	}
}
