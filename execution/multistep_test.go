package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// flow is a multi-step type's harness: its executions run the steps a, b
// and c in turn (TypeConfig.Next), each with a key from the execution's
// input, and end with the outputs of the three.
type flow struct {
	t     *testing.T
	s     *memstore.Executions
	en    *execution.Engine[*memstore.Tx]
	clock *testclock.Clock
	// broken makes Next fail after the step of that name; once makes the
	// step of that name once-only.
	broken, once string
}

var flowOrder = []string{"a", "b", "c"}

func newFlow(t *testing.T) *flow {
	t.Helper()
	f := &flow{t: t, s: memstore.NewExecutions(memstore.NewInbox()), clock: testclock.New(testclock.Epoch0)}
	n := 0
	en, err := execution.New[*memstore.Tx](f.s, &execution.Config{
		Types: map[string]execution.TypeConfig{"flow": {Lease: 10 * time.Second, MaxAttempts: 2, Backoff: time.Second, Next: f.next}},
		Now:   f.clock.Now,
		NewID: func() string { n++; return fmt.Sprintf("id%02d", n) },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.en = en
	return f
}

func (f *flow) next(ctx context.Context, c execution.Continuation) (*execution.StepSpec, json.RawMessage, error) {
	if c.Done.Name == f.broken {
		return nil, nil, execution.Permanent(errors.New("no edge holds"))
	}
	i := slices.Index(flowOrder, c.Done.Name)
	if i < len(flowOrder)-1 {
		return f.spec(c.Task, flowOrder[i+1]), nil, nil
	}
	var outs []string
	for _, st := range c.Steps {
		if execution.StepStatus(st.Status) == execution.StepCompleted {
			outs = append(outs, string(st.Output))
		}
	}
	out, _ := json.Marshal(outs)
	return nil, out, nil
}

// spec is step name's, with a key from the task's input (business data).
func (f *flow) spec(task store.Task, name string) *execution.StepSpec {
	var in struct{ Order string }
	_ = json.Unmarshal(task.Input, &in)
	return &execution.StepSpec{Name: name, IdempotencyKey: name + "-" + in.Order, Once: name == f.once}
}

func (f *flow) tx(fn func(ctx context.Context, tx *memstore.Tx) error) error {
	return f.s.InTx(context.Background(), fn)
}

func (f *flow) start() store.Execution {
	f.t.Helper()
	var e store.Execution
	if err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		_, e, err = f.en.CreateTx(ctx, tx, "app", execution.NewTask{Type: "flow", Input: json.RawMessage(`{"order":"o-1"}`),
			Workflow: "checkout", Version: 1, Step: f.spec(store.Task{Input: []byte(`{"order":"o-1"}`)}, "a")})
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return e
}

func (f *flow) claim(owner string) (execution.Claimed, bool) {
	f.t.Helper()
	var c execution.Claimed
	var ok bool
	if err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		c, ok, err = f.en.ClaimTx(ctx, tx, []string{"flow"}, owner, 0)
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return c, ok
}

func (f *flow) complete(c execution.Claimed, out string) error {
	return f.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := f.en.CompleteTx(ctx, tx, "app", c.Step.ID, c.Step.Epoch, json.RawMessage(out))
		return err
	})
}

// steps returns the execution's steps as "name status key".
func (f *flow) steps(id string) []string {
	f.t.Helper()
	sts, err := f.s.ListSteps(context.Background(), "app", id)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, st := range sts {
		out = append(out, fmt.Sprintf("%s %v %s", st.Name, execution.StepStatus(st.Status), st.IdempotencyKey))
	}
	return out
}

func (f *flow) execution(id string) store.Execution {
	f.t.Helper()
	e, err := f.s.GetExecution(context.Background(), "app", id)
	if err != nil {
		f.t.Fatal(err)
	}
	return e
}

