package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// ledger is a business table in the memory store's transactions.
type ledger struct{ rows []string }

func (l *ledger) add(tx *memstore.Tx, row string) {
	l.rows = append(l.rows, row)
	n := len(l.rows)
	tx.OnRollback(func() { l.rows = l.rows[:n-1] })
}

func TestHandlerCommitsItsWritesWithTheCompletion(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("export")
	var l ledger
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			return execution.Result[*memstore.Tx]{
				Output: json.RawMessage(`{"rows":1}`),
				Writes: func(ctx context.Context, tx *memstore.Tx) error { l.add(tx, job.Step.IdempotencyKey); return nil },
			}, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ran, err := w.RunOnce(context.Background()); !ran || err != nil {
		t.Fatalf("RunOnce: %v %v", ran, err)
	}
	if ran, err := w.RunOnce(context.Background()); ran || err != nil {
		t.Fatalf("a second RunOnce ran %v (%v): the step is completed", ran, err)
	}
	got, _ := h.s.GetExecution(context.Background(), "app", e.ID)
	if got.Status != store.ExecutionSucceeded || string(got.Output) != `{"rows":1}` || len(l.rows) != 1 {
		t.Fatalf("execution %+v, ledger %v", got, l.rows)
	}
}

func TestHandlerFailures(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("export")
	calls := 0
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			calls++
			if calls == 1 {
				panic("boom")
			}
			return execution.Result[*memstore.Tx]{}, execution.Permanent(errors.New("no such order"))
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.s.GetExecution(context.Background(), "app", e.ID); got.Status != store.ExecutionQueued {
		t.Fatalf("after a panic: %v, want QUEUED (retried)", got.Status)
	}
	h.clock.Advance(time.Minute)
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.s.GetExecution(context.Background(), "app", e.ID); got.Status != store.ExecutionFailed || got.Error != "no such order" {
		t.Fatalf("after a permanent failure: %+v", got)
	}
}

// A handler whose claim is lost has its context cancelled with ErrFenced,
// and its completion (with its writes) is refused and rolled back.
func TestHandlerLosesItsClaim(t *testing.T) {
	h := newHarness(t, nil)
	h.create("export")
	var l ledger
	started, cause := make(chan struct{}), make(chan error, 1)
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			// A handler that completes anyway: its writes must not land.
			return execution.Result[*memstore.Tx]{
				Writes: func(ctx context.Context, tx *memstore.Tx) error { l.add(tx, "stale"); return nil },
			}, nil
		},
	}, &execution.WorkerConfig{Heartbeat: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := w.RunOnce(context.Background()); done <- err }()
	<-started
	h.clock.Advance(11 * time.Second) // past the 10 s lease, on the engine's clock
	if n, err := h.en.Expire(context.Background(), 10); n != 1 || err != nil {
		t.Fatalf("Expire: %d %v", n, err)
	}
	if c, ok := h.claim("other", "export"); !ok || c.Step.Epoch != 2 {
		t.Fatalf("takeover: %+v %v", c, ok)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, execution.ErrFenced) {
			t.Fatalf("handler's context ended with %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	if err := <-done; !errors.Is(err, execution.ErrFenced) {
		t.Fatalf("RunOnce: %v, want ErrFenced", err)
	}
	if len(l.rows) != 0 {
		t.Fatalf("the stale handler's writes landed: %v", l.rows)
	}
}
