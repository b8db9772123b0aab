package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

type harness struct {
	t     *testing.T
	s     *memstore.Executions
	en    *execution.Engine[*memstore.Tx]
	clock *testclock.Clock
	mu    sync.Mutex
	sent  []string // "execution seq type", as OnEventTx saw them commit
}

func newHarness(t *testing.T, fail func(store.Event) error) *harness {
	t.Helper()
	h := &harness{t: t, s: memstore.NewExecutions(memstore.NewInbox()), clock: testclock.New(testclock.Epoch0)}
	n := 0
	en, err := execution.New[*memstore.Tx](h.s, &execution.Config{
		Types: map[string]execution.TypeConfig{
			"export": {Lease: 10 * time.Second, MaxAttempts: 2, Backoff: time.Second},
			"charge": {Lease: 10 * time.Second, Once: true},
		},
		Now:   h.clock.Now,
		NewID: func() string { n++; return fmt.Sprintf("id%02d", n) },
		OnEventTx: func(ctx context.Context, tx any, app string, task store.Task, e store.Execution, ev store.Event) error {
			if fail != nil {
				if err := fail(ev); err != nil {
					return err
				}
			}
			line := fmt.Sprintf("%s %d %s", e.ID, ev.Sequence, ev.Type)
			tx.(*memstore.Tx).OnRollback(func() { h.drop(line) })
			h.mu.Lock()
			h.sent = append(h.sent, line)
			h.mu.Unlock()
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.en = en
	return h
}

func (h *harness) drop(line string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.sent, line); i >= 0 {
		h.sent = slices.Delete(h.sent, i, i+1)
	}
}

func (h *harness) tx(fn func(ctx context.Context, tx *memstore.Tx) error) error {
	return h.s.InTx(context.Background(), fn)
}

func (h *harness) create(typ string) (store.Task, store.Execution) {
	h.t.Helper()
	var task store.Task
	var e store.Execution
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		task, e, err = h.en.CreateTx(ctx, tx, "app", execution.NewTask{Type: typ, Input: json.RawMessage(`{"order":"o-1"}`), ExternalRef: "o-1"})
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return task, e
}

func (h *harness) claim(owner string, types ...string) (execution.Claimed, bool) {
	h.t.Helper()
	var c execution.Claimed
	var ok bool
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		c, ok, err = h.en.ClaimTx(ctx, tx, types, owner, 0)
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return c, ok
}

// events returns the execution's stored event types, checking that their
// sequences run 1, 2, 3… without a gap.
func (h *harness) events(id string) []string {
	h.t.Helper()
	evs, err := h.s.ListEvents(context.Background(), "app", id, 0, 100)
	if err != nil {
		h.t.Fatal(err)
	}
	var types []string
	for i, ev := range evs {
		if ev.Sequence != int64(i+1) {
			h.t.Fatalf("event %d has sequence %d", i+1, ev.Sequence)
		}
		types = append(types, ev.Type)
	}
	return types
}

func TestRunToSuccess(t *testing.T) {
	h := newHarness(t, nil)
	task, e := h.create("export")
	if e.Status != store.ExecutionQueued || task.Status != store.ExecutionQueued || task.CurrentExecution != e.ID {
		t.Fatalf("created %+v %+v", task, e)
	}
	c, ok := h.claim("w1", "export")
	if !ok || c.Step.Epoch != 1 || c.Execution.Status != store.ExecutionRunning || c.Task.ID != task.ID || c.Step.IdempotencyKey != e.ID+":export" {
		t.Fatalf("claim %+v %v", c, ok)
	}
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		return h.en.ProgressTx(ctx, tx, "app", c.Step.ID, 1, 50)
	}); err != nil {
		t.Fatal(err)
	}
	complete := func(out string) (store.Execution, error) {
		var got store.Execution
		err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
			var err error
			got, err = h.en.CompleteTx(ctx, tx, "app", c.Step.ID, 1, json.RawMessage(out))
			return err
		})
		return got, err
	}
	done, err := complete(`{"url":"s3://x"}`)
	if err != nil || done.Status != store.ExecutionSucceeded || string(done.Output) != `{"url":"s3://x"}` || done.FinishedAt.IsZero() {
		t.Fatalf("complete: %+v %v", done, err)
	}
	// The same completion again answers alike; another one is refused.
	if again, err := complete(`{"url":"s3://x"}`); err != nil || again.Status != store.ExecutionSucceeded {
		t.Fatalf("repeated complete: %+v %v", again, err)
	}
	if _, err := complete(`{"url":"other"}`); !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("complete with another output: %v", err)
	}
	want := []string{"idem.execution.created", "idem.execution.queued", "idem.execution.running", "idem.execution.progress", "idem.execution.succeeded"}
	if got := h.events(e.ID); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if len(h.sent) != 5 || h.sent[4] != e.ID+" 5 idem.execution.succeeded" {
		t.Fatalf("OnEventTx saw %v", h.sent)
	}
	if _, ok := h.claim("w2", "export"); ok {
		t.Fatal("a completed step was claimed again")
	}
	if task, _ := h.s.GetTask(context.Background(), "app", task.ID); task.Status != store.ExecutionSucceeded {
		t.Fatalf("task status %v", task.Status)
	}
}

