package pgstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.ExecutionStore[pgx.Tx] = (*Store)(nil)

// The execution store's statements (sql/task_*.sql, sql/execution*.sql).
var (
	//go:embed sql/task_insert.sql
	taskInsertSQL string
	//go:embed sql/task_get.sql
	taskGetSQL string
	//go:embed sql/task_of_execution.sql
	taskOfExecutionSQL string
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
	//go:embed sql/executions_get.sql
	executionsGetSQL string
	//go:embed sql/claimed_executions_get.sql
	claimedExecutionsGetSQL string
)

// execError wraps err with the operation and the row it concerns, keeping
// it matchable with errors.Is; pgx.ErrNoRows becomes store.ErrNotFound.
func execError(op, app, id string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	return fmt.Errorf("idem/pgstore: %s (app %q, id %q): %w", op, app, id, err)
}

// orNull is t, or NULL for the zero time.
func orNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// valueOf is *t, or the zero time for NULL.
func valueOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// checkText refuses strings that a text column cannot hold (invalid UTF-8,
// NUL), before any statement runs, so that tx stays usable.
func checkText(fields map[string]string) error {
	for name, v := range fields {
		if !storable(v) {
			return fmt.Errorf("%s %q is not valid UTF-8 without NUL", name, v)
		}
	}
	return nil
}

// insertOnce runs an INSERT … ON CONFLICT DO NOTHING and reports
// store.ErrDuplicate when it inserted nothing.
func insertOnce(ctx context.Context, tx pgx.Tx, query string, args ...any) error {
	tag, err := tx.Exec(ctx, query, args...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrDuplicate
	}
	return nil
}

// insertExecution writes an execution created at createdAt, with its first
// event (sequence 1).
func insertExecution(ctx context.Context, tx pgx.Tx, app, id, taskID string, number int, status store.ExecutionStatus, createdAt time.Time, workflow string, version int, ev store.Event) error {
	if err := insertOnce(ctx, tx, executionInsertSQL, app, id, taskID, number, int16(status), createdAt, workflow, version, int64(1)); err != nil {
		return fmt.Errorf("execution %q: %w", id, err)
	}
	return insertEvent(ctx, tx, app, id, 1, ev)
}

func insertEvent(ctx context.Context, tx pgx.Tx, app, executionID string, seq int64, ev store.Event) error {
	if err := checkText(map[string]string{"event type": ev.Type}); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, executionEventInsertSQL, app, executionID, seq, ev.Type, ev.Data, ev.Time)
	return err
}

// CreateTaskTx implements store.ExecutionStore.
func (s *Store) CreateTaskTx(ctx context.Context, tx pgx.Tx, t store.NewTask) error {
	task := t.Task
	if task.App == "" || task.ID == "" || t.ExecutionID == "" || t.Status == 0 {
		return execError("create task", task.App, task.ID, errors.New("app, task id, execution id and status are required"))
	}
	if err := checkText(map[string]string{"app": task.App, "task id": task.ID, "type": task.Type,
		"external ref": task.ExternalRef, "execution id": t.ExecutionID, "workflow": t.Workflow}); err != nil {
		return execError("create task", task.App, task.ID, err)
	}
	evs := append([]store.Event{t.Event}, t.More...)
	for _, ev := range evs {
		if err := checkText(map[string]string{"event type": ev.Type}); err != nil {
			return execError("create task", task.App, task.ID, err)
		}
	}
	if st := t.Step; st != nil {
		if err := checkStep(*st); err != nil {
			return execError("create task", task.App, task.ID, err)
		}
	}
	// Every insert goes in one round trip. Should the task, the execution
	// or the step exist already, the error rolls the caller's transaction
	// back, the other inserts with it.
	b := &pgx.Batch{}
	what := []string{"task", "execution"}
	b.Queue(taskInsertSQL, task.App, task.ID, task.Type, orEmpty(task.Input), task.ExternalRef,
		orNull(task.Deadline), t.ExecutionID, int16(t.Status), task.CreatedAt)
	b.Queue(executionInsertSQL, task.App, t.ExecutionID, task.ID, 1, int16(t.Status), task.CreatedAt, t.Workflow, t.Version, int64(len(evs)))
	for i, ev := range evs {
		b.Queue(executionEventInsertSQL, task.App, t.ExecutionID, int64(1+i), ev.Type, ev.Data, ev.Time)
		what = append(what, "")
	}
	if st := t.Step; st != nil {
		b.Queue(stepInsertSQL, stepInsertArgs(*st)...)
		what = append(what, "step")
	}
	res := tx.SendBatch(ctx, b)
	err := func() error {
		for _, w := range what {
			tag, err := res.Exec()
			if err != nil {
				return err
			}
			if w != "" && tag.RowsAffected() == 0 {
				return fmt.Errorf("%s: %w", w, store.ErrDuplicate)
			}
		}
		return nil
	}()
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return execError("create task", task.App, task.ID, err)
}

