package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
)

// Executions is the in-memory reference model of store.ExecutionStore and
// store.StepStore. It
// shares the transactions of the Inbox it was made from, and its other
// methods, like the Inbox's, must not be called inside one.
type Executions struct {
	in     *Inbox
	tasks  map[appID]store.Task
	execs  map[appID]store.Execution
	events map[appID][]store.Event // by execution
	steps  map[appID]store.Step
	// triggers are the workflow triggers' identities (trigger.go).
	triggers map[triggerKey]store.Trigger
}

// appID names a row of one application.
type appID struct{ app, id string }

var (
	_ store.ExecutionStore[*Tx] = (*Executions)(nil)
	_ store.StepStore[*Tx]      = (*Executions)(nil)
	_ store.StepSettler[*Tx]    = (*Executions)(nil)
)

// NewExecutions returns an empty execution store whose writes join in's
// transactions.
func NewExecutions(in *Inbox) *Executions {
	return &Executions{in: in, tasks: map[appID]store.Task{}, execs: map[appID]store.Execution{}, events: map[appID][]store.Event{},
		steps: map[appID]store.Step{}, triggers: map[triggerKey]store.Trigger{}}
}

// InTx runs fn in a transaction of the underlying Inbox.
func (x *Executions) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	return x.in.InTx(ctx, fn)
}

// putExec stores e in tx, restoring what was there on rollback.
func (x *Executions) putExec(tx *Tx, e store.Execution) {
	k := appID{e.App, e.ID}
	old, had := x.execs[k]
	x.execs[k] = e
	tx.OnRollback(func() {
		if had {
			x.execs[k] = old
		} else {
			delete(x.execs, k)
		}
	})
}

// putTask stores t in tx, restoring what was there on rollback.
func (x *Executions) putTask(tx *Tx, t store.Task) {
	k := appID{t.App, t.ID}
	old, had := x.tasks[k]
	x.tasks[k] = t
	tx.OnRollback(func() {
		if had {
			x.tasks[k] = old
		} else {
			delete(x.tasks, k)
		}
	})
}

// appendEvent gives ev the execution's next sequence and stores it in tx.
func (x *Executions) appendEvent(tx *Tx, e *store.Execution, ev store.Event) int64 {
	k := appID{e.App, e.ID}
	e.LastSequence++
	ev.ExecutionID, ev.Sequence = e.ID, e.LastSequence
	ev.Data = slices.Clone(ev.Data)
	n := len(x.events[k])
	x.events[k] = append(x.events[k], ev)
	tx.OnRollback(func() { x.events[k] = x.events[k][:n] })
	return ev.Sequence
}

// CreateTaskTx implements store.ExecutionStore.
func (x *Executions) CreateTaskTx(ctx context.Context, tx *Tx, t store.NewTask) error {
	if err := tx.check(); err != nil {
		return err
	}
	task := t.Task
	if task.App == "" || task.ID == "" || t.ExecutionID == "" || t.Status == 0 {
		return fmt.Errorf("memstore: create task: app, task id, execution id and status are required")
	}
	if _, ok := x.tasks[appID{task.App, task.ID}]; ok {
		return fmt.Errorf("memstore: task %q: %w", task.ID, store.ErrDuplicate)
	}
	if _, ok := x.execs[appID{task.App, t.ExecutionID}]; ok {
		return fmt.Errorf("memstore: execution %q: %w", t.ExecutionID, store.ErrDuplicate)
	}
	task.Input = slices.Clone(task.Input)
	task.CurrentExecution, task.Status = t.ExecutionID, t.Status
	e := store.Execution{App: task.App, ID: t.ExecutionID, TaskID: task.ID, Number: 1, Status: t.Status, CreatedAt: task.CreatedAt,
		Workflow: t.Workflow, Version: t.Version}
	if st := t.Step; st != nil {
		if err := x.AddStepTx(ctx, tx, *st); err != nil {
			return err
		}
	}
	for _, ev := range append([]store.Event{t.Event}, t.More...) {
		x.appendEvent(tx, &e, ev)
	}
	x.putTask(tx, task)
	x.putExec(tx, e)
	return nil
}

