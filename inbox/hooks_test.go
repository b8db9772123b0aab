package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// TestHooks checks that each hook is told what the processor did, once,
// and only for what committed.
func TestHooks(t *testing.T) {
	ctx := context.Background()
	var got []string
	hooks := inbox.Hooks{
		OnEvent:        func(r inbox.Result) { got = append(got, "event "+r.Outcome.String()) },
		OnGaps:         func(m order.Mode, n int) { got = append(got, fmt.Sprintf("gaps %v %d", m, n)) },
		OnDeadLetters:  func(n int) { got = append(got, fmt.Sprintf("dead letters %d", n)) },
		OnCompensated:  func() { got = append(got, "compensated") },
		OnRetry:        func() { got = append(got, "retry") },
		OnBackpressure: func() { got = append(got, "backpressure") },
	}
	clock := testclock.New(testclock.Epoch0)
	failOnce := map[string]bool{"o#4": true}
	apply := func(_ context.Context, _ *memstore.Tx, ev event.Event) error {
		switch {
		case ev.ID == "o#8":
			return inbox.Invalid(errors.New("no such order"))
		case failOnce[ev.ID]:
			failOnce[ev.ID] = false
			return errors.New("transient")
		}
		return nil
	}
	p, err := inbox.New(memstore.NewInbox(), apply, &inbox.Config{
		Mode: order.ModeDelta, MaxParked: 2, Now: clock.Now, Backoff: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Hooks: hooks,
	})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(seq int64) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: fmt.Sprintf("o#%d", seq), Subject: "o",
			Type: "order.changed", Sequence: seq, Data: []byte(`{}`), DataContentType: "application/json"}
	}
	step := func(name string, f func() error, want ...string) {
		t.Helper()
		got = nil
		if err := f(); err != nil && !errors.Is(err, inbox.ErrBackpressure) {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: hooks told %q, want %q", name, got, want)
		}
	}
	process := func(seq int64) func() error {
		return func() error { _, err := p.Process(ctx, ev(seq)); return err }
	}
	step("in order", process(1), "event processed")
	step("redelivered", process(1), "event duplicate")
	step("after a gap", process(3), "event parked", "gaps delta 1")
	step("filling it", process(2), "event processed")
	step("transient failure", process(4), "retry", "event processed")
	step("another gap", process(6), "event parked", "gaps delta 1")
	step("parked", process(7), "event parked")
	step("backlog full", process(8), "backpressure")
	compensate := func(err error) func() error {
		return func() error {
			_, cerr := p.Compensate(ctx, func(context.Context, *memstore.Tx, store.StreamKey, order.Gap) error { return err })
			if !errors.Is(cerr, err) {
				return fmt.Errorf("Compensate: %w, want %v", cerr, err)
			}
			return nil
		}
	}
	clock.Advance(time.Hour)
	step("compensated", compensate(nil), "compensated")
	step("a third gap", process(10), "event parked", "gaps delta 1")
	clock.Advance(time.Hour)
	down := errors.New("down")
	step("compensation rolled back", compensate(down))
	step("invalid", process(8), "event dead_lettered", "dead letters 1")
}