func TestMultiStepRunsEachStepOnceInOrder(t *testing.T) {
	f := newFlow(t)
	e := f.start()
	ran := map[string]int{}
	w, err := f.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"flow": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			ran[job.Step.Name]++
			return execution.Result[*memstore.Tx]{Output: json.RawMessage(`"` + job.Step.IdempotencyKey + `"`)}, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := w.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got := f.execution(e.ID)
	if got.Status != store.ExecutionSucceeded || string(got.Output) != `["\"a-o-1\"","\"b-o-1\"","\"c-o-1\""]` || got.Workflow != "checkout" || got.Version != 1 {
		t.Fatalf("execution %+v (%s)", got, got.Output)
	}
	if want := []string{"a COMPLETED a-o-1", "b COMPLETED b-o-1", "c COMPLETED c-o-1"}; !slices.Equal(f.steps(e.ID), want) {
		t.Fatalf("steps %v, want %v", f.steps(e.ID), want)
	}
	if ran["a"] != 1 || ran["b"] != 1 || ran["c"] != 1 {
		t.Fatalf("handlers ran %v, want each once", ran)
	}
	// The execution stays RUNNING from step to step: one running event.
	evs, _ := f.s.ListEvents(context.Background(), "app", e.ID, 0, 100)
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
		var d map[string]any
		_ = json.Unmarshal(ev.Data, &d)
		if _, ok := d["taskId"]; ok || d["workflow"] != "checkout" || d["version"] != float64(1) {
			t.Fatalf("event data %s: a workflow's run names the workflow and version, not its task", ev.Data)
		}
	}
	if want := []string{"idem.execution.created", "idem.execution.queued", "idem.execution.running", "idem.execution.succeeded"}; !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
}

func TestMultiStepStaleWorkerIsFencedAndDoneStepsStayDone(t *testing.T) {
	f := newFlow(t)
	e := f.start()
	a, _ := f.claim("w1")
	if err := f.complete(a, `1`); err != nil {
		t.Fatal(err)
	}
	// w1 claims b and goes silent; its lease ends, and w2 takes b over.
	b1, ok := f.claim("w1")
	if !ok || b1.Step.Name != "b" {
		t.Fatalf("claimed %+v %v, want b", b1.Step, ok)
	}
	f.clock.Advance(11 * time.Second)
	if _, err := f.en.Expire(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	b2, ok := f.claim("w2")
	if !ok || b2.Step.Name != "b" || b2.Step.Epoch != b1.Step.Epoch+1 || b2.Step.IdempotencyKey != b1.Step.IdempotencyKey {
		t.Fatalf("takeover %+v %v, want b with the next epoch and the same key", b2.Step, ok)
	}
	if err := f.complete(b1, `"stale"`); !errors.Is(err, execution.ErrFenced) {
		t.Fatalf("the stale worker's completion: %v, want ErrFenced", err)
	}
	if err := f.complete(b2, `2`); err != nil {
		t.Fatal(err)
	}
	c, _ := f.claim("w2")
	if c.Step.Name != "c" {
		t.Fatalf("after b: %+v, want c", c.Step)
	}
	if err := f.complete(c, `3`); err != nil {
		t.Fatal(err)
	}
	if got := f.execution(e.ID); got.Status != store.ExecutionSucceeded || string(got.Output) != `["1","2","3"]` {
		t.Fatalf("execution %+v (%s)", got, got.Output)
	}
	if _, ok := f.claim("w3"); ok {
		t.Fatal("a step was claimable after the execution succeeded")
	}
}

func TestMultiStepRetryResumesTheFailedStep(t *testing.T) {
	f := newFlow(t)
	e := f.start()
	a, _ := f.claim("w1")
	if err := f.complete(a, `1`); err != nil {
		t.Fatal(err)
	}
	b, _ := f.claim("w1")
	if err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := f.en.FailTx(ctx, tx, "app", b.Step.ID, b.Step.Epoch, "card declined", false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := f.execution(e.ID); got.Status != store.ExecutionFailed || got.Error != "card declined" || got.FinishedAt.IsZero() {
		t.Fatalf("after the failure: %+v", got)
	}
	retry := func() (store.Execution, error) {
		var got store.Execution
		err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
			var err error
			got, err = f.en.RetryTx(ctx, tx, "app", e.ID)
			return err
		})
		return got, err
	}
	got, err := retry()
	if err != nil || got.Status != store.ExecutionQueued || got.Error != "" || !got.FinishedAt.IsZero() || got.ID != e.ID {
		t.Fatalf("retry: %+v %v, want the same execution QUEUED, reopened", got, err)
	}
	if again, err := retry(); err != nil || again.Status != store.ExecutionQueued {
		t.Fatalf("a repeated retry: %+v %v, want the execution as it is", again, err)
	}
	b2, _ := f.claim("w2")
	if b2.Step.Name != "b" || b2.Step.IdempotencyKey != b.Step.IdempotencyKey || b2.Step.ID == b.Step.ID || b2.Step.Attempts != 1 {
		t.Fatalf("resumed %+v, want a new b with the same key and a fresh budget", b2.Step)
	}
	if err := f.complete(b2, `2`); err != nil {
		t.Fatal(err)
	}
	c, _ := f.claim("w2")
	if err := f.complete(c, `3`); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a COMPLETED a-o-1", "b FAILED b-o-1", "b COMPLETED b-o-1", "c COMPLETED c-o-1"}; !slices.Equal(f.steps(e.ID), want) {
		t.Fatalf("steps %v, want %v (a never ran again)", f.steps(e.ID), want)
	}
	if got := f.execution(e.ID); got.Status != store.ExecutionSucceeded || string(got.Output) != `["1","2","3"]` {
		t.Fatalf("execution %+v", got)
	}
	if _, err := retry(); !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("retry of a SUCCEEDED execution: %v, want ErrIllegalTransition", err)
	}
}

