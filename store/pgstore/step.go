package pgstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var (
	_ store.StepStore[pgx.Tx]   = (*Store)(nil)
	_ store.StepSettler[pgx.Tx] = (*Store)(nil)
)

var (
	//go:embed sql/step_insert.sql
	stepInsertSQL string
	//go:embed sql/step_claim.sql
	stepClaimSQL string
	//go:embed sql/step_update.sql
	stepUpdateSQL string
	//go:embed sql/step_get.sql
	stepGetSQL string
	//go:embed sql/steps_list.sql
	stepsListSQL string
	//go:embed sql/steps_expired.sql
	stepsExpiredSQL string
)

// scanStep reads the step columns every step statement returns, after
// the ones in pre.
func scanStep(row pgx.Row, st *store.Step, pre ...any) error {
	var status int16
	var lease *time.Time
	dst := append(pre, &st.ID, &st.ExecutionID, &st.Name, &st.Type, &st.Once, &status, &st.Epoch, &st.Attempts, &st.Owner,
		&lease, &st.DueAt, &st.CancelRequested, &st.Output, &st.Error, &st.IdempotencyKey, &st.CreatedAt)
	if err := row.Scan(dst...); err != nil {
		return err
	}
	st.Status, st.LeaseUntil = store.StepStatus(status), valueOf(lease)
	return nil
}

// AddStepTx implements store.StepStore.
func (s *Store) AddStepTx(ctx context.Context, tx pgx.Tx, st store.Step) error {
	if err := checkStep(st); err != nil {
		return execError("add step", st.App, st.ID, err)
	}
	return execError("add step", st.App, st.ID, insertOnce(ctx, tx, stepInsertSQL, stepInsertArgs(st)...))
}

// stepInsertArgs are sql/step_insert.sql's parameters for st.
func stepInsertArgs(st store.Step) []any {
	return []any{st.App, st.ID, st.ExecutionID, st.Name, st.Type, st.Once, int16(st.Status), st.DueAt, st.IdempotencyKey, st.CreatedAt}
}

// genericPlansSQL makes the transaction's next statements run with a
// generic plan, keeping its setting to put back; customPlansSQL puts it
// back. ClaimStepsTx runs its claim between them.
const (
	genericPlansSQL = `SELECT set_config('idem.plan_cache_mode', current_setting('plan_cache_mode'), true),
       set_config('plan_cache_mode', 'force_generic_plan', true)`
	customPlansSQL = `SELECT set_config('plan_cache_mode', current_setting('idem.plan_cache_mode'), true)`
)

// checkStep refuses a step that AddStepTx cannot write, before any
// statement runs.
func checkStep(st store.Step) error {
	if st.App == "" || st.ID == "" || st.ExecutionID == "" || st.Status == 0 {
		return errors.New("app, id, execution id and status are required")
	}
	return checkText(map[string]string{"app": st.App, "step id": st.ID, "execution id": st.ExecutionID, "name": st.Name,
		"type": st.Type, "idempotency key": st.IdempotencyKey})
}

var _ store.StepClaimReader[pgx.Tx] = (*Store)(nil)

// ClaimStepsTx implements store.StepStore in one statement
// (sql/step_claim.sql, FOR UPDATE SKIP LOCKED).
func (s *Store) ClaimStepsTx(ctx context.Context, tx pgx.Tx, c store.StepClaim) ([]store.Step, error) {
	steps, _, _, err := s.claimSteps(ctx, tx, c, false)
	return steps, err
}

// ClaimStepsReadTx implements store.StepClaimReader: the claim, then the
// executions and tasks of the steps it took (sql/claimed_executions_get.sql),
// in one pipeline. Should a step's row not come back (it cannot, in the
// same transaction), they are read with GetExecutionsTx, which names what
// is missing.
func (s *Store) ClaimStepsReadTx(ctx context.Context, tx pgx.Tx, c store.StepClaim) ([]store.Step, []store.Execution, []store.Task, error) {
	return s.claimSteps(ctx, tx, c, true)
}

