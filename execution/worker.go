package execution

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
)

// Claimed is a step a worker now holds, with its task and execution.
type Claimed struct {
	Step      store.Step
	Task      store.Task
	Execution store.Execution
}

// notFound maps the store's ErrNotFound to the engine's.
func notFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// ClaimTx claims, in tx, the oldest claimable step of types for owner,
// under a lease (0: the smallest default lease of types), and starts its
// execution when it was queued. ok=false when no step is claimable.
func (en *Engine[TX]) ClaimTx(ctx context.Context, tx TX, types []string, owner string, lease time.Duration) (Claimed, bool, error) {
	claimed, err := en.ClaimManyTx(ctx, tx, types, owner, lease, 1)
	if err != nil || len(claimed) == 0 {
		return Claimed{}, false, err
	}
	return claimed[0], true, nil
}

// ClaimManyTx is ClaimTx for up to n steps (oldest first), claimed by one
// statement where the store can; owner holds them all.
func (en *Engine[TX]) ClaimManyTx(ctx context.Context, tx TX, types []string, owner string, lease time.Duration, n int) ([]Claimed, error) {
	if len(types) == 0 || owner == "" || lease < 0 || n < 1 {
		return nil, fmt.Errorf("%w: a claim needs types, an owner and n > 0, and no negative lease", ErrBadInput)
	}
	def := time.Duration(0)
	for _, t := range types {
		tc, ok := en.cfg.Types[t]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownType, t)
		}
		if def == 0 || tc.Lease < def {
			def = tc.Lease
		}
	}
	if lease == 0 {
		lease = def
	}
	steps, execs, tasks, err := en.claimSteps(ctx, tx, store.StepClaim{Types: types, Owner: owner, Now: en.cfg.Now(), Lease: lease, Limit: n})
	if err != nil {
		return nil, err
	}
	// The queued executions start, in one round trip where the store can.
	var starts []change
	var at []int
	started := map[store.ExecutionRef]bool{}
	for i, e := range execs {
		if ref := (store.ExecutionRef{App: steps[i].App, ID: steps[i].ExecutionID}); Status(e.Status) == StatusQueued && !started[ref] {
			started[ref] = true
			t := store.Transition{}
			if e.StartedAt.IsZero() {
				t.StartedAt = en.cfg.Now()
			}
			starts, at = append(starts, change{task: tasks[i], e: e, a: ActionStart, t: t}), append(at, i)
		}
	}
	now, err := en.transitions(ctx, tx, starts)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		execs[i] = now[j]
	}
	out := make([]Claimed, len(steps))
	for i, st := range steps {
		out[i] = Claimed{Step: st, Task: tasks[i], Execution: execs[i]}
	}
	return out, nil
}

// claimSteps claims c's steps in tx and reads their executions and
// tasks: in one round trip where the store can (store.StepClaimReader).
func (en *Engine[TX]) claimSteps(ctx context.Context, tx TX, c store.StepClaim) ([]store.Step, []store.Execution, []store.Task, error) {
	if r, ok := en.s.(store.StepClaimReader[TX]); ok {
		steps, execs, tasks, err := r.ClaimStepsReadTx(ctx, tx, c)
		return steps, execs, tasks, notFound(err)
	}
	steps, err := en.s.ClaimStepsTx(ctx, tx, c)
	if err != nil {
		return nil, nil, nil, err
	}
	refs := make([]store.ExecutionRef, len(steps))
	for i, st := range steps {
		refs[i] = store.ExecutionRef{App: st.App, ID: st.ExecutionID}
	}
	execs, tasks, err := en.s.GetExecutionsTx(ctx, tx, refs)
	if err != nil {
		return nil, nil, nil, notFound(err)
	}
	return steps, execs, tasks, nil
}

// run reads the application's execution and its task in tx (ErrNotFound
// for either missing).
func (en *Engine[TX]) run(ctx context.Context, tx TX, app, executionID string) (store.Task, store.Execution, error) {
	e, err := en.s.GetExecutionTx(ctx, tx, app, executionID)
	if err != nil {
		return store.Task{}, store.Execution{}, notFound(err)
	}
	task, err := en.s.GetTaskTx(ctx, tx, app, e.TaskID)
	if err != nil {
		return store.Task{}, store.Execution{}, notFound(err)
	}
	return task, e, nil
}

