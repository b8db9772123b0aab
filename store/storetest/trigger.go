package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseTriggers checks store.TriggerStore by calling it directly: an
// identity is taken once, whatever the concurrency; a rolled-back take
// leaves it free; a replacement applies once per generation.
func exerciseTriggers[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	t0 := testclock.Epoch0
	trig := func(key, exec string) store.Trigger {
		return store.Trigger{App: "shop", Workflow: "checkout", Key: []byte(key), Fingerprint: []byte("fp-" + exec), ExecutionID: exec,
			CreatedAt: t0, ExpiresAt: t0.Add(24 * time.Hour)}
	}
	take := func(t *testing.T, s store.TriggerStore[TX], tr store.Trigger) (store.Trigger, bool) {
		t.Helper()
		var cur store.Trigger
		var taken bool
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			var err error
			cur, taken, err = s.TakeTriggerTx(ctx, tx, tr)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return cur, taken
	}

	t.Run("TakenOnce", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.TriggerStore[TX]](t, open, nil)
		cur, taken := take(t, s, trig("k1", "e1"))
		if !taken || cur.ExecutionID != "e1" || cur.Generation != 1 {
			t.Fatalf("first take: %+v %v", cur, taken)
		}
		cur, taken = take(t, s, trig("k1", "e2"))
		if taken || cur.ExecutionID != "e1" || string(cur.Fingerprint) != "fp-e1" || cur.Generation != 1 ||
			!cur.CreatedAt.Equal(t0) || !cur.ExpiresAt.Equal(t0.Add(24*time.Hour)) {
			t.Fatalf("second take: %+v %v, want the first's record", cur, taken)
		}
		for _, other := range []store.Trigger{
			{App: "other", Workflow: "checkout", Key: []byte("k1"), Fingerprint: []byte("fp"), ExecutionID: "e3", CreatedAt: t0, ExpiresAt: t0},
			{App: "shop", Workflow: "refund", Key: []byte("k1"), Fingerprint: []byte("fp"), ExecutionID: "e4", CreatedAt: t0, ExpiresAt: t0},
			trig("k2", "e5"),
		} {
			if cur, taken := take(t, s, other); !taken || cur.ExecutionID != other.ExecutionID {
				t.Fatalf("%+v: another identity: %+v %v", other, cur, taken)
			}
		}
	})

	t.Run("ConcurrentTakesStartOne", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.TriggerStore[TX]](t, open, nil)
		const n = 100
		got := make([]store.Trigger, n)
		taken := make([]bool, n)
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			errs[i] = s.InTx(ctx, func(ctx context.Context, tx TX) error {
				var err error
				got[i], taken[i], err = s.TakeTriggerTx(ctx, tx, trig("k", fmt.Sprintf("e%d", i)))
				return err
			})
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		winner := ""
		for i := range n {
			if taken[i] {
				if winner != "" {
					t.Fatalf("two takes won: %s and e%d", winner, i)
				}
				winner = fmt.Sprintf("e%d", i)
			}
		}
		if winner == "" {
			t.Fatal("no take won")
		}
		for i := range n {
			if got[i].ExecutionID != winner {
				t.Fatalf("take %d answered %s, the winner is %s", i, got[i].ExecutionID, winner)
			}
		}
	})

	t.Run("RolledBackTakeLeavesItFree", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.TriggerStore[TX]](t, open, nil)
		errBack := errors.New("roll back")
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			if _, taken, err := s.TakeTriggerTx(ctx, tx, trig("k", "e1")); err != nil || !taken {
				return fmt.Errorf("take: %v %w", taken, err)
			}
			return errBack
		})
		if !errors.Is(err, errBack) {
			t.Fatal(err)
		}
		if cur, taken := take(t, s, trig("k", "e2")); !taken || cur.ExecutionID != "e2" {
			t.Fatalf("after a rolled-back take: %+v %v", cur, taken)
		}
	})

	t.Run("ReplacedOncePerGeneration", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.TriggerStore[TX]](t, open, nil)
		take(t, s, trig("k", "e1"))
		replace := func(tr store.Trigger) bool {
			t.Helper()
			var applied bool
			if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
				var err error
				applied, err = s.ReplaceTriggerTx(ctx, tx, tr)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return applied
		}
		next := trig("k", "e2")
		next.Generation, next.CreatedAt, next.ExpiresAt = 2, t0.Add(25*time.Hour), t0.Add(49*time.Hour)
		if !replace(next) {
			t.Fatal("the replacement of generation 1 was not applied")
		}
		stale := trig("k", "e3")
		stale.Generation = 2
		if replace(stale) {
			t.Fatal("a second replacement of generation 1 was applied")
		}
		none := trig("never", "e4")
		none.Generation = 2
		if replace(none) {
			t.Fatal("a replacement of an identity never taken was applied")
		}
		cur, taken := take(t, s, trig("k", "e5"))
		if taken || cur.ExecutionID != "e2" || cur.Generation != 2 || string(cur.Fingerprint) != "fp-e2" ||
			!cur.CreatedAt.Equal(t0.Add(25*time.Hour)) || !cur.ExpiresAt.Equal(t0.Add(49*time.Hour)) {
			t.Fatalf("after the replacement: %+v %v", cur, taken)
		}
	})
}
