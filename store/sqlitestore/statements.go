package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
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
// driver. Inside a transaction it is bound to the transaction's
// connection, where database/sql keeps it prepared across transactions
// (txExec); a caller's transaction from another handle on the file runs
// the SQL unprepared instead.
type stmt struct {
	query string
	pool  *sql.Stmt
}

// statements are the store's prepared statements.
type statements struct {
	claim, read, get, complete, release, extend, markUnknown, sweep stmt
	// The inbox's statements that run for every event, in the caller's
	// transaction (see txExec).
	inboxRecord, streamGet, streamPut stmt
	// The outbox's per-intent statements: enqueue (in the caller's
	// transaction), claim (in the store's), and the fenced results.
	outboxStreamSeq, outboxEnqueue, outboxPromote, outboxClaim stmt
	outboxComplete, outboxRetry, outboxKill                    stmt
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
		{&st.inboxRecord, inboxRecordSQL}, {&st.streamGet, streamGetSQL}, {&st.streamPut, streamPutSQL},
		{&st.outboxStreamSeq, outboxStreamSeqSQL}, {&st.outboxEnqueue, outboxEnqueueSQL},
		{&st.outboxPromote, outboxPromoteSQL}, {&st.outboxClaim, outboxClaimSQL},
		{&st.outboxComplete, outboxCompleteSQL}, {&st.outboxRetry, outboxRetrySQL}, {&st.outboxKill, outboxKillSQL},
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
	for _, s := range []stmt{st.claim, st.read, st.get, st.complete, st.release, st.extend, st.markUnknown, st.sweep,
		st.inboxRecord, st.streamGet, st.streamPut, st.outboxStreamSeq, st.outboxEnqueue, st.outboxPromote,
		st.outboxClaim, st.outboxComplete, st.outboxRetry, st.outboxKill} {
		if s.pool != nil {
			errs = append(errs, s.pool.Close())
		}
	}
	return errors.Join(errs...)
}

// exec runs the statement in tx, prepared (txExec), or on the pool when
// tx is nil.
func (s stmt) exec(ctx context.Context, tx *sql.Tx, args ...any) (sql.Result, error) {
	if tx != nil {
		return s.txExec(ctx, tx, args...)
	}
	return s.pool.ExecContext(ctx, args...)
}

// queryRowScan runs the one-row statement in tx, prepared
// (txQueryRowScan), or on the pool when tx is nil, and scans its row into
// dst.
func (s stmt) queryRowScan(ctx context.Context, tx *sql.Tx, args []any, dst ...any) error {
	if tx != nil {
		return s.txQueryRowScan(ctx, tx, args, dst...)
	}
	return s.pool.QueryRowContext(ctx, args...).Scan(dst...)
}

// errOtherDB is how database/sql refuses a statement prepared on another
// *sql.DB than the transaction's.
const errOtherDB = "statement from different database"

// txExec runs the statement in tx (which must not be nil), prepared: the
// pool's statement is bound to tx's connection, where database/sql keeps it
// prepared across transactions. A transaction from another handle on the
// file cannot use it, and runs the SQL unprepared instead.
func (s stmt) txExec(ctx context.Context, tx *sql.Tx, args ...any) (sql.Result, error) {
	r, err := tx.StmtContext(ctx, s.pool).ExecContext(ctx, args...)
	if err != nil && strings.Contains(err.Error(), errOtherDB) {
		return tx.ExecContext(ctx, s.query, args...)
	}
	return r, err
}

// txQueryRowScan is txExec for a one-row query scanned into dst.
func (s stmt) txQueryRowScan(ctx context.Context, tx *sql.Tx, args []any, dst ...any) error {
	err := tx.StmtContext(ctx, s.pool).QueryRowContext(ctx, args...).Scan(dst...)
	if err != nil && strings.Contains(err.Error(), errOtherDB) {
		return tx.QueryRowContext(ctx, s.query, args...).Scan(dst...)
	}
	return err
}

// txQuery is txExec for a query returning rows.
func (s stmt) txQuery(ctx context.Context, tx *sql.Tx, args ...any) (*sql.Rows, error) {
	rows, err := tx.StmtContext(ctx, s.pool).QueryContext(ctx, args...)
	if err != nil && strings.Contains(err.Error(), errOtherDB) {
		return tx.QueryContext(ctx, s.query, args...)
	}
	return rows, err
}