func TestMultiStepRoutingFailureFailsTheExecution(t *testing.T) {
	f := newFlow(t)
	f.broken = "a"
	e := f.start()
	a, _ := f.claim("w1")
	if err := f.complete(a, `1`); err != nil {
		t.Fatal(err)
	}
	if got := f.execution(e.ID); got.Status != store.ExecutionFailed || got.Error != "no edge holds" {
		t.Fatalf("execution %+v", got)
	}
	if want := []string{"a COMPLETED a-o-1"}; !slices.Equal(f.steps(e.ID), want) {
		t.Fatalf("steps %v", f.steps(e.ID))
	}
	err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
		_, err := f.en.RetryTx(ctx, tx, "app", e.ID)
		return err
	})
	if !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("retry with no failed step: %v, want ErrIllegalTransition", err)
	}
}

func TestMultiStepCancelStopsBetweenSteps(t *testing.T) {
	f := newFlow(t)
	e := f.start()
	a, _ := f.claim("w1")
	if err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
		got, err := f.en.CancelTx(ctx, tx, "app", e.ID)
		if err == nil && got.Status != store.ExecutionCanceling {
			err = fmt.Errorf("cancel while a runs: %v", got.Status)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.complete(a, `1`); err != nil {
		t.Fatal(err)
	}
	if got := f.execution(e.ID); got.Status != store.ExecutionCanceled {
		t.Fatalf("execution %+v, want CANCELED: b must not start", got)
	}
	if _, ok := f.claim("w2"); ok {
		t.Fatal("b was dispatched after the cancel")
	}
}

func TestMultiStepStartOverPinsAVersion(t *testing.T) {
	f := newFlow(t)
	e := f.start()
	for _, out := range []string{`1`, `2`, `3`} {
		c, _ := f.claim("w1")
		if err := f.complete(c, out); err != nil {
			t.Fatal(err)
		}
	}
	startOver := func(id string) (store.Execution, error) {
		var got store.Execution
		err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
			var err error
			got, err = f.en.StartOverTx(ctx, tx, "app", id, execution.StartOver{Version: 2,
				Step: f.spec(store.Task{Input: []byte(`{"order":"o-1"}`)}, "a")})
			return err
		})
		return got, err
	}
	e2, err := startOver(e.ID)
	if err != nil || e2.Number != 2 || e2.Version != 2 || e2.Workflow != "checkout" || e2.Status != store.ExecutionQueued || e2.TaskID != e.TaskID {
		t.Fatalf("start over: %+v %v", e2, err)
	}
	if _, err := startOver(e.ID); !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("a second start over of the old run: %v, want ErrIllegalTransition", err)
	}
	if _, err := startOver(e2.ID); !errors.Is(err, execution.ErrIllegalTransition) {
		t.Fatalf("start over of a live run: %v, want ErrIllegalTransition", err)
	}
	if want := []string{"a DISPATCHED a-o-1"}; !slices.Equal(f.steps(e2.ID), want) {
		t.Fatalf("new run's steps %v, want %v (the same key as the first run's)", f.steps(e2.ID), want)
	}
}