func TestStaleWorkerIsFenced(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("export")
	first, _ := h.claim("w1", "export")
	h.clock.Advance(11 * time.Second)
	if n, err := h.en.Expire(context.Background(), 10); n != 1 || err != nil {
		t.Fatalf("Expire: %d %v", n, err)
	}
	second, ok := h.claim("w2", "export")
	if !ok || second.Step.Epoch != 2 || second.Step.Attempts != 2 {
		t.Fatalf("takeover %+v %v", second, ok)
	}
	before := h.events(e.ID)
	stale := map[string]func(ctx context.Context, tx *memstore.Tx) error{
		"heartbeat": func(ctx context.Context, tx *memstore.Tx) error {
			_, _, err := h.en.HeartbeatTx(ctx, tx, "app", first.Step.ID, 1, 0)
			return err
		},
		"progress": func(ctx context.Context, tx *memstore.Tx) error {
			return h.en.ProgressTx(ctx, tx, "app", first.Step.ID, 1, 90)
		},
		"complete": func(ctx context.Context, tx *memstore.Tx) error {
			_, err := h.en.CompleteTx(ctx, tx, "app", first.Step.ID, 1, json.RawMessage(`"late"`))
			return err
		},
		"fail": func(ctx context.Context, tx *memstore.Tx) error {
			_, err := h.en.FailTx(ctx, tx, "app", first.Step.ID, 1, "late", false)
			return err
		},
	}
	for name, op := range stale {
		if err := h.tx(op); !errors.Is(err, execution.ErrFenced) || !errors.Is(err, store.ErrFenced) {
			t.Errorf("stale %s: %v, want ErrFenced", name, err)
		}
	}
	if after := h.events(e.ID); !slices.Equal(after, before) {
		t.Fatalf("a stale write changed the history: %v → %v", before, after)
	}
	if st, _ := h.s.GetStep(context.Background(), "app", second.Step.ID); st.Status != store.StepExecuting || st.Epoch != 2 || st.Owner != "w2" {
		t.Fatalf("step after stale writes %+v", st)
	}
}

