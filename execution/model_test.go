package execution_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// The model test drives an Engine over the memory store with random
// creates, claims, heartbeats, completions, failures (retryable or not,
// under the current epoch or a stale one), cancels, expiries, resolves
// and reruns, and compares every execution and step with a model written
// from the rules in the package doc: after each step the statuses match,
// a terminal execution never moves, every history is numbered 1, 2, 3…
// without a gap and has exactly the events the model expects, and every
// stale write is refused with ErrFenced.

const (
	modelLease = 10 * time.Second
	maxTries   = 2 // both types' MaxAttempts
)

type mStep struct {
	id, exec, typ   string
	status          execution.StepStatus
	epoch           int64
	attempts        int
	due, lease      time.Time
	once, cancelReq bool
}

type mExec struct {
	id, task string
	status   execution.Status
	events   int
	step     *mStep
	frozen   bool // terminal: may never change again
}

type model struct {
	execs map[string]*mExec
	tasks map[string]string // task → current execution
	order []string          // executions, in creation order
}

func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		clock := testclock.New(testclock.Epoch0)
		s := memstore.NewExecutions(memstore.NewInbox())
		n := 0
		en, err := execution.New[*memstore.Tx](s, &execution.Config{
			Types: map[string]execution.TypeConfig{
				"export": {Lease: modelLease, MaxAttempts: maxTries, Backoff: time.Second},
				"charge": {Lease: modelLease, MaxAttempts: maxTries, Backoff: time.Second, Once: true},
			},
			Now:   clock.Now,
			NewID: func() string { n++; return fmt.Sprintf("%04d", n) },
		})
		if err != nil {
			rt.Fatal(err)
		}
		m := &model{execs: map[string]*mExec{}, tasks: map[string]string{}}
		ctx := context.Background()
		tx := func(fn func(ctx context.Context, tx *memstore.Tx) error) error { return s.InTx(ctx, fn) }
		pickExec := func(rt *rapid.T) *mExec {
			if len(m.order) == 0 {
				rt.Skip("no execution yet")
			}
			return m.execs[rapid.SampledFrom(m.order).Draw(rt, "execution")]
		}
		// settleExec applies what the model says an action does to e.
		move := func(e *mExec, to execution.Status, events int) {
			if e.frozen {
				panic(fmt.Sprintf("model moved finished execution %s", e.id))
			}
			e.status, e.events = to, e.events+events
			e.frozen = to.Terminal()
		}
		backoff := func(attempts int) time.Duration {
			return min(time.Second<<max(attempts-1, 0), time.Minute)
		}

		rt.Repeat(map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				typ := rapid.SampledFrom([]string{"export", "charge"}).Draw(rt, "type")
				var task store.Task
				var e store.Execution
				if err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					var err error
					task, e, err = en.CreateTx(ctx, tx, "app", execution.NewTask{Type: typ, Input: json.RawMessage(`{}`)})
					return err
				}); err != nil {
					rt.Fatal(err)
				}
				steps, _ := s.ListSteps(ctx, "app", e.ID)
				st := &mStep{id: steps[0].ID, exec: e.ID, typ: typ, status: execution.StepDispatched, due: clock.Now(), once: typ == "charge"}
				m.execs[e.ID] = &mExec{id: e.ID, task: task.ID, status: execution.StatusQueued, events: 2, step: st}
				m.tasks[task.ID] = e.ID
				m.order = append(m.order, e.ID)
			},
			"claim": func(rt *rapid.T) {
				now := clock.Now()
				var want []*mStep
				for _, id := range m.order {
					st := m.execs[id].step
					if st.cancelReq {
						continue
					}
					if (st.status == execution.StepDispatched && !st.due.After(now)) ||
						(st.status == execution.StepExecuting && !st.once && !st.lease.After(now)) {
						want = append(want, st)
					}
				}
				slices.SortFunc(want, func(a, b *mStep) int {
					if c := a.due.Compare(b.due); c != 0 {
						return c
					}
					return cmp.Compare(a.id, b.id)
				})
				var c execution.Claimed
				var ok bool
				if err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					var err error
					c, ok, err = en.ClaimTx(ctx, tx, []string{"export", "charge"}, "w", 0)
					return err
				}); err != nil {
					rt.Fatal(err)
				}
				if len(want) == 0 {
					if ok {
						rt.Fatalf("claimed %s, which the model holds unclaimable", c.Step.ID)
					}
					return
				}
				if !ok || c.Step.ID != want[0].id {
					rt.Fatalf("claim got %q (ok %v), want %s", c.Step.ID, ok, want[0].id)
				}
				st := want[0]
				st.status, st.epoch, st.attempts, st.lease = execution.StepExecuting, st.epoch+1, st.attempts+1, now.Add(modelLease)
				if e := m.execs[st.exec]; e.status == execution.StatusQueued {
					move(e, execution.StatusRunning, 1)
				}
			},
			"heartbeat": func(rt *rapid.T) {
				e := pickExec(rt)
				st, epoch := e.step, drawEpoch(rt, e.step)
				err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					_, _, err := en.HeartbeatTx(ctx, tx, "app", st.id, epoch, 0)
					return err
				})
				if checkHeld(rt, st, epoch, err) {
					st.lease = clock.Now().Add(modelLease)
				}
			},
			"complete": func(rt *rapid.T) {
				e := pickExec(rt)
				st, epoch := e.step, drawEpoch(rt, e.step)
				err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					_, err := en.CompleteTx(ctx, tx, "app", st.id, epoch, json.RawMessage(`{}`))
					return err
				})
				if st.status == execution.StepCompleted && epoch == st.epoch {
					if err != nil {
						rt.Fatalf("a repeated completion: %v", err)
					}
					return
				}
				if checkHeld(rt, st, epoch, err) {
					st.status = execution.StepCompleted
					move(e, execution.StatusSucceeded, 1)
				}
			},
			"fail": func(rt *rapid.T) {
				e := pickExec(rt)
				st, epoch := e.step, drawEpoch(rt, e.step)
				retryable := rapid.Bool().Draw(rt, "retryable")
				err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					_, err := en.FailTx(ctx, tx, "app", st.id, epoch, "boom", retryable)
					return err
				})
				if !checkHeld(rt, st, epoch, err) {
					return
				}
				if retryable && st.attempts < maxTries && e.status == execution.StatusRunning && !st.cancelReq {
					st.status, st.due = execution.StepDispatched, clock.Now().Add(backoff(st.attempts))
					move(e, execution.StatusQueued, 1)
					return
				}
				st.status = execution.StepFailed
				if e.status == execution.StatusCanceling {
					move(e, execution.StatusCanceled, 1)
				} else {
					move(e, execution.StatusFailed, 1)
				}
			},
			"cancel": func(rt *rapid.T) {
				e := pickExec(rt)
				got := store.Execution{}
				err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					var err error
					got, err = en.CancelTx(ctx, tx, "app", e.id)
					return err
				})
				st := e.step
				switch e.status {
				case execution.StatusCanceling, execution.StatusCanceled:
					if err != nil {
						rt.Fatalf("repeated cancel: %v", err)
					}
				case execution.StatusCreated, execution.StatusQueued:
					if err != nil {
						rt.Fatal(err)
					}
					if !st.status.Terminal() {
						st.status, st.cancelReq = execution.StepFailed, true
					}
					move(e, execution.StatusCanceled, 1)
				case execution.StatusRunning:
					if err != nil {
						rt.Fatal(err)
					}
					if st.status == execution.StepExecuting {
						st.cancelReq = true
						move(e, execution.StatusCanceling, 1)
					} else {
						if !st.status.Terminal() {
							st.status, st.cancelReq = execution.StepFailed, true
						}
						move(e, execution.StatusCanceling, 1)
						move(e, execution.StatusCanceled, 1)
					}
				default:
					if !errors.Is(err, execution.ErrIllegalTransition) {
						rt.Fatalf("cancel of a %v execution: %v (%v)", e.status, err, got.Status)
					}
				}
			},
			"tick": func(rt *rapid.T) {
				clock.Advance(rapid.SampledFrom([]time.Duration{time.Second, 5 * time.Second, modelLease + time.Second}).Draw(rt, "advance"))
			},
			"expire": func(rt *rapid.T) {
				now := clock.Now()
				if _, err := en.Expire(ctx, 1000); err != nil {
					rt.Fatal(err)
				}
				for _, id := range m.order {
					e := m.execs[id]
					st := e.step
					if st.status != execution.StepExecuting || !st.lease.Before(now) {
						continue
					}
					switch {
					case e.status == execution.StatusCanceling || st.cancelReq:
						st.status = execution.StepFailed
						move(e, execution.StatusCanceled, 1)
					case st.once:
						st.status = execution.StepOutcomeUnknown
					default:
						st.status = execution.StepDispatched
						move(e, execution.StatusQueued, 1)
					}
				}
			},
			"resolve": func(rt *rapid.T) {
				e := pickExec(rt)
				st := e.step
				err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					_, err := en.ResolveTx(ctx, tx, "app", st.id, execution.VerdictRetry, nil)
					return err
				})
				if st.status != execution.StepOutcomeUnknown {
					if !errors.Is(err, execution.ErrIllegalTransition) {
						rt.Fatalf("resolve of a %v step: %v", st.status, err)
					}
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				st.status, st.due = execution.StepDispatched, clock.Now()
				move(e, execution.StatusQueued, 1)
			},
			"rerun": func(rt *rapid.T) {
				old := pickExec(rt)
				cur := m.execs[m.tasks[old.task]]
				var e store.Execution
				err := tx(func(ctx context.Context, tx *memstore.Tx) error {
					var err error
					e, err = en.RerunTx(ctx, tx, "app", old.task)
					return err
				})
				if !cur.status.Terminal() {
					if !errors.Is(err, execution.ErrIllegalTransition) {
						rt.Fatalf("rerun of a live execution: %v", err)
					}
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				steps, _ := s.ListSteps(ctx, "app", e.ID)
				st := &mStep{id: steps[0].ID, exec: e.ID, typ: cur.step.typ, status: execution.StepDispatched, due: clock.Now(), once: cur.step.once}
				m.execs[e.ID] = &mExec{id: e.ID, task: old.task, status: execution.StatusQueued, events: 2, step: st}
				m.tasks[old.task] = e.ID
				m.order = append(m.order, e.ID)
			},
			"": func(rt *rapid.T) {
				for _, id := range m.order {
					want := m.execs[id]
					got, err := s.GetExecution(ctx, "app", id)
					if err != nil {
						rt.Fatal(err)
					}
					if execution.Status(got.Status) != want.status {
						rt.Fatalf("execution %s is %v, the model says %v", id, execution.Status(got.Status), want.status)
					}
					st, _ := s.GetStep(ctx, "app", want.step.id)
					if execution.StepStatus(st.Status) != want.step.status || st.Epoch != want.step.epoch || st.Attempts != want.step.attempts {
						rt.Fatalf("step %s is %v epoch %d attempts %d, the model says %v epoch %d attempts %d", st.ID,
							execution.StepStatus(st.Status), st.Epoch, st.Attempts, want.step.status, want.step.epoch, want.step.attempts)
					}
					evs, _ := s.ListEvents(ctx, "app", id, 0, 1000)
					for i, ev := range evs {
						if ev.Sequence != int64(i+1) {
							rt.Fatalf("execution %s: event %d has sequence %d", id, i+1, ev.Sequence)
						}
					}
					if len(evs) != want.events {
						rt.Fatalf("execution %s has %d events, the model %d", id, len(evs), want.events)
					}
				}
			},
		})
	})
}

// drawEpoch is the step's current epoch, or a stale or future one.
func drawEpoch(rt *rapid.T, st *mStep) int64 {
	return st.epoch + rapid.SampledFrom([]int64{0, 0, 0, -1, 1}).Draw(rt, "epochOffset")
}

// checkHeld checks a worker write's error against the model: ErrFenced
// for another epoch, ErrIllegalTransition for a step not executing, nil
// otherwise. It reports whether the write applied.
func checkHeld(rt *rapid.T, st *mStep, epoch int64, err error) bool {
	switch {
	case epoch != st.epoch:
		if !errors.Is(err, execution.ErrFenced) {
			rt.Fatalf("a write under epoch %d on a step at %d: %v, want ErrFenced", epoch, st.epoch, err)
		}
		return false
	case st.status != execution.StepExecuting:
		if !errors.Is(err, execution.ErrIllegalTransition) {
			rt.Fatalf("a write on a %v step: %v, want ErrIllegalTransition", st.status, err)
		}
		return false
	case err != nil:
		rt.Fatalf("a write under the current claim: %v", err)
	}
	return true
}