// owners reads the task and execution of st in tx.
func (en *Engine[TX]) owners(ctx context.Context, tx TX, st store.Step) (store.Task, store.Execution, error) {
	return en.run(ctx, tx, st.App, st.ExecutionID)
}

// held reads a step a worker writes to under epoch: ErrFenced when epoch
// is not its current claim, ErrIllegalTransition when it is no longer
// EXECUTING.
func (en *Engine[TX]) held(ctx context.Context, tx TX, app, stepID string, epoch int64) (store.Step, error) {
	st, err := en.s.GetStepTx(ctx, tx, app, stepID)
	if err != nil {
		return store.Step{}, notFound(err)
	}
	if st.Epoch != epoch {
		return st, fmt.Errorf("%w: epoch %d, the step's claim is %d", ErrFenced, epoch, st.Epoch)
	}
	if StepStatus(st.Status) != StepExecuting {
		return st, fmt.Errorf("%w: the step is %v", ErrIllegalTransition, StepStatus(st.Status))
	}
	return st, nil
}

// updateStep applies a step action under st's claim (fenced when st is
// claimed), decided by NextStep.
func (en *Engine[TX]) updateStep(ctx context.Context, tx TX, st store.Step, a StepAction, u store.StepUpdate) (store.Step, error) {
	u, err := stepUpdate(st, a, u)
	if err != nil {
		return st, err
	}
	got, applied, err := en.s.UpdateStepTx(ctx, tx, u)
	if err != nil {
		return store.Step{}, err
	}
	return got, stepRefused(st, got, a, applied)
}

// stepUpdate completes u as the conditional update of action a on st.
func stepUpdate(st store.Step, a StepAction, u store.StepUpdate) (store.StepUpdate, error) {
	next, err := NextStep(StepStatus(st.Status), a, st.Once)
	if err != nil {
		return u, err
	}
	u.App, u.ID, u.From, u.Status = st.App, st.ID, st.Status, store.StepStatus(next)
	if StepStatus(st.Status) == StepExecuting {
		u.Epoch, u.Owner = st.Epoch, st.Owner
	}
	return u, nil
}

// stepRefused says why an update of st decided as a did not apply (got is
// the step as it is): nil when it did.
func stepRefused(st, got store.Step, a StepAction, applied bool) error {
	switch {
	case applied:
		return nil
	case got.Epoch != st.Epoch:
		return fmt.Errorf("%w: the step was claimed again (epoch %d)", ErrFenced, got.Epoch)
	}
	return fmt.Errorf("%w: %v on a %v step", ErrIllegalTransition, a, StepStatus(got.Status))
}

// HeartbeatTx extends the lease of the worker's claim (epoch) by lease
// (0: the type's default) and says whether its execution's cancel was
// asked.
func (en *Engine[TX]) HeartbeatTx(ctx context.Context, tx TX, app, stepID string, epoch int64, lease time.Duration) (time.Time, bool, error) {
	st, err := en.held(ctx, tx, app, stepID, epoch)
	if err != nil {
		return time.Time{}, false, err
	}
	if lease <= 0 {
		lease = en.cfg.Types[st.Type].Lease
	}
	until := en.cfg.Now().Add(lease)
	st, applied, err := en.s.UpdateStepTx(ctx, tx, store.StepUpdate{App: app, ID: stepID, From: store.StepExecuting, Epoch: st.Epoch,
		Owner: st.Owner, Status: store.StepExecuting, LeaseUntil: until})
	if err != nil {
		return time.Time{}, false, err
	}
	if !applied {
		return time.Time{}, false, fmt.Errorf("%w: the step was claimed again (epoch %d)", ErrFenced, st.Epoch)
	}
	return until, st.CancelRequested, nil
}

// extendClaimedTx extends, in tx, the leases of the worker's running
// claims cs, each by its type's lease, in one round trip where the store
// can; lost[i] reports that cs[i]'s claim no longer holds (taken over, or
// its step moved on), so its handler must stop. Like HeartbeatTx without
// the read before each update: the claim's epoch and owner are the fence.
func (en *Engine[TX]) extendClaimedTx(ctx context.Context, tx TX, cs []Claimed) (lost []bool, err error) {
	now := en.cfg.Now()
	us := make([]store.StepUpdate, len(cs))
	for i, c := range cs {
		st := c.Step
		us[i] = store.StepUpdate{App: st.App, ID: st.ID, From: store.StepExecuting, Epoch: st.Epoch, Owner: st.Owner,
			Status: store.StepExecuting, LeaseUntil: now.Add(en.cfg.Types[st.Type].Lease)}
	}
	_, applied, err := en.s.UpdateStepsTx(ctx, tx, us)
	if err != nil {
		return nil, err
	}
	lost = make([]bool, len(cs))
	for i, ok := range applied {
		lost[i] = !ok
	}
	return lost, nil
}