// RerunTx implements store.ExecutionStore.
func (x *Executions) RerunTx(ctx context.Context, tx *Tx, r store.Rerun) (store.Execution, error) {
	app, taskID, executionID, status, ev := r.App, r.TaskID, r.ExecutionID, r.Status, r.Event
	if err := tx.check(); err != nil {
		return store.Execution{}, err
	}
	task, ok := x.tasks[appID{app, taskID}]
	if !ok {
		return store.Execution{}, fmt.Errorf("memstore: task %q: %w", taskID, store.ErrNotFound)
	}
	if _, ok := x.execs[appID{app, executionID}]; ok {
		return store.Execution{}, fmt.Errorf("memstore: execution %q: %w", executionID, store.ErrDuplicate)
	}
	cur := x.execs[appID{app, task.CurrentExecution}]
	e := store.Execution{App: app, ID: executionID, TaskID: taskID, Number: cur.Number + 1, Status: status, CreatedAt: ev.Time,
		Workflow: r.Workflow, Version: r.Version}
	x.appendEvent(tx, &e, ev)
	x.putExec(tx, e)
	task.CurrentExecution, task.Status = executionID, status
	x.putTask(tx, task)
	return e, nil
}

// TransitionTx implements store.ExecutionStore.
func (x *Executions) TransitionTx(ctx context.Context, tx *Tx, t store.Transition) (store.Execution, bool, error) {
	if err := tx.check(); err != nil {
		return store.Execution{}, false, err
	}
	e, ok := x.execs[appID{t.App, t.ID}]
	if !ok {
		return store.Execution{}, false, fmt.Errorf("memstore: execution %q: %w", t.ID, store.ErrNotFound)
	}
	if e.Status != t.From {
		return cloneExec(e), false, nil
	}
	e.Status = t.To
	if t.Reopen {
		e.FinishedAt, e.Output, e.Error = time.Time{}, nil, ""
	}
	if !t.StartedAt.IsZero() {
		e.StartedAt = t.StartedAt
	}
	if !t.FinishedAt.IsZero() {
		e.FinishedAt = t.FinishedAt
	}
	if t.Output != nil {
		e.Output = slices.Clone(t.Output)
	}
	if t.Error != "" {
		e.Error = t.Error
	}
	if t.Progress != 0 {
		e.Progress = t.Progress
	}
	x.appendEvent(tx, &e, t.Event)
	x.putExec(tx, e)
	if task := x.tasks[appID{e.App, e.TaskID}]; task.CurrentExecution == e.ID {
		task.Status = e.Status
		x.putTask(tx, task)
	}
	return cloneExec(e), true, nil
}

// AppendEventTx implements store.ExecutionStore.
func (x *Executions) AppendEventTx(ctx context.Context, tx *Tx, app, executionID string, ev store.Event, progress int) (int64, error) {
	if err := tx.check(); err != nil {
		return 0, err
	}
	e, ok := x.execs[appID{app, executionID}]
	if !ok {
		return 0, fmt.Errorf("memstore: execution %q: %w", executionID, store.ErrNotFound)
	}
	if progress >= 0 {
		e.Progress = progress
	}
	seq := x.appendEvent(tx, &e, ev)
	x.putExec(tx, e)
	return seq, nil
}

func cloneExec(e store.Execution) store.Execution {
	e.Output = slices.Clone(e.Output)
	return e
}

// GetTask implements store.ExecutionStore.
func (x *Executions) GetTask(ctx context.Context, app, id string) (store.Task, error) {
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	return x.getTask(app, id)
}

// GetTaskTx implements store.ExecutionStore.
func (x *Executions) GetTaskTx(ctx context.Context, tx *Tx, app, id string) (store.Task, error) {
	if err := tx.check(); err != nil {
		return store.Task{}, err
	}
	return x.getTask(app, id)
}

func (x *Executions) getTask(app, id string) (store.Task, error) {
	t, ok := x.tasks[appID{app, id}]
	if !ok {
		return store.Task{}, fmt.Errorf("memstore: task %q: %w", id, store.ErrNotFound)
	}
	t.Input = slices.Clone(t.Input)
	return t, nil
}

// GetExecution implements store.ExecutionStore.
func (x *Executions) GetExecution(ctx context.Context, app, id string) (store.Execution, error) {
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	return x.getExecution(app, id)
}