func TestRetryThenFail(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("export")
	c, _ := h.claim("w1", "export")
	fail := func(c execution.Claimed) store.Execution {
		t.Helper()
		var got store.Execution
		if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
			var err error
			got, err = h.en.FailTx(ctx, tx, "app", c.Step.ID, c.Step.Epoch, "timeout", true)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := fail(c); got.Status != store.ExecutionQueued {
		t.Fatalf("first retryable failure: %+v", got)
	}
	if _, ok := h.claim("w1", "export"); ok {
		t.Fatal("claimed before the backoff ended")
	}
	h.clock.Advance(time.Second)
	c, ok := h.claim("w1", "export")
	if !ok || c.Step.Attempts != 2 || c.Step.Epoch != 2 {
		t.Fatalf("retry claim %+v %v", c, ok)
	}
	if got := fail(c); got.Status != store.ExecutionFailed || got.Error != "timeout" {
		t.Fatalf("out of attempts: %+v", got)
	}
	want := []string{"idem.execution.created", "idem.execution.queued", "idem.execution.running", "idem.execution.queued",
		"idem.execution.running", "idem.execution.failed"}
	if got := h.events(e.ID); !slices.Equal(got, want) {
		t.Fatalf("events %v", got)
	}
}

func TestOnceOnlyLostLeaseWaitsForAnOperator(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("charge")
	c, _ := h.claim("w1", "charge")
	h.clock.Advance(11 * time.Second)
	if n, err := h.en.Expire(context.Background(), 10); n != 1 || err != nil {
		t.Fatalf("Expire: %d %v", n, err)
	}
	st, _ := h.s.GetStep(context.Background(), "app", c.Step.ID)
	if st.Status != store.StepOutcomeUnknown {
		t.Fatalf("step %+v", st)
	}
	if _, ok := h.claim("w2", "charge"); ok {
		t.Fatal("a once-only step ran again without an operator")
	}
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := h.en.ResolveTx(ctx, tx, "app", c.Step.ID, execution.VerdictRetry, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	again, ok := h.claim("w2", "charge")
	if !ok || again.Step.Epoch != 2 || again.Step.IdempotencyKey != c.Step.IdempotencyKey {
		t.Fatalf("after retry: %+v %v (the same downstream key)", again, ok)
	}
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := h.en.ResolveTx(ctx, tx, "app", again.Step.ID, execution.VerdictDone, nil)
		return err
	}); !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("resolving an executing step: %v", err)
	}
	_ = e
}

func TestCancel(t *testing.T) {
	h := newHarness(t, nil)
	cancel := func(id string) (store.Execution, error) {
		var got store.Execution
		err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
			var err error
			got, err = h.en.CancelTx(ctx, tx, "app", id)
			return err
		})
		return got, err
	}
	// Queued: canceled at once, and its step is never claimed.
	_, queued := h.create("export")
	if got, err := cancel(queued.ID); err != nil || got.Status != store.ExecutionCanceled {
		t.Fatalf("cancel queued: %+v %v", got, err)
	}
	if _, ok := h.claim("w1", "export"); ok {
		t.Fatal("claimed a canceled execution's step")
	}
	if got, err := cancel(queued.ID); err != nil || got.Status != store.ExecutionCanceled || got.LastSequence != 3 {
		t.Fatalf("repeated cancel: %+v %v", got, err)
	}
	// Running: CANCELING, the worker hears it and gives up: CANCELED.
	_, running := h.create("export")
	c, _ := h.claim("w1", "export")
	if got, err := cancel(running.ID); err != nil || got.Status != store.ExecutionCanceling {
		t.Fatalf("cancel running: %+v %v", got, err)
	}
	var asked bool
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		_, asked, err = h.en.HeartbeatTx(ctx, tx, "app", c.Step.ID, c.Step.Epoch, 0)
		return err
	}); err != nil || !asked {
		t.Fatalf("heartbeat: cancel requested %v, %v", asked, err)
	}
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		got, err := h.en.FailTx(ctx, tx, "app", c.Step.ID, c.Step.Epoch, "canceled by request", true)
		if err == nil && got.Status != store.ExecutionCanceled {
			err = fmt.Errorf("after the worker gave up: %v", got.Status)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Finished: refused, nothing changes.
	_, done := h.create("export")
	d, _ := h.claim("w1", "export")
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := h.en.CompleteTx(ctx, tx, "app", d.Step.ID, d.Step.Epoch, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cancel(done.ID); !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("cancel succeeded: %v", err)
	}
	if _, err := cancel("nope"); !errors.Is(err, execution.ErrNotFound) {
		t.Fatalf("cancel unknown: %v", err)
	}
}