// ProgressTx records a progress report (0–100) of the worker's claim as
// an event of its execution.
func (en *Engine[TX]) ProgressTx(ctx context.Context, tx TX, app, stepID string, epoch int64, progress int) error {
	if progress < 0 || progress > 100 {
		return fmt.Errorf("%w: progress %d out of 0–100", ErrBadInput, progress)
	}
	st, err := en.held(ctx, tx, app, stepID, epoch)
	if err != nil {
		return err
	}
	task, e, err := en.owners(ctx, tx, st)
	if err != nil {
		return err
	}
	ev := en.event(task, e, "idem.execution.progress", &progress)
	seq, err := en.s.AppendEventTx(ctx, tx, app, e.ID, ev, progress)
	if err != nil {
		return err
	}
	ev.Sequence, e.LastSequence, e.Progress = seq, seq, progress
	return en.emit(ctx, tx, task, e, ev)
}

// CompleteTx completes the worker's claim with output (JSON, or empty):
// the step is COMPLETED and never runs again, and its execution
// SUCCEEDED. A repeat with the same epoch and output answers as the first
// did; another output is ErrIllegalTransition.
func (en *Engine[TX]) CompleteTx(ctx context.Context, tx TX, app, stepID string, epoch int64, output json.RawMessage) (store.Execution, error) {
	output, err := stepOutput(output)
	if err != nil {
		return store.Execution{}, err
	}
	st, err := en.held(ctx, tx, app, stepID, epoch)
	if err != nil {
		if StepStatus(st.Status) == StepCompleted && st.Epoch == epoch {
			if !bytes.Equal(st.Output, output) {
				return store.Execution{}, fmt.Errorf("%w: completed already, with another output", ErrIllegalTransition)
			}
			_, e, err := en.owners(ctx, tx, st)
			return e, err
		}
		return store.Execution{}, err
	}
	if st, err = en.updateStep(ctx, tx, st, StepActionComplete, store.StepUpdate{Output: output, ClearClaim: true}); err != nil {
		return store.Execution{}, err
	}
	task, e, err := en.owners(ctx, tx, st)
	if err != nil {
		return store.Execution{}, err
	}
	return en.stepDone(ctx, tx, task, e, st)
}

// stepDone moves e on after its step st completed: to its next step when
// its type runs many (TypeConfig.Next), else to SUCCEEDED with the step's
// output. An execution whose cancel was asked meanwhile is CANCELED
// instead of going on.
func (en *Engine[TX]) stepDone(ctx context.Context, tx TX, task store.Task, e store.Execution, st store.Step) (store.Execution, error) {
	tc := en.cfg.Types[st.Type]
	if tc.Next == nil {
		return en.succeed(ctx, tx, task, e, st.Output)
	}
	if Status(e.Status) == StatusCanceling {
		return en.transition(ctx, tx, task, e, ActionFail, store.Transition{Error: "canceled"})
	}
	steps, err := en.s.ListStepsTx(ctx, tx, st.App, e.ID)
	if err != nil {
		return store.Execution{}, err
	}
	next, output, err := tc.Next(ctx, Continuation{Task: task, Execution: e, Steps: steps, Done: st})
	switch {
	case errors.As(err, new(permanent)):
		return en.transition(ctx, tx, task, e, ActionFail, store.Transition{Error: err.Error()})
	case err != nil:
		return store.Execution{}, err
	case next == nil:
		return en.succeed(ctx, tx, task, e, output)
	}
	if Status(e.Status) != StatusRunning {
		return e, fmt.Errorf("%w: a step of a %v execution completed", ErrIllegalTransition, Status(e.Status))
	}
	return e, en.dispatch(ctx, tx, task, e, *next, en.cfg.Now())
}

// multiStep says whether one of cs's types runs many steps.
func (en *Engine[TX]) multiStep(cs []Claimed) bool {
	for _, c := range cs {
		if en.cfg.Types[c.Step.Type].Next != nil {
			return true
		}
	}
	return false
}