// GetExecutionTx implements store.ExecutionStore.
func (x *Executions) GetExecutionTx(ctx context.Context, tx *Tx, app, id string) (store.Execution, error) {
	if err := tx.check(); err != nil {
		return store.Execution{}, err
	}
	return x.getExecution(app, id)
}

func (x *Executions) getExecution(app, id string) (store.Execution, error) {
	e, ok := x.execs[appID{app, id}]
	if !ok {
		return store.Execution{}, fmt.Errorf("memstore: execution %q: %w", id, store.ErrNotFound)
	}
	return cloneExec(e), nil
}

// ListTasks implements store.ExecutionStore.
func (x *Executions) ListTasks(ctx context.Context, q store.TaskQuery) ([]store.Task, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("memstore: list tasks: limit %d, want at least 1", q.Limit)
	}
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	var out []store.Task
	for k, t := range x.tasks {
		if k.app != q.App || (q.Type != "" && t.Type != q.Type) || (q.Status != 0 && t.Status != q.Status) || (q.ExcludeType != "" && t.Type == q.ExcludeType) {
			continue
		}
		if !q.AfterTime.IsZero() || q.AfterID != "" {
			// Newest first: after (AfterTime, AfterID) means strictly older.
			if c := t.CreatedAt.Compare(q.AfterTime); c > 0 || (c == 0 && t.ID >= q.AfterID) {
				continue
			}
		}
		t.Input = slices.Clone(t.Input)
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b store.Task) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	return out[:min(len(out), q.Limit)], nil
}

// ListEvents implements store.ExecutionStore.
func (x *Executions) ListEvents(ctx context.Context, app, executionID string, after int64, limit int) ([]store.Event, error) {
	if limit < 1 {
		return nil, fmt.Errorf("memstore: list events: limit %d, want at least 1", limit)
	}
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	k := appID{app, executionID}
	if _, ok := x.execs[k]; !ok {
		return nil, fmt.Errorf("memstore: execution %q: %w", executionID, store.ErrNotFound)
	}
	var out []store.Event
	for _, ev := range x.events[k] {
		if ev.Sequence > after && len(out) < limit {
			ev.Data = slices.Clone(ev.Data)
			out = append(out, ev)
		}
	}
	return out, nil
}

// putStep stores st in tx, restoring what was there on rollback.
func (x *Executions) putStep(tx *Tx, st store.Step) {
	k := appID{st.App, st.ID}
	old, had := x.steps[k]
	x.steps[k] = st
	tx.OnRollback(func() {
		if had {
			x.steps[k] = old
		} else {
			delete(x.steps, k)
		}
	})
}

func cloneStep(st store.Step) store.Step {
	st.Output = slices.Clone(st.Output)
	return st
}

// AddStepTx implements store.StepStore.
func (x *Executions) AddStepTx(ctx context.Context, tx *Tx, st store.Step) error {
	if err := tx.check(); err != nil {
		return err
	}
	if st.App == "" || st.ID == "" || st.ExecutionID == "" || st.Status == 0 {
		return fmt.Errorf("memstore: add step: app, id, execution id and status are required")
	}
	if _, ok := x.steps[appID{st.App, st.ID}]; ok {
		return fmt.Errorf("memstore: step %q: %w", st.ID, store.ErrDuplicate)
	}
	st.Epoch, st.Attempts, st.Owner, st.LeaseUntil, st.CancelRequested = 0, 0, "", time.Time{}, false
	st.Output, st.Error = nil, ""
	x.putStep(tx, st)
	return nil
}

// claimable reports whether st may be claimed by c.
func claimable(st store.Step, c store.StepClaim) bool {
	if st.CancelRequested || !slices.Contains(c.Types, st.Type) {
		return false
	}
	switch st.Status {
	case store.StepDispatched:
		return !st.DueAt.After(c.Now)
	case store.StepExecuting:
		return !st.Once && !st.LeaseUntil.After(c.Now)
	}
	return false
}