// RerunTx implements store.ExecutionStore.
func (s *Store) RerunTx(ctx context.Context, tx pgx.Tx, r store.Rerun) (store.Execution, error) {
	app, taskID, executionID, status, ev := r.App, r.TaskID, r.ExecutionID, r.Status, r.Event
	if err := checkText(map[string]string{"app": app, "task id": taskID, "execution id": executionID, "workflow": r.Workflow}); err != nil {
		return store.Execution{}, execError("rerun", app, taskID, err)
	}
	var number int
	if err := tx.QueryRow(ctx, taskCurrentSQL, app, taskID).Scan(&number); err != nil {
		return store.Execution{}, execError("rerun", app, taskID, err)
	}
	if err := insertExecution(ctx, tx, app, executionID, taskID, number+1, status, ev.Time, r.Workflow, r.Version, ev); err != nil {
		return store.Execution{}, execError("rerun", app, taskID, err)
	}
	if _, err := tx.Exec(ctx, taskMoveSQL, app, taskID, executionID, int16(status)); err != nil {
		return store.Execution{}, execError("rerun", app, taskID, err)
	}
	return store.Execution{App: app, ID: executionID, TaskID: taskID, Number: number + 1, Status: status, LastSequence: 1, CreatedAt: ev.Time,
		Workflow: r.Workflow, Version: r.Version}, nil
}

// scanExecution reads the columns of execution_get.sql and
// execution_transition.sql's RETURNING.
func scanExecution(row pgx.Row, e *store.Execution) error {
	var status int16
	var started, finished *time.Time
	if err := row.Scan(&e.TaskID, &e.Number, &status, &e.LastSequence, &e.CreatedAt, &started, &finished, &e.Output, &e.Error, &e.Progress, &e.Workflow, &e.Version); err != nil {
		return err
	}
	e.Status, e.StartedAt, e.FinishedAt = store.ExecutionStatus(status), valueOf(started), valueOf(finished)
	return nil
}

// TransitionTx implements store.ExecutionStore in one statement
// (sql/execution_transition.sql), and a read when it does not apply.
func (s *Store) TransitionTx(ctx context.Context, tx pgx.Tx, t store.Transition) (store.Execution, bool, error) {
	execs, applied, err := s.TransitionsTx(ctx, tx, []store.Transition{t})
	if err != nil {
		return store.Execution{}, false, err
	}
	return execs[0], applied[0], nil
}

// TransitionsTx implements store.ExecutionStore: the transitions in one
// pipeline (pgx batch), then, for those that did not apply, the reads that
// say why, in another.
func (s *Store) TransitionsTx(ctx context.Context, tx pgx.Tx, ts []store.Transition) ([]store.Execution, []bool, error) {
	w, execs, err := transitions(ts, nil)
	return runAll(ctx, tx, w, execs, err)
}

