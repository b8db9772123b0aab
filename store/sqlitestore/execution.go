package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.ExecutionStore[*sql.Tx] = (*Store)(nil)

var (
	//go:embed sql/task_insert.sql
	taskInsertSQL string
	//go:embed sql/task_get.sql
	taskGetSQL string
	//go:embed sql/task_status.sql
	taskStatusSQL string
	//go:embed sql/task_current.sql
	taskCurrentSQL string
	//go:embed sql/task_move.sql
	taskMoveSQL string
	//go:embed sql/tasks_list.sql
	tasksListSQL string
	//go:embed sql/execution_insert.sql
	executionInsertSQL string
	//go:embed sql/execution_get.sql
	executionGetSQL string
	//go:embed sql/execution_transition.sql
	executionTransitionSQL string
	//go:embed sql/execution_progress.sql
	executionProgressSQL string
	//go:embed sql/execution_event_insert.sql
	executionEventInsertSQL string
	//go:embed sql/execution_events_list.sql
	executionEventsListSQL string
	//go:embed sql/executions_overdue.sql
	executionsOverdueSQL string
)

// execError wraps err with the operation and the row it concerns, keeping
// it matchable with errors.Is.
func execError(op, app, id string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlitestore: %s (app %q, id %q): %w", op, app, id, err)
}

// insertOnce runs an INSERT … ON CONFLICT DO NOTHING and reports
// store.ErrDuplicate when it inserted nothing.
func insertOnce(ctx context.Context, tx dbtx, query string, args ...any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return interpretError(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return interpretError(err)
	} else if n == 0 {
		return store.ErrDuplicate
	}
	return nil
}

// insertExecution writes an execution created at createdAt, with its
// events, numbered from 1.
func insertExecution(ctx context.Context, tx dbtx, app, id, taskID string, number int, status store.ExecutionStatus, createdAt time.Time, workflow string, version int, evs ...store.Event) error {
	if err := insertOnce(ctx, tx, executionInsertSQL, sql.Named("app", app), sql.Named("id", id), sql.Named("task_id", taskID),
		sql.Named("number", number), sql.Named("status", int(status)), sql.Named("last_seq", len(evs)), sql.Named("created_at", toMicros(createdAt)),
		sql.Named("workflow", workflow), sql.Named("version", version)); err != nil {
		return fmt.Errorf("execution %q: %w", id, err)
	}
	for i, ev := range evs {
		if err := insertEvent(ctx, tx, app, id, int64(1+i), ev); err != nil {
			return err
		}
	}
	return nil
}

func insertEvent(ctx context.Context, tx dbtx, app, executionID string, seq int64, ev store.Event) error {
	_, err := tx.ExecContext(ctx, executionEventInsertSQL, sql.Named("app", app), sql.Named("execution_id", executionID),
		sql.Named("seq", seq), sql.Named("type", ev.Type), sql.Named("data", ev.Data), sql.Named("at", toMicros(ev.Time)))
	return interpretError(err)
}

// CreateTaskTx implements store.ExecutionStore.
func (s *Store) CreateTaskTx(ctx context.Context, tx *sql.Tx, t store.NewTask) error {
	task := t.Task
	if tx == nil {
		return execError("create task", task.App, task.ID, errors.New("tx is nil"))
	}
	if task.App == "" || task.ID == "" || t.ExecutionID == "" || t.Status == 0 {
		return execError("create task", task.App, task.ID, errors.New("app, task id, execution id and status are required"))
	}
	if err := insertOnce(ctx, s.stmts.on(tx), taskInsertSQL, sql.Named("app", task.App), sql.Named("id", task.ID), sql.Named("type", task.Type),
		sql.Named("input", nonNil(task.Input)), sql.Named("external_ref", task.ExternalRef), sql.Named("deadline", toMicros(task.Deadline)),
		sql.Named("current_execution", t.ExecutionID), sql.Named("status", int(t.Status)), sql.Named("created_at", toMicros(task.CreatedAt))); err != nil {
		return execError("create task", task.App, task.ID, err)
	}
	if err := insertExecution(ctx, s.stmts.on(tx), task.App, t.ExecutionID, task.ID, 1, t.Status, task.CreatedAt, t.Workflow, t.Version,
		append([]store.Event{t.Event}, t.More...)...); err != nil {
		return execError("create task", task.App, task.ID, err)
	}
	if t.Step != nil {
		return s.AddStepTx(ctx, tx, *t.Step)
	}
	return nil
}