func TestRerun(t *testing.T) {
	h := newHarness(t, nil)
	task, first := h.create("export")
	rerun := func() (store.Execution, error) {
		var got store.Execution
		err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
			var err error
			got, err = h.en.RerunTx(ctx, tx, "app", task.ID)
			return err
		})
		return got, err
	}
	if _, err := rerun(); !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("rerun of a live execution: %v", err)
	}
	c, _ := h.claim("w1", "export")
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := h.en.CompleteTx(ctx, tx, "app", c.Step.ID, 1, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	second, err := rerun()
	if err != nil || second.Number != 2 || second.Status != store.ExecutionQueued || second.ID == first.ID {
		t.Fatalf("rerun %+v %v", second, err)
	}
	c2, ok := h.claim("w1", "export")
	if !ok || c2.Execution.ID != second.ID || c2.Step.IdempotencyKey == c.Step.IdempotencyKey {
		t.Fatalf("the rerun's step %+v %v: its own execution and key", c2, ok)
	}
	if got, _ := h.s.GetTask(context.Background(), "app", task.ID); got.CurrentExecution != second.ID {
		t.Fatalf("task %+v", got)
	}
	if got := h.events(second.ID); !slices.Equal(got[:3], []string{"idem.execution.created", "idem.execution.queued", "idem.execution.running"}) {
		t.Fatalf("the rerun's events %v", got)
	}
}

// A callback that cannot be enqueued rolls the change back: no task, no
// execution, no event without its callback.
func TestEventHookFailureRollsBack(t *testing.T) {
	boom := errors.New("outbox full")
	h := newHarness(t, func(ev store.Event) error {
		if ev.Type == "idem.execution.queued" {
			return boom
		}
		return nil
	})
	err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, _, err := h.en.CreateTx(ctx, tx, "app", execution.NewTask{Type: "export", Input: json.RawMessage(`{}`)})
		return err
	})
	if !errors.Is(err, boom) {
		t.Fatalf("create: %v", err)
	}
	if tasks, _ := h.s.ListTasks(context.Background(), store.TaskQuery{App: "app", Limit: 10}); len(tasks) != 0 || len(h.sent) != 0 {
		t.Fatalf("left behind: %v tasks, %v events sent", tasks, h.sent)
	}
	if _, ok := h.claim("w1", "export"); ok {
		t.Fatal("a step of a rolled-back task was claimed")
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, nil)
	for name, nt := range map[string]execution.NewTask{
		"unknown type": {Type: "nope", Input: json.RawMessage(`{}`)},
		"not JSON":     {Type: "export", Input: json.RawMessage(`{`)},
	} {
		err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
			_, _, err := h.en.CreateTx(ctx, tx, "app", nt)
			return err
		})
		if !errors.Is(err, execution.ErrUnknownType) && !errors.Is(err, execution.ErrBadInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := execution.New[*memstore.Tx](h.s, &execution.Config{}); !errors.Is(err, execution.ErrBadConfig) {
		t.Errorf("no types: %v", err)
	}
}