// ClaimStepsTx implements store.StepStore.
func (x *Executions) ClaimStepsTx(ctx context.Context, tx *Tx, c store.StepClaim) ([]store.Step, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	if len(c.Types) == 0 || c.Owner == "" || c.Lease <= 0 || c.Limit < 0 {
		return nil, fmt.Errorf("memstore: claim steps: types, owner and lease are required, and no negative limit")
	}
	var ready []store.Step
	for _, st := range x.steps {
		if claimable(st, c) {
			ready = append(ready, st)
		}
	}
	slices.SortFunc(ready, func(a, b store.Step) int {
		if c := a.DueAt.Compare(b.DueAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := make([]store.Step, 0, min(len(ready), max(c.Limit, 1)))
	for _, st := range ready[:cap(out)] {
		st.Status, st.Epoch, st.Attempts = store.StepExecuting, st.Epoch+1, st.Attempts+1
		st.Owner, st.LeaseUntil = c.Owner, c.Now.Add(c.Lease)
		x.putStep(tx, st)
		out = append(out, cloneStep(st))
	}
	return out, nil
}

// UpdateStepTx implements store.StepStore.
func (x *Executions) UpdateStepTx(ctx context.Context, tx *Tx, u store.StepUpdate) (store.Step, bool, error) {
	if err := tx.check(); err != nil {
		return store.Step{}, false, err
	}
	st, ok := x.steps[appID{u.App, u.ID}]
	if !ok {
		return store.Step{}, false, fmt.Errorf("memstore: step %q: %w", u.ID, store.ErrNotFound)
	}
	if st.Status != u.From || (u.Epoch != 0 && (st.Epoch != u.Epoch || st.Owner != u.Owner)) {
		return cloneStep(st), false, nil
	}
	st.Status = u.Status
	if !u.LeaseUntil.IsZero() {
		st.LeaseUntil = u.LeaseUntil
	}
	if !u.DueAt.IsZero() {
		st.DueAt = u.DueAt
	}
	if u.Output != nil {
		st.Output = slices.Clone(u.Output)
	}
	if u.Error != "" {
		st.Error = u.Error
	}
	if u.CancelRequested {
		st.CancelRequested = true
	}
	if u.ClearClaim {
		st.Owner, st.LeaseUntil = "", time.Time{}
	}
	x.putStep(tx, st)
	return cloneStep(st), true, nil
}

// GetStep implements store.StepStore.
func (x *Executions) GetStep(ctx context.Context, app, id string) (store.Step, error) {
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	return x.getStep(app, id)
}

// GetStepTx implements store.StepStore.
func (x *Executions) GetStepTx(ctx context.Context, tx *Tx, app, id string) (store.Step, error) {
	if err := tx.check(); err != nil {
		return store.Step{}, err
	}
	return x.getStep(app, id)
}

func (x *Executions) getStep(app, id string) (store.Step, error) {
	st, ok := x.steps[appID{app, id}]
	if !ok {
		return store.Step{}, fmt.Errorf("memstore: step %q: %w", id, store.ErrNotFound)
	}
	return cloneStep(st), nil
}

// ListSteps implements store.StepStore.
func (x *Executions) ListSteps(ctx context.Context, app, executionID string) ([]store.Step, error) {
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	return x.listSteps(app, executionID)
}

// ListStepsTx implements store.StepStore.
func (x *Executions) ListStepsTx(ctx context.Context, tx *Tx, app, executionID string) ([]store.Step, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	return x.listSteps(app, executionID)
}

func (x *Executions) listSteps(app, executionID string) ([]store.Step, error) {
	if _, ok := x.execs[appID{app, executionID}]; !ok {
		return nil, fmt.Errorf("memstore: execution %q: %w", executionID, store.ErrNotFound)
	}
	var out []store.Step
	for k, st := range x.steps {
		if k.app == app && st.ExecutionID == executionID {
			out = append(out, cloneStep(st))
		}
	}
	slices.SortFunc(out, func(a, b store.Step) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// ExpiredSteps implements store.StepStore.
func (x *Executions) ExpiredSteps(ctx context.Context, now time.Time, limit int) ([]store.Step, error) {
	if limit < 1 {
		return nil, fmt.Errorf("memstore: expired steps: limit %d, want at least 1", limit)
	}
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	var out []store.Step
	for _, st := range x.steps {
		if st.Status == store.StepExecuting && st.LeaseUntil.Before(now) {
			out = append(out, cloneStep(st))
		}
	}
	slices.SortFunc(out, func(a, b store.Step) int {
		if c := a.LeaseUntil.Compare(b.LeaseUntil); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out[:min(len(out), limit)], nil
}

// OverdueExecutions implements store.ExecutionStore.
func (x *Executions) OverdueExecutions(ctx context.Context, now time.Time, limit int) ([]store.Execution, error) {
	if limit < 1 {
		return nil, fmt.Errorf("memstore: overdue executions: limit %d, want at least 1", limit)
	}
	x.in.mu.Lock()
	defer x.in.mu.Unlock()
	type due struct {
		at time.Time
		e  store.Execution
	}
	var out []due
	for _, t := range x.tasks {
		if t.Deadline.IsZero() || !t.Deadline.Before(now) {
			continue
		}
		e := x.execs[appID{t.App, t.CurrentExecution}]
		switch e.Status {
		case store.ExecutionCreated, store.ExecutionQueued, store.ExecutionRunning, store.ExecutionCanceling:
			out = append(out, due{t.Deadline, cloneExec(e)})
		}
	}
	slices.SortFunc(out, func(a, b due) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.e.ID, b.e.ID)
	})
	res := make([]store.Execution, 0, min(len(out), limit))
	for _, d := range out[:min(len(out), limit)] {
		res = append(res, d.e)
	}
	return res, nil
}

// GetExecutionsTx implements store.ExecutionStore.
func (x *Executions) GetExecutionsTx(ctx context.Context, tx *Tx, refs []store.ExecutionRef) ([]store.Execution, []store.Task, error) {
	if err := tx.check(); err != nil {
		return nil, nil, err
	}
	execs, tasks := make([]store.Execution, len(refs)), make([]store.Task, len(refs))
	for i, r := range refs {
		e, err := x.getExecution(r.App, r.ID)
		if err != nil {
			return nil, nil, err
		}
		t, err := x.getTask(r.App, e.TaskID)
		if err != nil {
			return nil, nil, err
		}
		execs[i], tasks[i] = e, t
	}
	return execs, tasks, nil
}

// TransitionsTx implements store.ExecutionStore, one transition after the
// other.
func (x *Executions) TransitionsTx(ctx context.Context, tx *Tx, ts []store.Transition) ([]store.Execution, []bool, error) {
	execs, applied := make([]store.Execution, len(ts)), make([]bool, len(ts))
	for i, t := range ts {
		var err error
		if execs[i], applied[i], err = x.TransitionTx(ctx, tx, t); err != nil {
			return nil, nil, err
		}
	}
	return execs, applied, nil
}

// SettleStepsTx implements store.StepSettler: the updates, then each
// transition whose step update applied (the others read as they are), as
// PostgreSQL's pipeline does, so that the engine's use of it is tested on
// the model too.
func (x *Executions) SettleStepsTx(ctx context.Context, tx *Tx, us []store.StepUpdate, ts []store.Transition, after []int) ([]store.Step, []bool, []store.Execution, []bool, error) {
	if err := store.CheckSettle(us, ts, after); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("memstore: %w", err)
	}
	steps, stepsApplied, err := x.UpdateStepsTx(ctx, tx, us)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	execs, moved := make([]store.Execution, len(ts)), make([]bool, len(ts))
	for j, t := range ts {
		if !stepsApplied[after[j]] {
			if execs[j], err = x.GetExecutionTx(ctx, tx, t.App, t.ID); err != nil {
				return nil, nil, nil, nil, err
			}
			continue
		}
		if execs[j], moved[j], err = x.TransitionTx(ctx, tx, t); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return steps, stepsApplied, execs, moved, nil
}

// UpdateStepsTx implements store.StepStore, one update after the other.
func (x *Executions) UpdateStepsTx(ctx context.Context, tx *Tx, us []store.StepUpdate) ([]store.Step, []bool, error) {
	steps, applied := make([]store.Step, len(us)), make([]bool, len(us))
	for i, u := range us {
		var err error
		if steps[i], applied[i], err = x.UpdateStepTx(ctx, tx, u); err != nil {
			return nil, nil, err
		}
	}
	return steps, applied, nil
}