// RerunTx implements store.ExecutionStore.
func (s *Store) RerunTx(ctx context.Context, tx *sql.Tx, r store.Rerun) (store.Execution, error) {
	app, taskID, executionID, status, ev := r.App, r.TaskID, r.ExecutionID, r.Status, r.Event
	if tx == nil {
		return store.Execution{}, execError("rerun", app, taskID, errors.New("tx is nil"))
	}
	var number int
	if err := s.stmts.on(tx).QueryRowContext(ctx, taskCurrentSQL, sql.Named("app", app), sql.Named("id", taskID)).Scan(&number); err != nil {
		return store.Execution{}, execError("rerun", app, taskID, interpretError(err))
	}
	if err := insertExecution(ctx, s.stmts.on(tx), app, executionID, taskID, number+1, status, ev.Time, r.Workflow, r.Version, ev); err != nil {
		return store.Execution{}, execError("rerun", app, taskID, err)
	}
	if _, err := s.stmts.on(tx).ExecContext(ctx, taskMoveSQL, sql.Named("app", app), sql.Named("id", taskID),
		sql.Named("execution_id", executionID), sql.Named("status", int(status))); err != nil {
		return store.Execution{}, execError("rerun", app, taskID, interpretError(err))
	}
	return store.Execution{App: app, ID: executionID, TaskID: taskID, Number: number + 1, Status: status, LastSequence: 1, CreatedAt: ev.Time,
		Workflow: r.Workflow, Version: r.Version}, nil
}

// scanExecution reads the columns of execution_get.sql and
// execution_transition.sql's RETURNING.
func scanExecution(row interface{ Scan(...any) error }, e *store.Execution) error {
	var status, created, started, finished int64
	var errText string
	if err := row.Scan(&e.TaskID, &e.Number, &status, &e.LastSequence, &created, &started, &finished, &e.Output, &errText, &e.Progress, &e.Workflow, &e.Version); err != nil {
		return err
	}
	e.Status, e.Error = store.ExecutionStatus(status), errText
	e.CreatedAt, e.StartedAt, e.FinishedAt = fromMicros(created), fromMicros(started), fromMicros(finished)
	return nil
}

// TransitionTx implements store.ExecutionStore.
func (s *Store) TransitionTx(ctx context.Context, tx *sql.Tx, t store.Transition) (store.Execution, bool, error) {
	if tx == nil {
		return store.Execution{}, false, execError("transition", t.App, t.ID, errors.New("tx is nil"))
	}
	e := store.Execution{App: t.App, ID: t.ID}
	err := scanExecution(s.stmts.on(tx).QueryRowContext(ctx, executionTransitionSQL,
		sql.Named("app", t.App), sql.Named("id", t.ID), sql.Named("from", int(t.From)), sql.Named("to", int(t.To)),
		sql.Named("started_at", toMicros(t.StartedAt)), sql.Named("finished_at", toMicros(t.FinishedAt)),
		sql.Named("has_output", t.Output != nil), sql.Named("output", t.Output), sql.Named("error", t.Error),
		sql.Named("progress", t.Progress), sql.Named("reopen", t.Reopen)), &e)
	if errors.Is(err, sql.ErrNoRows) {
		// Not in t.From, or no such execution: the row says which.
		err = scanExecution(s.stmts.on(tx).QueryRowContext(ctx, executionGetSQL, sql.Named("app", t.App), sql.Named("id", t.ID)), &e)
		return e, false, execError("transition", t.App, t.ID, interpretError(err))
	}
	if err != nil {
		return store.Execution{}, false, execError("transition", t.App, t.ID, interpretError(err))
	}
	if err := insertEvent(ctx, s.stmts.on(tx), t.App, t.ID, e.LastSequence, t.Event); err != nil {
		return store.Execution{}, false, execError("transition", t.App, t.ID, err)
	}
	if _, err := s.stmts.on(tx).ExecContext(ctx, taskStatusSQL, sql.Named("app", t.App), sql.Named("id", e.TaskID),
		sql.Named("execution_id", t.ID), sql.Named("status", int(e.Status))); err != nil {
		return store.Execution{}, false, execError("transition", t.App, t.ID, interpretError(err))
	}
	return e, true, nil
}

