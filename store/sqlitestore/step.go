package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.StepStore[*sql.Tx] = (*Store)(nil)

var (
	//go:embed sql/step_insert.sql
	stepInsertSQL string
	//go:embed sql/step_claim.sql
	stepClaimSQL string
	//go:embed sql/step_candidate_dispatched.sql
	stepCandidateDispatchedSQL string
	//go:embed sql/step_candidate_expired.sql
	stepCandidateExpiredSQL string
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
func scanStep(row interface{ Scan(...any) error }, st *store.Step, pre ...any) error {
	var once, cancel, status, lease, due, created int64
	dst := append(pre, &st.ID, &st.ExecutionID, &st.Name, &st.Type, &once, &status, &st.Epoch, &st.Attempts, &st.Owner,
		&lease, &due, &cancel, &st.Output, &st.Error, &st.IdempotencyKey, &created)
	if err := row.Scan(dst...); err != nil {
		return err
	}
	st.Once, st.CancelRequested, st.Status = once != 0, cancel != 0, store.StepStatus(status)
	st.LeaseUntil, st.DueAt, st.CreatedAt = fromMicros(lease), fromMicros(due), fromMicros(created)
	return nil
}

// AddStepTx implements store.StepStore.
func (s *Store) AddStepTx(ctx context.Context, tx *sql.Tx, st store.Step) error {
	if tx == nil {
		return execError("add step", st.App, st.ID, errors.New("tx is nil"))
	}
	if st.App == "" || st.ID == "" || st.ExecutionID == "" || st.Status == 0 {
		return execError("add step", st.App, st.ID, errors.New("app, id, execution id and status are required"))
	}
	return execError("add step", st.App, st.ID, insertOnce(ctx, s.stmts.on(tx), stepInsertSQL, sql.Named("app", st.App), sql.Named("id", st.ID),
		sql.Named("execution_id", st.ExecutionID), sql.Named("name", st.Name), sql.Named("type", st.Type), sql.Named("once", st.Once),
		sql.Named("status", int(st.Status)), sql.Named("due_at", toMicros(st.DueAt)), sql.Named("idempotency_key", st.IdempotencyKey),
		sql.Named("created_at", toMicros(st.CreatedAt))))
}

// ClaimStepsTx implements store.StepStore: one step at a time, the oldest
// of a few index seeks each, in the transaction that holds the database's
// one writer.
func (s *Store) ClaimStepsTx(ctx context.Context, tx *sql.Tx, c store.StepClaim) ([]store.Step, error) {
	if tx == nil {
		return nil, errors.New("sqlitestore: claim steps: tx is nil")
	}
	if len(c.Types) == 0 || c.Owner == "" || c.Lease <= 0 || c.Limit < 0 {
		return nil, errors.New("sqlitestore: claim steps: types, owner and lease are required, and no negative limit")
	}
	types, err := json.Marshal(c.Types)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim steps: %w", err)
	}
	var out []store.Step
	for range max(c.Limit, 1) {
		st, ok, err := claimStep(ctx, s.stmts.on(tx), c, string(types))
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: claim steps: %w", err)
		}
		if !ok {
			break
		}
		out = append(out, st)
	}
	return out, nil
}

// claimStep claims the oldest claimable step; types is c.Types as JSON.
func claimStep(ctx context.Context, tx dbtx, c store.StepClaim, types string) (store.Step, bool, error) {
	now := toMicros(c.Now)
	// The oldest candidate: the first due dispatched step of each type (an
	// index seek each), and the first expired one.
	type cand struct {
		app, id string
		due     int64
	}
	var best *cand
	consider := func(query string, args ...any) error {
		var k cand
		err := tx.QueryRowContext(ctx, query, args...).Scan(&k.app, &k.id, &k.due)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		}
		if best == nil || k.due < best.due || (k.due == best.due && k.id < best.id) {
			best = &k
		}
		return nil
	}
	for _, typ := range c.Types {
		if err := consider(stepCandidateDispatchedSQL, sql.Named("type", typ), sql.Named("now", now)); err != nil {
			return store.Step{}, false, interpretError(err)
		}
	}
	if err := consider(stepCandidateExpiredSQL, sql.Named("types", types), sql.Named("now", now)); err != nil {
		return store.Step{}, false, interpretError(err)
	}
	if best == nil {
		return store.Step{}, false, nil
	}
	var st store.Step
	err := scanStep(tx.QueryRowContext(ctx, stepClaimSQL, sql.Named("app", best.app), sql.Named("id", best.id), sql.Named("owner", c.Owner),
		sql.Named("now", now), sql.Named("lease_until", toMicros(c.Now.Add(c.Lease)))), &st, &st.App)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Step{}, false, nil
	case err != nil:
		return store.Step{}, false, interpretError(err)
	}
	return st, true, nil
}