func TestRetryAfterSetsTheWait(t *testing.T) {
	f := newFlow(t)
	e := f.start()
	w, err := f.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"flow": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			return execution.Result[*memstore.Tx]{}, execution.RetryAfter(errors.New("429"), 7*time.Second)
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	sts, _ := f.s.ListSteps(context.Background(), "app", e.ID)
	if len(sts) != 1 || execution.StepStatus(sts[0].Status) != execution.StepDispatched || !sts[0].DueAt.Equal(f.clock.Now().Add(7*time.Second)) {
		t.Fatalf("step %+v, want DISPATCHED and due in 7s", sts)
	}
}

// The in-process worker settles from what its claim read: a cancel asked
// while the step ran still stops the run there.
func TestMultiStepWorkerStopsAtACancel(t *testing.T) {
	f := newFlow(t)
	e := f.start()
	w, err := f.en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"flow": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
				_, err := f.en.CancelTx(ctx, tx, "app", job.Execution.ID)
				return err
			})
			return execution.Result[*memstore.Tx]{Output: json.RawMessage(`1`)}, err
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.execution(e.ID); got.Status != store.ExecutionCanceled {
		t.Fatalf("execution %+v, want CANCELED", got)
	}
	if want := []string{"a COMPLETED a-o-1"}; !slices.Equal(f.steps(e.ID), want) {
		t.Fatalf("steps %v, want %v: b must not start", f.steps(e.ID), want)
	}
}

// A once-only step whose runner died waits as OUTCOME_UNKNOWN; an
// operator's Retry runs it again, the same step with the same key.
func TestMultiStepRetryResolvesAnUnknownOutcome(t *testing.T) {
	f := newFlow(t)
	f.once = "b" // it sends no key and verifies nothing
	e := f.start()
	a, _ := f.claim("w1")
	if err := f.complete(a, `1`); err != nil {
		t.Fatal(err)
	}
	b, _ := f.claim("w1")
	if !b.Step.Once {
		t.Fatalf("b %+v, want once-only", b.Step)
	}
	f.clock.Advance(11 * time.Second)
	if _, err := f.en.Expire(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a COMPLETED a-o-1", "b OUTCOME_UNKNOWN b-o-1"}; !slices.Equal(f.steps(e.ID), want) {
		t.Fatalf("steps %v, want %v", f.steps(e.ID), want)
	}
	if _, ok := f.claim("w2"); ok {
		t.Fatal("an OUTCOME_UNKNOWN step was claimed without an operator")
	}
	var got store.Execution
	if err := f.tx(func(ctx context.Context, tx *memstore.Tx) error {
		var err error
		got, err = f.en.RetryTx(ctx, tx, "app", e.ID)
		return err
	}); err != nil || got.Status != store.ExecutionQueued {
		t.Fatalf("retry: %+v %v", got, err)
	}
	b2, ok := f.claim("w2")
	if !ok || b2.Step.ID != b.Step.ID || b2.Step.Epoch != b.Step.Epoch+1 || b2.Step.IdempotencyKey != "b-o-1" {
		t.Fatalf("after the retry: %+v %v, want b again with the next epoch and its key", b2.Step, ok)
	}
}