// executionTransitionSettledSQL is execution_transition.sql applying only
// while a step is in a status at an epoch ($14 step id, $15 status, $16
// epoch): the step update before it in the same transaction applied
// (SettleStepsTx). When it did not, the update's condition fails on the
// execution's row before it is locked, so the transition neither applies
// nor waits for, nor blocks, the transactions on that execution.
var executionTransitionSettledSQL = mustReplace(executionTransitionSQL,
	"WHERE app = $1 AND id = $2 AND status = $3\n",
	"WHERE app = $1 AND id = $2 AND status = $3\n"+
		"      AND EXISTS (SELECT 1 FROM idem_steps WHERE app = $1 AND id = $14 AND status = $15 AND epoch = $16)\n")

// mustReplace is strings.Replace of old's one occurrence in s, which must
// be there.
func mustReplace(s, old, new string) string {
	if strings.Count(s, old) != 1 {
		panic("idem/pgstore: a derived statement's base changed: " + old)
	}
	return strings.Replace(s, old, new, 1)
}

// transitions are the conditional writes of ts, whose rows land in execs;
// with a guard, each applies only once the step update guard(i) names
// applied (executionTransitionSettledSQL).
func transitions(ts []store.Transition, guard func(i int) store.StepUpdate) (conditionalWrites, []store.Execution, error) {
	for _, t := range ts {
		if err := checkText(map[string]string{"app": t.App, "execution id": t.ID, "error": t.Error, "event type": t.Event.Type}); err != nil {
			return conditionalWrites{}, nil, execError("transition", t.App, t.ID, err)
		}
	}
	execs := make([]store.Execution, len(ts))
	return conditionalWrites{n: len(ts), write: func(b *pgx.Batch, i int) {
		t := ts[i]
		var output any // NULL keeps the stored output
		if t.Output != nil {
			output = t.Output
		}
		args := []any{t.App, t.ID, int16(t.From), int16(t.To), orNull(t.StartedAt), orNull(t.FinishedAt), output,
			t.Error, t.Progress, t.Event.Type, t.Event.Data, t.Event.Time, t.Reopen}
		if guard == nil {
			b.Queue(executionTransitionSQL, args...)
			return
		}
		u := guard(i)
		b.Queue(executionTransitionSettledSQL, append(args, u.ID, int16(u.Status), u.Epoch)...)
	}, read: func(b *pgx.Batch, i int) {
		b.Queue(executionGetSQL, ts[i].App, ts[i].ID)
	}, scan: func(row pgx.Row, i int) error {
		execs[i] = store.Execution{App: ts[i].App, ID: ts[i].ID}
		return scanExecution(row, &execs[i])
	}, fail: func(i int, err error) error {
		return execError("transition", ts[i].App, ts[i].ID, err)
	}}, execs, nil
}

// conditionalWrites are n conditional writes: write queues the i-th, which
// returns its row (scan reads it into place) or none when its condition did
// not hold; read queues the read of the i-th's row as it is; fail wraps
// the i-th's error.
type conditionalWrites struct {
	n           int
	write, read func(b *pgx.Batch, i int)
	scan        func(row pgx.Row, i int) error
	fail        func(i int, err error) error
}

// runAll runs w (built with err) and returns rows, which its scans filled,
// and which of its writes applied.
func runAll[T any](ctx context.Context, tx pgx.Tx, w conditionalWrites, rows []T, err error) ([]T, []bool, error) {
	if err != nil {
		return nil, nil, err
	}
	applied, err := w.run(ctx, tx)
	if err != nil {
		return nil, nil, err
	}
	return rows, applied, nil
}

// then is w followed by next: the writes of both, in one pipeline when run.
func (w conditionalWrites) then(next conditionalWrites) conditionalWrites {
	pick := func(i int) (conditionalWrites, int) {
		if i < w.n {
			return w, i
		}
		return next, i - w.n
	}
	return conditionalWrites{n: w.n + next.n,
		write: func(b *pgx.Batch, i int) { c, j := pick(i); c.write(b, j) },
		read:  func(b *pgx.Batch, i int) { c, j := pick(i); c.read(b, j) },
		scan:  func(row pgx.Row, i int) error { c, j := pick(i); return c.scan(row, j) },
		fail:  func(i int, err error) error { c, j := pick(i); return c.fail(j, err) },
	}
}