// UpdateStepTx implements store.StepStore.
func (s *Store) UpdateStepTx(ctx context.Context, tx *sql.Tx, u store.StepUpdate) (store.Step, bool, error) {
	if tx == nil {
		return store.Step{}, false, execError("update step", u.App, u.ID, errors.New("tx is nil"))
	}
	st := store.Step{App: u.App}
	err := scanStep(s.stmts.on(tx).QueryRowContext(ctx, stepUpdateSQL, sql.Named("app", u.App), sql.Named("id", u.ID),
		sql.Named("from", int(u.From)), sql.Named("epoch", u.Epoch), sql.Named("owner", u.Owner), sql.Named("status", int(u.Status)),
		sql.Named("clear", u.ClearClaim), sql.Named("lease_until", toMicros(u.LeaseUntil)), sql.Named("due_at", toMicros(u.DueAt)),
		sql.Named("has_output", u.Output != nil), sql.Named("output", u.Output), sql.Named("error", u.Error),
		sql.Named("cancel", u.CancelRequested)), &st)
	if errors.Is(err, sql.ErrNoRows) {
		err = scanStep(s.stmts.on(tx).QueryRowContext(ctx, stepGetSQL, sql.Named("app", u.App), sql.Named("id", u.ID)), &st)
		return st, false, execError("update step", u.App, u.ID, interpretError(err))
	}
	if err != nil {
		return store.Step{}, false, execError("update step", u.App, u.ID, interpretError(err))
	}
	return st, true, nil
}

// GetStep implements store.StepStore.
func (s *Store) GetStep(ctx context.Context, app, id string) (store.Step, error) {
	return s.getStep(ctx, s.stmts.on(nil), app, id)
}

// GetStepTx implements store.StepStore.
func (s *Store) GetStepTx(ctx context.Context, tx *sql.Tx, app, id string) (store.Step, error) {
	if tx == nil {
		return store.Step{}, execError("get step", app, id, errors.New("tx is nil"))
	}
	return s.getStep(ctx, s.stmts.on(tx), app, id)
}

func (s *Store) getStep(ctx context.Context, q querier, app, id string) (store.Step, error) {
	st := store.Step{App: app}
	if err := scanStep(q.QueryRowContext(ctx, stepGetSQL, sql.Named("app", app), sql.Named("id", id)), &st); err != nil {
		return store.Step{}, execError("get step", app, id, interpretError(err))
	}
	return st, nil
}

// rowsQuerier is a *sql.DB or a *sql.Tx.
type rowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// querySteps runs a step listing; each row's app is app, or read first
// when app is empty.
func (s *Store) querySteps(ctx context.Context, q rowsQuerier, app, query string, args ...any) ([]store.Step, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.Step
	for rows.Next() {
		st := store.Step{App: app}
		var pre []any
		if app == "" {
			pre = []any{&st.App}
		}
		if err := scanStep(rows, &st, pre...); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, st)
	}
	return out, interpretError(rows.Err())
}

// ListSteps implements store.StepStore.
func (s *Store) ListSteps(ctx context.Context, app, executionID string) ([]store.Step, error) {
	if _, err := s.GetExecution(ctx, app, executionID); err != nil {
		return nil, err
	}
	out, err := s.querySteps(ctx, s.db, app, stepsListSQL, sql.Named("app", app), sql.Named("execution_id", executionID))
	return out, execError("list steps", app, executionID, err)
}

// ListStepsTx implements store.StepStore.
func (s *Store) ListStepsTx(ctx context.Context, tx *sql.Tx, app, executionID string) ([]store.Step, error) {
	if _, err := s.GetExecutionTx(ctx, tx, app, executionID); err != nil {
		return nil, err
	}
	out, err := s.querySteps(ctx, tx, app, stepsListSQL, sql.Named("app", app), sql.Named("execution_id", executionID))
	return out, execError("list steps", app, executionID, err)
}

// ExpiredSteps implements store.StepStore.
func (s *Store) ExpiredSteps(ctx context.Context, now time.Time, limit int) ([]store.Step, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitestore: expired steps: limit %d, want at least 1", limit)
	}
	out, err := s.querySteps(ctx, s.db, "", stepsExpiredSQL, sql.Named("now", toMicros(now)), sql.Named("limit", limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: expired steps: %w", err)
	}
	return out, nil
}