// claimSteps claims c's steps and, with read, reads their executions and
// tasks in the same round trip.
func (s *Store) claimSteps(ctx context.Context, tx pgx.Tx, c store.StepClaim, read bool) ([]store.Step, []store.Execution, []store.Task, error) {
	if len(c.Types) == 0 || c.Owner == "" || c.Lease <= 0 || c.Limit < 0 {
		return nil, nil, nil, errors.New("idem/pgstore: claim steps: types, owner and lease are required, and no negative limit")
	}
	types := map[string]string{"owner": c.Owner}
	for _, t := range c.Types {
		types["type "+t] = t
	}
	if err := checkText(types); err != nil {
		return nil, nil, nil, fmt.Errorf("idem/pgstore: claim steps: %w", err)
	}
	fail := func(err error) ([]store.Step, []store.Execution, []store.Task, error) {
		return nil, nil, nil, fmt.Errorf("idem/pgstore: claim steps: %w", err)
	}
	// The claim runs with a generic plan (see sql/step_claim.sql), and the
	// transaction's setting is put back after it, all in one round trip.
	leaseUntil := c.Now.Add(c.Lease)
	b := &pgx.Batch{}
	b.Queue(genericPlansSQL)
	b.Queue(stepClaimSQL, c.Types, c.Now, c.Owner, leaseUntil, max(c.Limit, 1))
	b.Queue(customPlansSQL)
	if read {
		b.Queue(claimedExecutionsGetSQL, leaseUntil, c.Owner)
	}
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return fail(err)
	}
	rows, err := res.Query()
	if err != nil {
		return fail(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Step, error) {
		var st store.Step
		err := scanStep(r, &st, &st.App)
		return st, err
	})
	if err != nil {
		return fail(err)
	}
	if _, err := res.Exec(); err != nil {
		return fail(err)
	}
	slices.SortFunc(out, func(a, b store.Step) int {
		if c := a.DueAt.Compare(b.DueAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if !read {
		if err := res.Close(); err != nil {
			return fail(err)
		}
		return out, nil, nil, nil
	}
	rows, err = res.Query()
	if err != nil {
		return fail(err)
	}
	at := make(map[store.ExecutionRef]int, len(out)) // a claimed step not read yet: its place in out, by app and step id
	for i, st := range out {
		at[store.ExecutionRef{App: st.App, ID: st.ID}] = i
	}
	execs, tasks := make([]store.Execution, len(out)), make([]store.Task, len(out))
	for rows.Next() {
		var app, id string
		var e store.Execution
		var t store.Task
		if err := scanExecutionAndTask(scanPrefix{rows, []any{&app, &id}}, &e, &t); err != nil {
			rows.Close()
			return fail(err)
		}
		i, ok := at[store.ExecutionRef{App: app, ID: id}]
		if !ok {
			continue // held by the same owner token from an earlier claim
		}
		e.App, e.ID, t.App = app, out[i].ExecutionID, app
		execs[i], tasks[i] = e, t
		delete(at, store.ExecutionRef{App: app, ID: id})
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if err := res.Close(); err != nil {
		return fail(err)
	}
	if len(at) > 0 { // a step's row did not come back
		refs := make([]store.ExecutionRef, len(out))
		for i, st := range out {
			refs[i] = store.ExecutionRef{App: st.App, ID: st.ExecutionID}
		}
		if execs, tasks, err = s.GetExecutionsTx(ctx, tx, refs); err != nil {
			return nil, nil, nil, err
		}
	}
	return out, execs, tasks, nil
}

// UpdateStepTx implements store.StepStore.
func (s *Store) UpdateStepTx(ctx context.Context, tx pgx.Tx, u store.StepUpdate) (store.Step, bool, error) {
	steps, applied, err := s.UpdateStepsTx(ctx, tx, []store.StepUpdate{u})
	if err != nil {
		return store.Step{}, false, err
	}
	return steps[0], applied[0], nil
}

// UpdateStepsTx implements store.StepStore: the updates in one pipeline
// (pgx batch), then, for those that did not apply, the reads that say why,
// in another.
func (s *Store) UpdateStepsTx(ctx context.Context, tx pgx.Tx, us []store.StepUpdate) ([]store.Step, []bool, error) {
	w, steps, err := stepUpdates(us)
	return runAll(ctx, tx, w, steps, err)
}

// stepUpdates are the conditional writes of us, whose rows land in steps.
func stepUpdates(us []store.StepUpdate) (conditionalWrites, []store.Step, error) {
	for _, u := range us {
		if err := checkText(map[string]string{"app": u.App, "step id": u.ID, "owner": u.Owner, "error": u.Error}); err != nil {
			return conditionalWrites{}, nil, execError("update step", u.App, u.ID, err)
		}
	}
	steps := make([]store.Step, len(us))
	return conditionalWrites{n: len(us), write: func(b *pgx.Batch, i int) {
		u := us[i]
		var output any // NULL keeps the stored output
		if u.Output != nil {
			output = u.Output
		}
		b.Queue(stepUpdateSQL, u.App, u.ID, int16(u.From), u.Epoch, u.Owner, int16(u.Status), u.ClearClaim,
			orNull(u.LeaseUntil), orNull(u.DueAt), output, u.Error, u.CancelRequested)
	}, read: func(b *pgx.Batch, i int) {
		b.Queue(stepGetSQL, us[i].App, us[i].ID)
	}, scan: func(row pgx.Row, i int) error {
		steps[i] = store.Step{App: us[i].App}
		return scanStep(row, &steps[i])
	}, fail: func(i int, err error) error {
		return execError("update step", us[i].App, us[i].ID, err)
	}}, steps, nil
}

// SettleStepsTx implements store.StepSettler: the step updates and then
// the transitions in one pipeline, each transition conditional on its step
// (executionTransitionSettledSQL), and the reads of those that did not
// apply in another.
func (s *Store) SettleStepsTx(ctx context.Context, tx pgx.Tx, us []store.StepUpdate, ts []store.Transition, after []int) ([]store.Step, []bool, []store.Execution, []bool, error) {
	if err := store.CheckSettle(us, ts, after); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("idem/pgstore: %w", err)
	}
	uw, steps, err := stepUpdates(us)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tw, execs, err := transitions(ts, func(j int) store.StepUpdate { return us[after[j]] })
	if err != nil {
		return nil, nil, nil, nil, err
	}
	applied, err := uw.then(tw).run(ctx, tx)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return steps, applied[:len(us)], execs, applied[len(us):], nil
}

// GetStep implements store.StepStore.
func (s *Store) GetStep(ctx context.Context, app, id string) (store.Step, error) {
	return getStep(ctx, s.pool, app, id)
}

// GetStepTx implements store.StepStore.
func (s *Store) GetStepTx(ctx context.Context, tx pgx.Tx, app, id string) (store.Step, error) {
	return getStep(ctx, tx, app, id)
}

func getStep(ctx context.Context, q rowQuerier, app, id string) (store.Step, error) {
	if !storable(app) || !storable(id) {
		return store.Step{}, execError("get step", app, id, store.ErrNotFound)
	}
	st := store.Step{App: app}
	if err := scanStep(q.QueryRow(ctx, stepGetSQL, app, id), &st); err != nil {
		return store.Step{}, execError("get step", app, id, err)
	}
	return st, nil
}

// querySteps runs a step listing; each row's app is app, or read first
// when app is empty.
func (s *Store) querySteps(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, app, query string, args ...any) ([]store.Step, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Step, error) {
		st := store.Step{App: app}
		var pre []any
		if app == "" {
			pre = []any{&st.App}
		}
		err := scanStep(r, &st, pre...)
		return st, err
	})
}