// completeClaimedTx completes c's step with output as CompleteTx does, for
// the worker that holds the claim: the step's fenced update and the
// execution's transition are tried on what the claim read (two statements
// instead of five), and an execution that changed since (its cancel was
// asked) is read again.
func (en *Engine[TX]) completeClaimedTx(ctx context.Context, tx TX, c Claimed, output json.RawMessage) error {
	output, err := stepOutput(output)
	if err != nil {
		return err
	}
	st, err := en.updateStep(ctx, tx, c.Step, StepActionComplete, store.StepUpdate{Output: output, ClearClaim: true})
	if err != nil {
		return err
	}
	if en.cfg.Types[st.Type].Next == nil {
		if _, err := en.succeed(ctx, tx, c.Task, c.Execution, output); !errors.Is(err, ErrIllegalTransition) {
			return err
		}
	} else if !st.CancelRequested {
		// A multi-step execution goes on without a transition that would
		// catch a change of it; but every change that stops it (a cancel,
		// a timeout) marks its running step, whose fenced update would
		// then have said so: unmarked, it is as the claim read it.
		_, err := en.stepDone(ctx, tx, c.Task, c.Execution, st)
		return err
	}
	task, e, err := en.owners(ctx, tx, st)
	if err != nil {
		return err
	}
	_, err = en.stepDone(ctx, tx, task, e, st)
	return err
}

// completeClaimedManyTx completes each claim with its output as
// completeClaimedTx does, with the steps' updates and the executions'
// transitions in one round trip (store.StepSettler), or one each, where
// the store can. It does not read again: a step fenced, or an execution
// that changed since its claim, fails the whole, and the caller's
// transaction must roll back (the worker then settles each step alone).
//
// The rows are written in the order of their executions' ids, so that
// settles of steps of the same executions lock them in one order.
func (en *Engine[TX]) completeClaimedManyTx(ctx context.Context, tx TX, cs []Claimed, outputs []json.RawMessage) error {
	if en.multiStep(cs) {
		// Each decides its next step on its execution as it now is.
		for i, c := range cs {
			if err := en.completeClaimedTx(ctx, tx, c, outputs[i]); err != nil {
				return err
			}
		}
		return nil
	}
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(strings.Compare(cs[a].Step.App, cs[b].Step.App), strings.Compare(cs[a].Step.ExecutionID, cs[b].Step.ExecutionID))
	})
	cs, outputs = permute(cs, order), permute(outputs, order)
	us := make([]store.StepUpdate, len(cs))
	changes := make([]change, len(cs))
	for i, c := range cs {
		out, err := stepOutput(outputs[i])
		if err != nil {
			return err
		}
		if us[i], err = stepUpdate(c.Step, StepActionComplete, store.StepUpdate{Output: out, ClearClaim: true}); err != nil {
			return err
		}
		changes[i] = succeedChange(c.Task, c.Execution, out)
	}
	if st, ok := en.s.(store.StepSettler[TX]); ok {
		// The updates and the transitions in one round trip, each
		// transition only once its step's update applied (us[i] is
		// change i's step): a step refused fails the whole as before.
		p, err := en.prepare(changes)
		if err != nil {
			return err
		}
		got, applied, execs, moved, err := st.SettleStepsTx(ctx, tx, us, p.ts, p.at)
		if err != nil {
			return err
		}
		if err := refused(cs, got, applied); err != nil {
			return err
		}
		_, err = en.finish(ctx, tx, changes, p, execs, moved)
		return err
	}
	got, applied, err := en.s.UpdateStepsTx(ctx, tx, us)
	if err != nil {
		return err
	}
	if err := refused(cs, got, applied); err != nil {
		return err
	}
	_, err = en.transitions(ctx, tx, changes)
	return err
}

// permute returns xs in the order of the indices in order.
func permute[T any](xs []T, order []int) []T {
	out := make([]T, len(order))
	for i, j := range order {
		out[i] = xs[j]
	}
	return out
}

// refused is the first of cs's completions that did not apply (got, applied:
// their steps as updated), as stepRefused says it; nil when all did.
func refused(cs []Claimed, got []store.Step, applied []bool) error {
	for i := range cs {
		if err := stepRefused(cs[i].Step, got[i], StepActionComplete, applied[i]); err != nil {
			return err
		}
	}
	return nil
}