// AppendEventTx implements store.ExecutionStore.
func (s *Store) AppendEventTx(ctx context.Context, tx *sql.Tx, app, executionID string, ev store.Event, progress int) (int64, error) {
	if tx == nil {
		return 0, execError("append event", app, executionID, errors.New("tx is nil"))
	}
	var seq int64
	if err := s.stmts.on(tx).QueryRowContext(ctx, executionProgressSQL, sql.Named("app", app), sql.Named("id", executionID),
		sql.Named("progress", progress)).Scan(&seq); err != nil {
		return 0, execError("append event", app, executionID, interpretError(err))
	}
	return seq, execError("append event", app, executionID, insertEvent(ctx, s.stmts.on(tx), app, executionID, seq, ev))
}

// GetTask implements store.ExecutionStore.
func (s *Store) GetTask(ctx context.Context, app, id string) (store.Task, error) {
	return s.getTask(ctx, s.stmts.on(nil), app, id)
}

// GetTaskTx implements store.ExecutionStore.
func (s *Store) GetTaskTx(ctx context.Context, tx *sql.Tx, app, id string) (store.Task, error) {
	if tx == nil {
		return store.Task{}, execError("get task", app, id, errors.New("tx is nil"))
	}
	return s.getTask(ctx, s.stmts.on(tx), app, id)
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) getTask(ctx context.Context, q querier, app, id string) (store.Task, error) {
	t, err := scanTask(q.QueryRowContext(ctx, taskGetSQL, sql.Named("app", app), sql.Named("id", id)))
	if err != nil {
		return store.Task{}, execError("get task", app, id, interpretError(err))
	}
	t.App = app
	return t, nil
}

// scanTask reads the columns of task_get.sql and tasks_list.sql.
func scanTask(row interface{ Scan(...any) error }) (store.Task, error) {
	var t store.Task
	var deadline, created, status int64
	if err := row.Scan(&t.ID, &t.Type, &t.Input, &t.ExternalRef, &deadline, &t.CurrentExecution, &status, &created); err != nil {
		return store.Task{}, err
	}
	t.Deadline, t.CreatedAt, t.Status = fromMicros(deadline), fromMicros(created), store.ExecutionStatus(status)
	return t, nil
}

// GetExecution implements store.ExecutionStore.
func (s *Store) GetExecution(ctx context.Context, app, id string) (store.Execution, error) {
	return s.getExecution(ctx, s.stmts.on(nil), app, id)
}

// GetExecutionTx implements store.ExecutionStore.
func (s *Store) GetExecutionTx(ctx context.Context, tx *sql.Tx, app, id string) (store.Execution, error) {
	if tx == nil {
		return store.Execution{}, execError("get execution", app, id, errors.New("tx is nil"))
	}
	return s.getExecution(ctx, s.stmts.on(tx), app, id)
}

func (s *Store) getExecution(ctx context.Context, q querier, app, id string) (store.Execution, error) {
	e := store.Execution{App: app, ID: id}
	err := scanExecution(q.QueryRowContext(ctx, executionGetSQL, sql.Named("app", app), sql.Named("id", id)), &e)
	if err != nil {
		return store.Execution{}, execError("get execution", app, id, interpretError(err))
	}
	return e, nil
}

// ListTasks implements store.ExecutionStore.
func (s *Store) ListTasks(ctx context.Context, q store.TaskQuery) ([]store.Task, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("sqlitestore: list tasks: limit %d, want at least 1", q.Limit)
	}
	after := 0
	if !q.AfterTime.IsZero() || q.AfterID != "" {
		after = 1
	}
	rows, err := s.db.QueryContext(ctx, tasksListSQL, sql.Named("app", q.App), sql.Named("type", q.Type), sql.Named("status", int(q.Status)), sql.Named("exclude", q.ExcludeType),
		sql.Named("after", after), sql.Named("after_time", toMicros(q.AfterTime)), sql.Named("after_id", q.AfterID), sql.Named("limit", q.Limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list tasks: %w", interpretError(err))
	}
	defer rows.Close()
	var out []store.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list tasks: %w", interpretError(err))
		}
		t.App = q.App
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list tasks: %w", interpretError(err))
	}
	return out, nil
}