// A task's deadline times its live execution out: its step fails, its
// worker's next write is refused, and a TIMED_OUT event ends the history.
func TestDeadline(t *testing.T) {
	h := newHarness(t, nil)
	var e store.Execution
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		_, e, err = h.en.CreateTx(ctx, tx, "app", execution.NewTask{Type: "export", Input: json.RawMessage(`{}`),
			Deadline: h.clock.Now().Add(time.Minute)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c, _ := h.claim("w1", "export")
	if n, err := h.en.Expire(context.Background(), 10); n != 0 || err != nil {
		t.Fatalf("before the deadline: %d %v", n, err)
	}
	h.clock.Advance(2 * time.Minute)
	if n, err := h.en.Expire(context.Background(), 10); n != 1 || err != nil {
		t.Fatalf("after the deadline: %d %v", n, err)
	}
	got, _ := h.s.GetExecution(context.Background(), "app", e.ID)
	if got.Status != store.ExecutionTimedOut || got.Error != "the deadline passed" || got.FinishedAt.IsZero() {
		t.Fatalf("execution %+v", got)
	}
	err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := h.en.CompleteTx(ctx, tx, "app", c.Step.ID, c.Step.Epoch, nil)
		return err
	})
	if !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("the worker's late completion: %v", err)
	}
	if evs := h.events(e.ID); evs[len(evs)-1] != "idem.execution.timed_out" {
		t.Fatalf("events %v", evs)
	}
	if n, err := h.en.Expire(context.Background(), 10); n != 0 || err != nil {
		t.Fatalf("again: %d %v", n, err)
	}
}

// Every event carries its execution's number, which Rank reads: a rerun's
// events outrank the run it replaced.
func TestRankOfEvents(t *testing.T) {
	h := newHarness(t, nil)
	task, first := h.create("export")
	c, _ := h.claim("w1", "export")
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := h.en.CompleteTx(ctx, tx, "app", c.Step.ID, 1, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var second store.Execution
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		second, err = h.en.RerunTx(ctx, tx, "app", task.ID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{first.ID: 1, second.ID: 2} {
		evs, _ := h.s.ListEvents(context.Background(), "app", id, 0, 10)
		for _, ev := range evs {
			if got := execution.Rank(event.Event{Data: ev.Data}); got != want {
				t.Fatalf("execution %s event %d: rank %d, want %d", id, ev.Sequence, got, want)
			}
		}
	}
	if execution.Rank(event.Event{Data: []byte(`not json`)}) != 0 {
		t.Fatal("rank of a foreign event")
	}
}

// Canceling a running execution whose step waits for an operator (no
// worker would hear of it) cancels it at once.
func TestCancelWithNoWorker(t *testing.T) {
	h := newHarness(t, nil)
	_, e := h.create("charge")
	h.claim("w1", "charge")
	h.clock.Advance(11 * time.Second)
	if _, err := h.en.Expire(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	var got store.Execution
	if err := h.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		got, err = h.en.CancelTx(ctx, tx, "app", e.ID)
		return err
	}); err != nil || got.Status != store.ExecutionCanceled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if evs := h.events(e.ID); !slices.Equal(evs[len(evs)-2:], []string{"idem.execution.canceling", "idem.execution.canceled"}) {
		t.Fatalf("events %v", evs)
	}
}

// overdueFails is the memory store whose overdue query fails.
type overdueFails struct{ *memstore.Executions }

func (overdueFails) OverdueExecutions(context.Context, time.Time, int) ([]store.Execution, error) {
	return nil, errors.New("overdue query failed")
}

// A failing deadline pass does not hold up the lost leases: Expire
// settles them and reports the failure.
func TestExpireSettlesLeasesWhenTimeoutsFail(t *testing.T) {
	h := newHarness(t, nil)
	en, err := execution.New[*memstore.Tx](overdueFails{h.s}, &execution.Config{
		Types: map[string]execution.TypeConfig{"export": {Lease: 10 * time.Second}}, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	_, e := h.create("export")
	h.claim("w1", "export")
	h.clock.Advance(11 * time.Second)
	n, err := en.Expire(context.Background(), 10)
	if n != 1 || err == nil {
		t.Fatalf("Expire: %d settled, %v; want the lost lease settled and the failure reported", n, err)
	}
	if got, _ := h.s.GetExecution(context.Background(), "app", e.ID); got.Status != store.ExecutionQueued {
		t.Fatalf("execution %v, want QUEUED again", got.Status)
	}
}
