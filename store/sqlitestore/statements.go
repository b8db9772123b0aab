package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
)

var (
	//go:embed sql/claim.sql
	claimSQL string
	//go:embed sql/read.sql
	readSQL string
	//go:embed sql/get.sql
	getSQL string
	//go:embed sql/complete.sql
	completeSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/extend.sql
	extendSQL string
	//go:embed sql/mark_unknown.sql
	markUnknownSQL string
	//go:embed sql/sweep.sql
	sweepSQL string
)

// stmt is one of the store's statements, prepared once on the pool:
// compiling SQL costs about a third of a point read's CPU time with this
// driver. Inside a transaction it runs unprepared, so that a caller's
// transaction from any handle works.
type stmt struct {
	query string
	pool  *sql.Stmt
}

// statements are the store's prepared statements.
type statements struct {
	claim, read, get, complete, release, extend, markUnknown, sweep stmt
}

func prepare(ctx context.Context, db *sql.DB) (*statements, error) {
	st := &statements{}
	for _, s := range []struct {
		dst   *stmt
		query string
	}{
		{&st.claim, claimSQL}, {&st.read, readSQL}, {&st.get, getSQL}, {&st.complete, completeSQL},
		{&st.release, releaseSQL}, {&st.extend, extendSQL},
		{&st.markUnknown, markUnknownSQL}, {&st.sweep, sweepSQL},
	} {
		p, err := db.PrepareContext(ctx, s.query)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("preparing %q: %w", s.query, err)
		}
		*s.dst = stmt{query: s.query, pool: p}
	}
	return st, nil
}

func (st *statements) close() error {
	var errs []error
	for _, s := range []stmt{st.claim, st.read, st.get, st.complete, st.release, st.extend, st.markUnknown, st.sweep} {
		if s.pool != nil {
			errs = append(errs, s.pool.Close())
		}
	}
	return errors.Join(errs...)
}

// exec runs the statement in tx, or on the pool when tx is nil.
func (s stmt) exec(ctx context.Context, tx *sql.Tx, args ...any) (sql.Result, error) {
	if tx != nil {
		return tx.ExecContext(ctx, s.query, args...)
	}
	return s.pool.ExecContext(ctx, args...)
}

// queryRow runs the statement in tx, or on the pool when tx is nil.
func (s stmt) queryRow(ctx context.Context, tx *sql.Tx, args ...any) *sql.Row {
	if tx != nil {
		return tx.QueryRowContext(ctx, s.query, args...)
	}
	return s.pool.QueryRowContext(ctx, args...)
}
