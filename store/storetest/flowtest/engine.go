package flowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// exerciseEngine runs execution.Engine over the store: workers racing for
// the steps of many tasks each complete every step once, with a ledger
// row written in the completing transaction, and every execution's
// history is exactly created, queued, running, succeeded, numbered 1 to 4.
func exerciseEngine[TX any](t *testing.T, open storetest.Open[TX]) {
	ctx := context.Background()
	t.Run("WorkersRaceForSteps", func(t *testing.T) {
		t.Parallel()
		s, ledger := storetest.OpenAs[execution.Store[TX]](t, open, nil)
		var sent atomic.Int64
		en, err := execution.New(s, &execution.Config{
			Types: map[string]execution.TypeConfig{"export": {Lease: time.Minute}},
			OnEventTx: func(context.Context, any, string, store.Task, store.Execution, store.Event) error {
				sent.Add(1)
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		const tasks, workers = 24, 6
		var ids []string
		for i := range tasks {
			if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
				_, e, err := en.CreateTx(ctx, tx, "app", execution.NewTask{Type: "export", Input: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
				ids = append(ids, e.ID)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		completed := map[string]int{}
		var errs []error
		storetest.Concurrently(workers, func(w int) {
			for {
				done := false
				err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
					c, ok, err := en.ClaimTx(ctx, tx, []string{"export"}, fmt.Sprintf("w%d", w), 0)
					if err != nil || !ok {
						done = !ok
						return err
					}
					// The step's local effect commits with its completion.
					if err := ledger.Charge(ctx, tx, c.Step.ID); err != nil {
						return err
					}
					if _, err := en.CompleteTx(ctx, tx, "app", c.Step.ID, c.Step.Epoch, json.RawMessage(`{"ok":true}`)); err != nil {
						return err
					}
					mu.Lock()
					completed[c.Step.ID]++
					mu.Unlock()
					return nil
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if done {
					return
				}
			}
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if len(completed) != tasks {
			t.Fatalf("%d steps completed, want %d", len(completed), tasks)
		}
		for id, n := range completed {
			if n != 1 || charges(t, ledger, id) != 1 {
				t.Fatalf("step %s completed %d times, %d ledger rows", id, n, charges(t, ledger, id))
			}
		}
		want := []string{"idem.execution.created", "idem.execution.queued", "idem.execution.running", "idem.execution.succeeded"}
		for _, id := range ids {
			evs, err := s.ListEvents(ctx, "app", id, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for i, ev := range evs {
				if ev.Sequence != int64(i+1) {
					t.Fatalf("execution %s: event %d has sequence %d", id, i+1, ev.Sequence)
				}
				types = append(types, ev.Type)
			}
			if !slices.Equal(types, want) {
				t.Fatalf("execution %s: events %v, want %v", id, types, want)
			}
		}
		if got := sent.Load(); got != int64(len(want)*tasks) {
			t.Fatalf("OnEventTx called %d times, want %d", got, len(want)*tasks)
		}
	})
}