// run sends the writes in one pipeline, scanning the row each returns; a
// write that returns none (its condition did not hold, or there is no such
// row) is read again, in a second pipeline, so that the row says which.
// applied[i] says whether the i-th applied.
func (w conditionalWrites) run(ctx context.Context, tx pgx.Tx) ([]bool, error) {
	applied := make([]bool, w.n)
	var missed []int
	err := pipeline(ctx, tx, w.n, w.write, func(row pgx.Row, i int) error {
		err := w.scan(row, i)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			missed = append(missed, i)
		case err != nil:
			return w.fail(i, err)
		default:
			applied[i] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = pipeline(ctx, tx, len(missed), func(b *pgx.Batch, j int) { w.read(b, missed[j]) }, func(row pgx.Row, j int) error {
		if err := w.scan(row, missed[j]); err != nil {
			return w.fail(missed[j], err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// AppendEventTx implements store.ExecutionStore.
func (s *Store) AppendEventTx(ctx context.Context, tx pgx.Tx, app, executionID string, ev store.Event, progress int) (int64, error) {
	if err := checkText(map[string]string{"app": app, "execution id": executionID}); err != nil {
		return 0, execError("append event", app, executionID, err)
	}
	var seq int64
	if err := tx.QueryRow(ctx, executionProgressSQL, app, executionID, progress).Scan(&seq); err != nil {
		return 0, execError("append event", app, executionID, err)
	}
	return seq, execError("append event", app, executionID, insertEvent(ctx, tx, app, executionID, seq, ev))
}

// scanTask reads the columns of task_get.sql and tasks_list.sql.
func scanTask(row pgx.Row) (store.Task, error) {
	var t store.Task
	var deadline *time.Time
	var status int16
	if err := row.Scan(&t.ID, &t.Type, &t.Input, &t.ExternalRef, &deadline, &t.CurrentExecution, &status, &t.CreatedAt); err != nil {
		return store.Task{}, err
	}
	t.Deadline, t.Status = valueOf(deadline), store.ExecutionStatus(status)
	return t, nil
}

// GetTask implements store.ExecutionStore.
func (s *Store) GetTask(ctx context.Context, app, id string) (store.Task, error) {
	return getTask(ctx, s.pool, app, id)
}

// GetTaskTx implements store.ExecutionStore.
func (s *Store) GetTaskTx(ctx context.Context, tx pgx.Tx, app, id string) (store.Task, error) {
	return getTask(ctx, tx, app, id)
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func getTask(ctx context.Context, q rowQuerier, app, id string) (store.Task, error) {
	if !storable(app) || !storable(id) {
		return store.Task{}, execError("get task", app, id, store.ErrNotFound) // no such row can exist
	}
	t, err := scanTask(q.QueryRow(ctx, taskGetSQL, app, id))
	if err != nil {
		return store.Task{}, execError("get task", app, id, err)
	}
	t.App = app
	return t, nil
}

// GetExecution implements store.ExecutionStore.
func (s *Store) GetExecution(ctx context.Context, app, id string) (store.Execution, error) {
	return getExecution(ctx, s.pool, app, id)
}

// GetExecutionTx implements store.ExecutionStore.
func (s *Store) GetExecutionTx(ctx context.Context, tx pgx.Tx, app, id string) (store.Execution, error) {
	return getExecution(ctx, tx, app, id)
}

func getExecution(ctx context.Context, q rowQuerier, app, id string) (store.Execution, error) {
	if !storable(app) || !storable(id) {
		return store.Execution{}, execError("get execution", app, id, store.ErrNotFound)
	}
	e := store.Execution{App: app, ID: id}
	if err := scanExecution(q.QueryRow(ctx, executionGetSQL, app, id), &e); err != nil {
		return store.Execution{}, execError("get execution", app, id, err)
	}
	return e, nil
}

// ListTasks implements store.ExecutionStore.
func (s *Store) ListTasks(ctx context.Context, q store.TaskQuery) ([]store.Task, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("idem/pgstore: list tasks: limit %d, want at least 1", q.Limit)
	}
	if err := checkText(map[string]string{"app": q.App, "type": q.Type, "cursor id": q.AfterID, "excluded type": q.ExcludeType}); err != nil {
		return nil, fmt.Errorf("idem/pgstore: list tasks: %w", err)
	}
	var afterTime *time.Time
	if !q.AfterTime.IsZero() || q.AfterID != "" {
		afterTime = &q.AfterTime
	}
	rows, err := s.pool.Query(ctx, tasksListSQL, q.App, q.Type, int16(q.Status), afterTime, q.AfterID, q.Limit, q.ExcludeType)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list tasks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Task, error) {
		t, err := scanTask(r)
		t.App = q.App
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list tasks: %w", err)
	}
	return out, nil
}

// ListEvents implements store.ExecutionStore.
func (s *Store) ListEvents(ctx context.Context, app, executionID string, after int64, limit int) ([]store.Event, error) {
	if limit < 1 {
		return nil, fmt.Errorf("idem/pgstore: list events: limit %d, want at least 1", limit)
	}
	if !storable(app) || !storable(executionID) {
		return nil, execError("list events", app, executionID, store.ErrNotFound)
	}
	rows, err := s.pool.Query(ctx, executionEventsListSQL, app, executionID, after, limit)
	if err != nil {
		return nil, execError("list events", app, executionID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Event, error) {
		ev := store.Event{ExecutionID: executionID}
		err := r.Scan(&ev.Sequence, &ev.Type, &ev.Data, &ev.Time)
		return ev, err
	})
	if err != nil {
		return nil, execError("list events", app, executionID, err)
	}
	if len(out) == 0 {
		// No event after `after`: every execution has its first, so an
		// execution that shows none here may not exist (or be another
		// application's). Executions are never deleted, so this read
		// agrees with the first.
		if _, err := s.GetExecution(ctx, app, executionID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// OverdueExecutions implements store.ExecutionStore.
func (s *Store) OverdueExecutions(ctx context.Context, now time.Time, limit int) ([]store.Execution, error) {
	if limit < 1 {
		return nil, fmt.Errorf("idem/pgstore: overdue executions: limit %d, want at least 1", limit)
	}
	rows, err := s.pool.Query(ctx, executionsOverdueSQL, now, limit)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: overdue executions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Execution, error) {
		var e store.Execution
		err := scanExecution(scanPrefix{r, []any{&e.App, &e.ID}}, &e)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: overdue executions: %w", err)
	}
	return out, nil
}

// scanPrefix scans pre before the columns its caller asks for.
type scanPrefix struct {
	row pgx.Row
	pre []any
}

func (p scanPrefix) Scan(dst ...any) error { return p.row.Scan(append(p.pre, dst...)...) }

// GetExecutionsTx implements store.ExecutionStore in one statement,
// whatever the number of refs (sql/executions_get.sql): a worker's claim
// reads every execution it starts this way, and a statement per row costs
// PostgreSQL more than the rows do. When a ref has no row, the reads of
// each execution and its task, in one pipeline, say which is missing.
func (s *Store) GetExecutionsTx(ctx context.Context, tx pgx.Tx, refs []store.ExecutionRef) ([]store.Execution, []store.Task, error) {
	execs, tasks := make([]store.Execution, len(refs)), make([]store.Task, len(refs))
	apps, ids := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		if !storable(r.App) || !storable(r.ID) {
			return nil, nil, execError("get execution", r.App, r.ID, store.ErrNotFound) // no such row can exist
		}
		execs[i] = store.Execution{App: r.App, ID: r.ID}
		apps[i], ids[i] = r.App, r.ID
	}
	if len(refs) == 0 {
		return execs, tasks, nil
	}
	rows, err := tx.Query(ctx, executionsGetSQL, apps, ids)
	if err != nil {
		return nil, nil, execError("get executions", refs[0].App, refs[0].ID, err)
	}
	found := 0
	for rows.Next() {
		var n int64
		var e store.Execution
		var t store.Task
		if err := scanExecutionAndTask(scanPrefix{rows, []any{&n}}, &e, &t); err != nil {
			rows.Close()
			return nil, nil, execError("get executions", refs[0].App, refs[0].ID, err)
		}
		if n < 1 || int(n) > len(refs) {
			rows.Close()
			return nil, nil, execError("get executions", refs[0].App, refs[0].ID, fmt.Errorf("%w: row %d of %d", store.ErrCorrupt, n, len(refs)))
		}
		i := int(n) - 1
		e.App, e.ID, t.App = refs[i].App, refs[i].ID, refs[i].App
		execs[i], tasks[i] = e, t
		found++
	}
	if err := rows.Err(); err != nil {
		return nil, nil, execError("get executions", refs[0].App, refs[0].ID, err)
	}
	if found < len(refs) {
		// A row is missing: read them one by one, to name it.
		if err := getExecutionsOneByOne(ctx, tx, refs, execs, tasks); err != nil {
			return nil, nil, err
		}
	}
	return execs, tasks, nil
}

// scanExecutionAndTask scans a row of the columns of execution_get.sql and
// then of task_get.sql (executions_get.sql, claimed_executions_get.sql,
// after their own: see scanPrefix). The caller sets the App and ID fields.
func scanExecutionAndTask(row pgx.Row, e *store.Execution, t *store.Task) error {
	var (
		status, taskStatus          int16
		started, finished, deadline *time.Time
	)
	err := row.Scan(&e.TaskID, &e.Number, &status, &e.LastSequence, &e.CreatedAt, &started, &finished, &e.Output, &e.Error,
		&e.Progress, &e.Workflow, &e.Version,
		&t.ID, &t.Type, &t.Input, &t.ExternalRef, &deadline, &t.CurrentExecution, &taskStatus, &t.CreatedAt)
	if err != nil {
		return err
	}
	e.Status, e.StartedAt, e.FinishedAt = store.ExecutionStatus(status), valueOf(started), valueOf(finished)
	t.Deadline, t.Status = valueOf(deadline), store.ExecutionStatus(taskStatus)
	return nil
}

// getExecutionsOneByOne reads each execution of refs and its task
// (sql/task_of_execution.sql) in one pipeline: the error names the first
// row missing.
func getExecutionsOneByOne(ctx context.Context, tx pgx.Tx, refs []store.ExecutionRef, execs []store.Execution, tasks []store.Task) error {
	return pipeline(ctx, tx, 2*len(refs), func(b *pgx.Batch, j int) {
		r := refs[j/2]
		if j%2 == 0 {
			b.Queue(executionGetSQL, r.App, r.ID)
		} else {
			b.Queue(taskOfExecutionSQL, r.App, r.ID)
		}
	}, func(row pgx.Row, j int) error {
		i, r := j/2, refs[j/2]
		if j%2 == 0 {
			return execError("get execution", r.App, r.ID, scanExecution(row, &execs[i]))
		}
		t, err := scanTask(row)
		t.App = r.App
		tasks[i] = t
		return execError("get task", r.App, execs[i].TaskID, err)
	})
}

// pipeline sends n queued reads in one round trip and scans each row.
func pipeline(ctx context.Context, tx pgx.Tx, n int, queue func(b *pgx.Batch, i int), scan func(row pgx.Row, i int) error) error {
	if n == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for i := range n {
		queue(b, i)
	}
	res := tx.SendBatch(ctx, b)
	var err error
	for i := range n {
		if err = scan(res.QueryRow(), i); err != nil {
			break
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}
