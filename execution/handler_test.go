package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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

// Run runs Concurrency steps at once (each handler waits here until all
// four run), and each completion commits its writes once.
func TestWorkerRunsConcurrently(t *testing.T) {
	h := newHarness(t, nil)
	var ids []string
	for range 4 {
		_, e := h.create("export")
		ids = append(ids, e.ID)
	}
	var l ledger
	var arrived sync.WaitGroup
	arrived.Add(4)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			arrived.Done()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				return execution.Result[*memstore.Tx]{}, execution.Permanent(errors.New("the other handlers never ran alongside"))
			}
			return execution.Result[*memstore.Tx]{
				Writes: func(ctx context.Context, tx *memstore.Tx) error { l.add(tx, job.Step.IdempotencyKey); return nil },
			}, nil
		},
	}, &execution.WorkerConfig{Concurrency: 4, Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := make(chan error, 1)
	go func() { run <- w.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for {
			e, err := h.s.GetExecution(context.Background(), "app", id)
			if err != nil {
				t.Fatal(err)
			}
			if e.Status == store.ExecutionSucceeded {
				break
			}
			if e.Status == store.ExecutionFailed || time.Now().After(deadline) {
				t.Fatalf("execution %s is %v: %s", id, e.Status, e.Error)
			}
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	if err := <-run; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if slices.Sort(l.rows); len(slices.Compact(l.rows)) != 4 || len(l.rows) != 4 {
		t.Fatalf("ledger %v, want one row per step", l.rows)
	}
}

// Steps that end together settle in one transaction; when one of them
// fails there (its claim was taken over, its writes fail), the batch is
// rolled back and each step settled alone: the others complete with their
// writes once, and the failed ones change nothing.
func TestWorkerBatchFailsAlone(t *testing.T) {
	h := newHarness(t, nil)
	var ids []string
	for range 4 {
		_, e := h.create("export")
		ids = append(ids, e.ID)
	}
	stale, _ := h.claim("w", "export")
	h.clock.Advance(11 * time.Second)
	if n, err := h.en.Expire(context.Background(), 10); n != 1 || err != nil {
		t.Fatalf("Expire: %d %v", n, err)
	}
	if c, ok := h.claim("other", "export"); !ok || c.Step.ID != stale.Step.ID || c.Step.Epoch != 2 {
		t.Fatalf("takeover: %+v %v", c, ok)
	}
	claimed := []execution.Claimed{stale}
	for range 3 {
		c, ok := h.claim("w", "export")
		if !ok {
			t.Fatal("no step to claim")
		}
		claimed = append(claimed, c)
	}
	var l ledger
	write := func(row string) func(ctx context.Context, tx *memstore.Tx) error {
		return func(ctx context.Context, tx *memstore.Tx) error { l.add(tx, row); return nil }
	}
	errWrites := errors.New("the ledger refused")
	w := settler(t, h)
	errs := w.Settle(context.Background(), claimed, []execution.Result[*memstore.Tx]{
		{Writes: write("stale")},
		{Output: json.RawMessage(`{"n":1}`), Writes: write("good")},
		{Writes: func(ctx context.Context, tx *memstore.Tx) error { l.add(tx, "half"); return errWrites }},
		{},
	}, []error{nil, nil, nil, errors.New("try again")})
	if !errors.Is(errs[0], execution.ErrFenced) || errs[1] != nil || !errors.Is(errs[2], errWrites) || errs[3] != nil {
		t.Fatalf("errors %v", errs)
	}
	if len(l.rows) != 1 || l.rows[0] != "good" {
		t.Fatalf("ledger %v, want [good]", l.rows)
	}
	for i, want := range []store.ExecutionStatus{store.ExecutionRunning, store.ExecutionSucceeded, store.ExecutionRunning, store.ExecutionQueued} {
		e, err := h.s.GetExecution(context.Background(), "app", claimed[i].Execution.ID)
		if err != nil || e.Status != want {
			t.Fatalf("execution %d: %v %v, want %v", i, e.Status, err, want)
		}
	}
	st, err := h.s.GetStep(context.Background(), "app", claimed[0].Step.ID)
	if err != nil || st.Owner != "other" || st.Epoch != 2 || st.Status != store.StepExecuting {
		t.Fatalf("the taken-over step: %+v %v", st, err)
	}
	// Each execution's events once, gap-free, as OnEventTx saw them commit.
	for _, id := range ids {
		h.events(id)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for _, line := range h.sent {
		if seen[line] {
			t.Fatalf("event %q reported twice", line)
		}
		seen[line] = true
	}
}

// settler is a worker of "export" steps for Settle: its handler never runs.
func settler(t *testing.T, h *harness) *execution.Worker[*memstore.Tx] {
	t.Helper()
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(context.Context, execution.Job) (execution.Result[*memstore.Tx], error) {
			return execution.Result[*memstore.Tx]{}, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A batch of completions whose step updates and transitions are written
// together (store.StepSettler) is rolled back whole when one step was
// fenced: the fenced step's execution, RUNNING under its new owner, takes
// no transition, although the batch wrote one for it before it saw the
// refusal; the other step completes alone.
func TestWorkerBatchFencedCompletion(t *testing.T) {
	h := newHarness(t, nil)
	h.create("export")
	h.create("export")
	stale, _ := h.claim("w", "export")
	h.clock.Advance(11 * time.Second)
	if n, err := h.en.Expire(context.Background(), 10); n != 1 || err != nil {
		t.Fatalf("Expire: %d %v", n, err)
	}
	if c, ok := h.claim("other", "export"); !ok || c.Step.ID != stale.Step.ID {
		t.Fatalf("takeover: %+v %v", c, ok)
	}
	good, ok := h.claim("w", "export")
	if !ok || good.Step.ID == stale.Step.ID {
		t.Fatalf("claim: %+v %v", good, ok)
	}
	w := settler(t, h)
	claimed := []execution.Claimed{good, stale}
	errs := w.Settle(context.Background(), claimed, make([]execution.Result[*memstore.Tx], 2), make([]error, 2))
	if errs[0] != nil || !errors.Is(errs[1], execution.ErrFenced) {
		t.Fatalf("errors %v", errs)
	}
	for i, want := range []store.ExecutionStatus{store.ExecutionSucceeded, store.ExecutionRunning} {
		e, err := h.s.GetExecution(context.Background(), "app", claimed[i].Execution.ID)
		if err != nil || e.Status != want {
			t.Fatalf("execution %d: %v %v, want %v", i, e.Status, err, want)
		}
		evs := h.events(e.ID)
		if last := evs[len(evs)-1]; (last == "idem.execution.succeeded") != (i == 0) {
			t.Fatalf("execution %d's events: %v", i, evs)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for _, line := range h.sent {
		if seen[line] || strings.HasPrefix(line, stale.Execution.ID+" ") && strings.HasSuffix(line, "succeeded") {
			t.Fatalf("event %q reported (all: %v)", line, h.sent)
		}
		seen[line] = true
	}
}

// settleOrder records the executions and steps of each settle.
type settleOrder struct {
	*memstore.Executions
	executions, steps [][]string
}

func (r *settleOrder) SettleStepsTx(ctx context.Context, tx *memstore.Tx, us []store.StepUpdate, ts []store.Transition, after []int) ([]store.Step, []bool, []store.Execution, []bool, error) {
	var execs, steps []string
	for j := range ts {
		execs, steps = append(execs, ts[j].ID), append(steps, us[after[j]].ID)
	}
	r.executions, r.steps = append(r.executions, execs), append(r.steps, steps)
	return r.Executions.SettleStepsTx(ctx, tx, us, ts, after)
}

// A batch is settled in the order of its executions' ids, whatever the
// order its steps ended in, each output with its own step.
func TestWorkerSettlesInExecutionOrder(t *testing.T) {
	rec := &settleOrder{Executions: memstore.NewExecutions(memstore.NewInbox())}
	n := 0
	en, err := execution.New[*memstore.Tx](rec, &execution.Config{
		Types: map[string]execution.TypeConfig{"export": {}},
		NewID: func() string { n++; return fmt.Sprintf("id%02d", n) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var claimed []execution.Claimed
	ctx := context.Background()
	if err := rec.InTx(ctx, func(ctx context.Context, tx *memstore.Tx) error {
		for range 3 {
			if _, _, err := en.CreateTx(ctx, tx, "app", execution.NewTask{Type: "export", Input: json.RawMessage(`{}`)}); err != nil {
				return err
			}
		}
		claimed, err = en.ClaimManyTx(ctx, tx, []string{"export"}, "w", 0, 3)
		return err
	}); err != nil || len(claimed) != 3 {
		t.Fatal(claimed, err)
	}
	slices.Reverse(claimed)
	w, err := en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(context.Context, execution.Job) (execution.Result[*memstore.Tx], error) {
			return execution.Result[*memstore.Tx]{}, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	results := make([]execution.Result[*memstore.Tx], 3)
	for i := range results {
		results[i].Output = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
	}
	for i, err := range w.Settle(ctx, claimed, results, make([]error, 3)) {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	// Each output stays with its own step and execution.
	for i, c := range claimed {
		e, err := rec.GetExecution(ctx, "app", c.Execution.ID)
		if err != nil || string(e.Output) != string(results[i].Output) {
			t.Fatalf("execution %s: output %s, %v; want %s", c.Execution.ID, e.Output, err, results[i].Output)
		}
	}
	if len(rec.executions) != 1 || !slices.IsSorted(rec.executions[0]) || len(rec.executions[0]) != 3 {
		t.Fatalf("settled executions %v, want one batch in order", rec.executions)
	}
	for i, id := range rec.steps[0] {
		st, err := rec.GetStep(ctx, "app", id)
		if err != nil || st.ExecutionID != rec.executions[0][i] {
			t.Fatalf("step %s settled with execution %s: %+v %v", id, rec.executions[0][i], st, err)
		}
	}
}

// A step that completes while its execution is CANCELING makes it
// SUCCEEDED (the work did finish): the worker's completion, tried on what
// its claim read (RUNNING), reads the execution again.
func TestWorkerCompletesACancelingExecution(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("export")
	started, release := make(chan struct{}), make(chan struct{})
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			close(started)
			<-release
			return execution.Result[*memstore.Tx]{Output: json.RawMessage(`{"done":true}`)}, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := w.RunOnce(context.Background()); done <- err }()
	<-started
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		got, err := h.en.CancelTx(ctx, tx, "app", e.ID)
		if err == nil && got.Status != store.ExecutionCanceling {
			err = fmt.Errorf("cancel: %v", got.Status)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	got, err := h.s.GetExecution(context.Background(), "app", e.ID)
	if err != nil || got.Status != store.ExecutionSucceeded || string(got.Output) != `{"done":true}` {
		t.Fatalf("execution %+v %v", got, err)
	}
	if evs := h.events(e.ID); !slices.Equal(evs, []string{"idem.execution.created", "idem.execution.queued", "idem.execution.running",
		"idem.execution.canceling", "idem.execution.succeeded"}) {
		t.Fatalf("events %v", evs)
	}
}

// Stopping a worker fails none of its steps: a handler stopped by Run's
// context leaves its step to its lease, to be claimed again after it with
// its retry budget whole.
func TestWorkerStopFailsNothing(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("export")
	started := make(chan struct{})
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			close(started)
			<-ctx.Done()
			return execution.Result[*memstore.Tx]{}, ctx.Err()
		},
	}, &execution.WorkerConfig{Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := make(chan error, 1)
	go func() { run <- w.Run(ctx) }()
	<-started
	cancel()
	if err := <-run; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	steps, err := h.s.ListSteps(context.Background(), "app", e.ID)
	if err != nil || len(steps) != 1 || steps[0].Status != store.StepExecuting || steps[0].Error != "" {
		t.Fatalf("after the stop: %+v %v, want the step still EXECUTING, no error recorded", steps, err)
	}
	h.clock.Advance(11 * time.Second) // past the lease
	if n, err := h.en.Expire(context.Background(), 10); n != 1 || err != nil {
		t.Fatalf("Expire: %d %v", n, err)
	}
	if c, ok := h.claim("next", "export"); !ok || c.Step.Epoch != 2 {
		t.Fatalf("claim after the lease: %+v %v", c, ok)
	}
}

// A step that runs alone is settled at once, however long SettleWait is:
// the wait is only for other steps still running.
func TestWorkerLoneStepDoesNotWait(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("export")
	runQuickSteps(t, h, 4, "a lone step waited for others", e.ID)
}

// A batch that holds every settling token is settled at once, however
// long SettleWait is: the steps still on their way wait for its tokens, so
// waiting for them would stall the worker.
func TestWorkerFullBatchDoesNotWait(t *testing.T) {
	h := newHarness(t, nil)
	var ids []string
	for range 6 {
		_, e := h.create("export")
		ids = append(ids, e.ID)
	}
	runQuickSteps(t, h, 2, "the settle loop waited for steps that wait for it", ids...)
}

// runQuickSteps runs a worker of concurrency n whose handlers return at
// once, with a SettleWait of an hour, until every execution of ids
// succeeded; after 10 s it fails with why.
func runQuickSteps(t *testing.T, h *harness, n int, why string, ids ...string) {
	t.Helper()
	w, err := h.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(context.Context, execution.Job) (execution.Result[*memstore.Tx], error) {
			return execution.Result[*memstore.Tx]{}, nil
		},
	}, &execution.WorkerConfig{Concurrency: n, Poll: time.Millisecond, SettleWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	for _, id := range ids {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			got, err := h.s.GetExecution(context.Background(), "app", id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status == store.ExecutionSucceeded {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("execution %s: %v after 10 s: %s", id, got.Status, why)
			}
		}
	}
}