// FailTx fails the worker's claim with errText. A retryable failure with
// attempts left dispatches the step again after a backoff (its execution
// QUEUED meanwhile); otherwise the step FAILED, and its execution FAILED
// (or CANCELED, when its cancel was asked).
func (en *Engine[TX]) FailTx(ctx context.Context, tx TX, app, stepID string, epoch int64, errText string, retryable bool) (store.Execution, error) {
	return en.failTx(ctx, tx, app, stepID, epoch, errText, retryable, 0)
}

// failTx is FailTx with the wait before a retry (0: the type's backoff).
func (en *Engine[TX]) failTx(ctx context.Context, tx TX, app, stepID string, epoch int64, errText string, retryable bool, wait time.Duration) (store.Execution, error) {
	if errText == "" {
		errText = "failed"
	}
	st, err := en.held(ctx, tx, app, stepID, epoch)
	if err != nil {
		return store.Execution{}, err
	}
	task, e, err := en.owners(ctx, tx, st)
	if err != nil {
		return store.Execution{}, err
	}
	tc := en.cfg.Types[st.Type]
	if retryable && st.Attempts < tc.MaxAttempts && Status(e.Status) == StatusRunning && !st.CancelRequested {
		if wait <= 0 {
			wait = en.backoff(tc, st.Attempts)
		}
		if _, err := en.updateStep(ctx, tx, st, StepActionRetry, store.StepUpdate{
			DueAt: en.cfg.Now().Add(wait), Error: errText, ClearClaim: true}); err != nil {
			return store.Execution{}, err
		}
		return en.transition(ctx, tx, task, e, ActionRequeue, store.Transition{})
	}
	if _, err := en.updateStep(ctx, tx, st, StepActionFail, store.StepUpdate{Error: errText, ClearClaim: true}); err != nil {
		return store.Execution{}, err
	}
	return en.transition(ctx, tx, task, e, ActionFail, store.Transition{Error: errText})
}

// succeed ends e as SUCCEEDED with its step's output (none when empty).
func (en *Engine[TX]) succeed(ctx context.Context, tx TX, task store.Task, e store.Execution, output json.RawMessage) (store.Execution, error) {
	got, err := en.transitions(ctx, tx, []change{succeedChange(task, e, output)})
	return got[0], err
}

// succeedChange is the change that ends e as SUCCEEDED with its step's
// output (none when empty).
func succeedChange(task store.Task, e store.Execution, output json.RawMessage) change {
	t := store.Transition{Progress: 100}
	if len(output) > 0 {
		t.Output = output
	}
	return change{task: task, e: e, a: ActionSucceed, t: t}
}

// stepOutput checks a step's output: JSON, or empty (nil becomes empty,
// so that a completion always records one).
func stepOutput(output json.RawMessage) (json.RawMessage, error) {
	if len(output) > 0 && !json.Valid(output) {
		return nil, fmt.Errorf("%w: output is not JSON", ErrBadInput)
	}
	if output == nil {
		output = json.RawMessage{}
	}
	return output, nil
}

func (en *Engine[TX]) backoff(tc TypeConfig, attempts int) time.Duration {
	d := tc.Backoff << max(attempts-1, 0)
	if d <= 0 || d > maxBackoff {
		return maxBackoff
	}
	return d
}

// CancelTx asks to cancel the application's execution. A CREATED or
// QUEUED one is CANCELED at once (its steps fail); a RUNNING one becomes
// CANCELING and its worker is told on its next heartbeat; a repeat
// changes nothing. A finished execution is ErrIllegalTransition.
func (en *Engine[TX]) CancelTx(ctx context.Context, tx TX, app, executionID string) (store.Execution, error) {
	task, e, err := en.run(ctx, tx, app, executionID)
	if err != nil {
		return store.Execution{}, err
	}
	steps, err := en.s.ListStepsTx(ctx, tx, app, executionID)
	if err != nil {
		return store.Execution{}, notFound(err)
	}
	next, changed, err := Next(Status(e.Status), ActionCancel)
	if err != nil || !changed {
		return e, err
	}
	working := false // a worker holds a step, and will be told
	for _, st := range steps {
		switch {
		case StepStatus(st.Status).Terminal():
		case next == StatusCanceling && StepStatus(st.Status) == StepExecuting:
			working = true
			// Its worker is told on its next heartbeat, and ends it.
			if _, _, err := en.s.UpdateStepTx(ctx, tx, store.StepUpdate{App: app, ID: st.ID, From: store.StepExecuting,
				Status: store.StepExecuting, CancelRequested: true}); err != nil {
				return store.Execution{}, err
			}
		default:
			if _, err := en.updateStep(ctx, tx, st, StepActionFail, store.StepUpdate{Error: "canceled", ClearClaim: true, CancelRequested: true}); err != nil {
				return store.Execution{}, err
			}
		}
	}
	if e, err = en.transition(ctx, tx, task, e, ActionCancel, store.Transition{}); err != nil || working || Status(e.Status) != StatusCanceling {
		return e, err
	}
	// RUNNING with no worker on a step (one waits for an operator): no one
	// would end the cancel, so it ends now.
	return en.transition(ctx, tx, task, e, ActionFail, store.Transition{Error: "canceled"})
}