// ListSteps implements store.StepStore.
func (s *Store) ListSteps(ctx context.Context, app, executionID string) ([]store.Step, error) {
	if _, err := s.GetExecution(ctx, app, executionID); err != nil {
		return nil, err
	}
	out, err := s.querySteps(ctx, s.pool, app, stepsListSQL, app, executionID)
	return out, execError("list steps", app, executionID, err)
}

// ListStepsTx implements store.StepStore.
func (s *Store) ListStepsTx(ctx context.Context, tx pgx.Tx, app, executionID string) ([]store.Step, error) {
	if _, err := s.GetExecutionTx(ctx, tx, app, executionID); err != nil {
		return nil, err
	}
	out, err := s.querySteps(ctx, tx, app, stepsListSQL, app, executionID)
	return out, execError("list steps", app, executionID, err)
}

// ExpiredSteps implements store.StepStore.
func (s *Store) ExpiredSteps(ctx context.Context, now time.Time, limit int) ([]store.Step, error) {
	if limit < 1 {
		return nil, fmt.Errorf("idem/pgstore: expired steps: limit %d, want at least 1", limit)
	}
	out, err := s.querySteps(ctx, s.pool, "", stepsExpiredSQL, now, limit)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: expired steps: %w", err)
	}
	return out, nil
}

// stepsChannel is the channel NotifySteps notifies and StepWakeups listens
// on. The payload is the store's schema.
const stepsChannel = "idem_steps"

var _ store.StepWaker = (*Store)(nil)

// NotifySteps implements store.StepWaker: pg_notify in a transaction of
// its own that writes nothing, so it does not hold up the commits of
// writing transactions as a NOTIFY inside them would (PostgreSQL
// serialises the commits of notifying transactions, WAL flush included).
func (s *Store) NotifySteps(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, current_schema())`, stepsChannel); err != nil {
		return fmt.Errorf("idem/pgstore: notify steps: %w", err)
	}
	return nil
}

// StepWakeups implements store.StepWaker with LISTEN, on a connection of
// the pool held for as long as ctx lasts, as OutboxWakeups does.
func (s *Store) StepWakeups(ctx context.Context) (<-chan struct{}, error) {
	return s.listen(ctx, stepsChannel, "step wakeups")
}