// ListEvents implements store.ExecutionStore.
func (s *Store) ListEvents(ctx context.Context, app, executionID string, after int64, limit int) ([]store.Event, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitestore: list events: limit %d, want at least 1", limit)
	}
	rows, err := s.db.QueryContext(ctx, executionEventsListSQL, sql.Named("app", app), sql.Named("execution_id", executionID),
		sql.Named("after", after), sql.Named("limit", limit))
	if err != nil {
		return nil, execError("list events", app, executionID, interpretError(err))
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		ev := store.Event{ExecutionID: executionID}
		var at int64
		if err := rows.Scan(&ev.Sequence, &ev.Type, &ev.Data, &at); err != nil {
			return nil, execError("list events", app, executionID, interpretError(err))
		}
		ev.Time = fromMicros(at)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, execError("list events", app, executionID, interpretError(err))
	}
	if len(out) == 0 {
		// No event after `after`: an execution with none at all is no
		// execution (every one has its first), unless it is another
		// application's or unknown. Executions are never deleted, so the
		// second read agrees with the first.
		if _, err := s.GetExecution(ctx, app, executionID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// OverdueExecutions implements store.ExecutionStore.
func (s *Store) OverdueExecutions(ctx context.Context, now time.Time, limit int) ([]store.Execution, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitestore: overdue executions: limit %d, want at least 1", limit)
	}
	rows, err := s.db.QueryContext(ctx, executionsOverdueSQL, sql.Named("now", toMicros(now)), sql.Named("limit", limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: overdue executions: %w", interpretError(err))
	}
	defer rows.Close()
	var out []store.Execution
	for rows.Next() {
		var e store.Execution
		var app, id string
		if err := scanExecution(scanPrefix{rows, []any{&app, &id}}, &e); err != nil {
			return nil, fmt.Errorf("sqlitestore: overdue executions: %w", interpretError(err))
		}
		e.App, e.ID = app, id
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: overdue executions: %w", interpretError(err))
	}
	return out, nil
}

// scanPrefix scans pre before the columns its caller asks for.
type scanPrefix struct {
	row interface{ Scan(...any) error }
	pre []any
}

func (p scanPrefix) Scan(dst ...any) error { return p.row.Scan(append(p.pre, dst...)...) }

// GetExecutionsTx implements store.ExecutionStore: one execution and one
// task read each, in process.
func (s *Store) GetExecutionsTx(ctx context.Context, tx *sql.Tx, refs []store.ExecutionRef) ([]store.Execution, []store.Task, error) {
	execs, tasks := make([]store.Execution, len(refs)), make([]store.Task, len(refs))
	for i, r := range refs {
		e, err := s.GetExecutionTx(ctx, tx, r.App, r.ID)
		if err != nil {
			return nil, nil, err
		}
		t, err := s.GetTaskTx(ctx, tx, r.App, e.TaskID)
		if err != nil {
			return nil, nil, err
		}
		execs[i], tasks[i] = e, t
	}
	return execs, tasks, nil
}

// TransitionsTx implements store.ExecutionStore, one transition after the
// other.
func (s *Store) TransitionsTx(ctx context.Context, tx *sql.Tx, ts []store.Transition) ([]store.Execution, []bool, error) {
	execs, applied := make([]store.Execution, len(ts)), make([]bool, len(ts))
	for i, t := range ts {
		var err error
		if execs[i], applied[i], err = s.TransitionTx(ctx, tx, t); err != nil {
			return nil, nil, err
		}
	}
	return execs, applied, nil
}

// UpdateStepsTx implements store.StepStore, one update after the other.
func (s *Store) UpdateStepsTx(ctx context.Context, tx *sql.Tx, us []store.StepUpdate) ([]store.Step, []bool, error) {
	steps, applied := make([]store.Step, len(us)), make([]bool, len(us))
	for i, u := range us {
		var err error
		if steps[i], applied[i], err = s.UpdateStepTx(ctx, tx, u); err != nil {
			return nil, nil, err
		}
	}
	return steps, applied, nil
}