// Expire times out the executions whose task's deadline passed (their live
// steps fail, and a worker still on one is told on its next write), then
// settles the steps whose lease ended before now, each in its own
// transaction, and returns how many it changed: a once-only step becomes
// OUTCOME_UNKNOWN (it may have had effects; an operator resolves it); a
// step of a canceling execution fails and the execution is CANCELED; a
// repeatable one goes back to DISPATCHED (its execution QUEUED), so that
// the next claim runs it with a higher epoch. Call it every second or so.
func (en *Engine[TX]) Expire(ctx context.Context, limit int) (int, error) {
	// An execution that cannot be timed out must not hold up the lost
	// leases: both passes run, and their errors are joined.
	n, terr := en.timeOut(ctx, limit)
	errs := []error{terr}
	steps, err := en.s.ExpiredSteps(ctx, en.cfg.Now(), limit)
	if err != nil {
		return n, errors.Join(terr, err)
	}
	for _, st := range steps {
		err := en.s.InTx(ctx, func(ctx context.Context, tx TX) error {
			cur, err := en.s.GetStepTx(ctx, tx, st.App, st.ID)
			if err != nil || cur.Epoch != st.Epoch || StepStatus(cur.Status) != StepExecuting {
				return err // claimed again or settled meanwhile
			}
			task, e, err := en.owners(ctx, tx, cur)
			if err != nil {
				return err
			}
			switch {
			case Status(e.Status) == StatusCanceling || cur.CancelRequested:
				if _, err := en.updateStep(ctx, tx, cur, StepActionFail, store.StepUpdate{Error: "canceled: the lease ended", ClearClaim: true}); err != nil {
					return err
				}
				_, err = en.transition(ctx, tx, task, e, ActionFail, store.Transition{Error: "canceled"})
				return err
			case cur.Once:
				_, err := en.updateStep(ctx, tx, cur, StepActionLeaseLost, store.StepUpdate{Error: "the lease ended without a result: the step may have had effects", ClearClaim: true})
				return err
			}
			if _, err := en.updateStep(ctx, tx, cur, StepActionLeaseLost, store.StepUpdate{ClearClaim: true}); err != nil {
				return err
			}
			_, err = en.transition(ctx, tx, task, e, ActionRequeue, store.Transition{})
			return err
		})
		if err != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrIllegalTransition) {
			errs = append(errs, err)
			continue
		}
		if err == nil {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// Verdict is an operator's resolution of an OUTCOME_UNKNOWN step.
type Verdict uint8

// The verdicts.
const (
	// VerdictRetry runs the step again, with the same downstream key.
	VerdictRetry Verdict = iota + 1
	// VerdictDone marks it completed with the given output.
	VerdictDone
)

// ResolveTx resolves the application's OUTCOME_UNKNOWN step; any other
// step is ErrIllegalTransition.
func (en *Engine[TX]) ResolveTx(ctx context.Context, tx TX, app, stepID string, v Verdict, output json.RawMessage) (store.Step, error) {
	output, err := stepOutput(output)
	if err != nil {
		return store.Step{}, err
	}
	st, err := en.s.GetStepTx(ctx, tx, app, stepID)
	if err != nil {
		return store.Step{}, notFound(err)
	}
	task, e, err := en.owners(ctx, tx, st)
	if err != nil {
		return store.Step{}, err
	}
	switch v {
	case VerdictRetry:
		if st, err = en.updateStep(ctx, tx, st, StepActionResolveRetry, store.StepUpdate{DueAt: en.cfg.Now()}); err != nil {
			return store.Step{}, err
		}
		_, err = en.transition(ctx, tx, task, e, ActionRequeue, store.Transition{})
	case VerdictDone:
		if st, err = en.updateStep(ctx, tx, st, StepActionResolveDone, store.StepUpdate{Output: output}); err != nil {
			return store.Step{}, err
		}
		_, err = en.stepDone(ctx, tx, task, e, st)
	default:
		return store.Step{}, fmt.Errorf("%w: verdict %d", ErrBadInput, v)
	}
	return st, err
}

// RerunTx starts a new execution of the application's task (number N+1,
// CREATED then QUEUED, its own step and downstream key) and makes it the
// task's current one. The current execution must have finished: a live
// one is ErrIllegalTransition (cancel it first), so that two runs never
// work at once.
func (en *Engine[TX]) RerunTx(ctx context.Context, tx TX, app, taskID string) (store.Execution, error) {
	task, err := en.s.GetTaskTx(ctx, tx, app, taskID)
	if err != nil {
		return store.Execution{}, notFound(err)
	}
	cur, err := en.s.GetExecutionTx(ctx, tx, app, task.CurrentExecution)
	if err != nil {
		return store.Execution{}, notFound(err)
	}
	return en.rerun(ctx, tx, task, cur, cur.Version, nil)
}

// StartOver is how StartOverTx starts an execution again.
type StartOver struct {
	// Version is the new execution's version (0: the old one's).
	Version int
	// Step is its first step (nil: as CreateTx's default).
	Step *StepSpec
}

// StartOverTx starts the application's execution over, as RerunTx does
// its task: a new execution (number N+1) of the same input, pinned to
// so.Version, whose steps run again from so.Step with the keys computed
// from that input (the same as the old run's where they derive from it,
// so targets absorb the repeat of what the old run did). The execution
// must be its task's current one and finished (ErrIllegalTransition).
func (en *Engine[TX]) StartOverTx(ctx context.Context, tx TX, app, executionID string, so StartOver) (store.Execution, error) {
	task, cur, err := en.run(ctx, tx, app, executionID)
	if err != nil {
		return store.Execution{}, err
	}
	if task.CurrentExecution != cur.ID {
		return store.Execution{}, fmt.Errorf("%w: execution %s was started over already (by %s)", ErrIllegalTransition, cur.ID, task.CurrentExecution)
	}
	version := so.Version
	if version == 0 {
		version = cur.Version
	}
	return en.rerun(ctx, tx, task, cur, version, so.Step)
}

// rerun starts task's execution after cur, which must have finished.
func (en *Engine[TX]) rerun(ctx context.Context, tx TX, task store.Task, cur store.Execution, version int, first *StepSpec) (store.Execution, error) {
	if !Status(cur.Status).Terminal() {
		return store.Execution{}, fmt.Errorf("%w: a new run while the execution is %v (cancel it first)", ErrIllegalTransition, Status(cur.Status))
	}
	tc, ok := en.cfg.Types[task.Type]
	if !ok {
		return store.Execution{}, fmt.Errorf("%w: %q", ErrUnknownType, task.Type)
	}
	id := en.cfg.NewID()
	e := store.Execution{App: task.App, ID: id, TaskID: task.ID, Number: cur.Number + 1, Status: store.ExecutionCreated, CreatedAt: en.cfg.Now(),
		Workflow: cur.Workflow, Version: version}
	first0 := en.event(task, e, statusType(StatusCreated), nil)
	e, err := en.s.RerunTx(ctx, tx, store.Rerun{App: task.App, TaskID: task.ID, ExecutionID: id, Status: store.ExecutionCreated,
		Workflow: e.Workflow, Version: e.Version, Event: first0})
	if err != nil {
		return store.Execution{}, err
	}
	first0.Sequence = 1
	task.CurrentExecution, task.Status = e.ID, e.Status
	if err := en.emit(ctx, tx, task, e, first0); err != nil {
		return store.Execution{}, err
	}
	return en.queue(ctx, tx, task, e, tc, first)
}

// RecordTx appends to the application's execution's history, in tx, an
// operator's action (an "idem.execution.operator" event whose data names
// the action and who took it), reported like every event (OnEventTx): the
// audit of retries, start overs and cancels.
func (en *Engine[TX]) RecordTx(ctx context.Context, tx TX, app, executionID, action, actor string) error {
	task, e, err := en.run(ctx, tx, app, executionID)
	if err != nil {
		return err
	}
	ev := en.event(task, e, "idem.execution.operator", nil)
	var d map[string]any
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		return err
	}
	d["action"], d["actor"] = action, actor
	if ev.Data, err = json.Marshal(d); err != nil {
		return err
	}
	seq, err := en.s.AppendEventTx(ctx, tx, app, e.ID, ev, -1)
	if err != nil {
		return err
	}
	ev.Sequence, e.LastSequence = seq, seq
	return en.emit(ctx, tx, task, e, ev)
}

// RetryTx is an operator's retry of the application's execution: the same
// execution goes on where it stopped, with the same downstream keys. A
// FAILED one runs its failed last step again (a new step of the same name
// and key, with a fresh retry budget) and is QUEUED, reopened; a RUNNING
// one runs its OUTCOME_UNKNOWN steps again (as ResolveTx with
// VerdictRetry). A step that completed never runs again. A live execution
// with nothing to retry is answered as it is (a repeated retry changes
// nothing); a finished one that cannot go on (SUCCEEDED, CANCELED,
// TIMED_OUT, or FAILED after its last step completed) is
// ErrIllegalTransition.
func (en *Engine[TX]) RetryTx(ctx context.Context, tx TX, app, executionID string) (store.Execution, error) {
	task, e, err := en.run(ctx, tx, app, executionID)
	if err != nil {
		return store.Execution{}, err
	}
	steps, err := en.s.ListStepsTx(ctx, tx, app, executionID)
	if err != nil {
		return store.Execution{}, err
	}
	switch Status(e.Status) {
	case StatusFailed:
		if len(steps) == 0 || StepStatus(steps[len(steps)-1].Status) != StepFailed {
			return store.Execution{}, fmt.Errorf("%w: the execution failed after its last step completed: nothing to retry (start it over)", ErrIllegalTransition)
		}
		last := steps[len(steps)-1]
		if e, err = en.transition(ctx, tx, task, e, ActionResume, store.Transition{Reopen: true}); err != nil {
			return store.Execution{}, err
		}
		return e, en.dispatch(ctx, tx, task, e, StepSpec{Name: last.Name, IdempotencyKey: last.IdempotencyKey, Once: last.Once}, en.cfg.Now())
	case StatusRunning:
		n := 0
		for _, st := range steps {
			if StepStatus(st.Status) != StepOutcomeUnknown {
				continue
			}
			if _, err := en.updateStep(ctx, tx, st, StepActionResolveRetry, store.StepUpdate{DueAt: en.cfg.Now()}); err != nil {
				return store.Execution{}, err
			}
			n++
		}
		if n > 0 {
			return en.transition(ctx, tx, task, e, ActionRequeue, store.Transition{})
		}
	}
	if !Status(e.Status).Terminal() {
		return e, nil // going on already (a repeated retry): nothing to do
	}
	return store.Execution{}, fmt.Errorf("%w: retry of a %v execution", ErrIllegalTransition, Status(e.Status))
}

// timeOut moves the executions past their task's deadline to TIMED_OUT,
// each in its own transaction, failing their live steps.
func (en *Engine[TX]) timeOut(ctx context.Context, limit int) (int, error) {
	overdue, err := en.s.OverdueExecutions(ctx, en.cfg.Now(), limit)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, o := range overdue {
		err := en.s.InTx(ctx, func(ctx context.Context, tx TX) error {
			e, err := en.s.GetExecutionTx(ctx, tx, o.App, o.ID)
			if err != nil {
				return err
			}
			if _, changed, err := Next(Status(e.Status), ActionTimeout); err != nil || !changed {
				return err // finished meanwhile
			}
			task, err := en.s.GetTaskTx(ctx, tx, e.App, e.TaskID)
			if err != nil {
				return err
			}
			steps, err := en.s.ListStepsTx(ctx, tx, e.App, e.ID)
			if err != nil {
				return err
			}
			for _, st := range steps {
				if StepStatus(st.Status).Terminal() {
					continue
				}
				if _, err := en.updateStep(ctx, tx, st, StepActionFail, store.StepUpdate{Error: "timed out: the deadline passed", ClearClaim: true, CancelRequested: true}); err != nil {
					return err
				}
			}
			_, err = en.transition(ctx, tx, task, e, ActionTimeout, store.Transition{Error: "the deadline passed"})
			return err
		})
		switch {
		case err == nil:
			n++
		case !errors.Is(err, ErrFenced) && !errors.Is(err, ErrIllegalTransition):
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
