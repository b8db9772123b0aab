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

	// db is the pool; byText holds the other statements of the engine's
	// paths (tasks, executions, steps, triggers, the inbox's rarer ones),
	// prepared on it by their SQL text, which on() runs them by.
	db     *sql.DB
	byText map[string]*sql.Stmt
}

// preparedByText are the statements on() runs prepared: those of every
// task, execution, step and trigger write, the inbox's parks, gaps and
// dead letters, and the application lookups of every request and event.
// Any other SQL text runs unprepared, as it would without on().
func preparedByText() []string {
	return []string{
		taskInsertSQL, taskGetSQL, taskStatusSQL, taskCurrentSQL, taskMoveSQL,
		executionInsertSQL, executionGetSQL, executionTransitionSQL, executionProgressSQL, executionEventInsertSQL,
		stepInsertSQL, stepClaimSQL, stepCandidateDispatchedSQL, stepCandidateExpiredSQL, stepUpdateSQL, stepGetSQL,
		triggerInsertSQL, triggerGetSQL, triggerReplaceSQL,
		inboxStatusSQL, parkSQL, unparkSQL, gapRecordSQL, deadLetterMarkSQL, deadLetterInsertSQL,
		appsQuery(appsByName), appsQuery(appsByToken),
	}
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
	st.db, st.byText = db, map[string]*sql.Stmt{}
	for _, q := range preparedByText() {
		p, err := db.PrepareContext(ctx, q)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("preparing %q: %w", q, err)
		}
		st.byText[q] = p
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
	for _, p := range st.byText {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// dbtx is what the store's functions run SQL on: the pool (*sql.DB), a
// transaction (*sql.Tx), or either through their prepared statements
// (statements.on).
type dbtx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// on returns tx (the pool when nil) as a dbtx that runs the SQL texts of
// preparedByText with their prepared statements (bound to tx, as txExec
// does), and any other text as it is: SQLite compiles a statement's text
// each time it runs otherwise, which was a third of the CPU time of a
// task's creation and run.
func (st *statements) on(tx *sql.Tx) dbtx { return preparedOn{st, tx} }

// preparedOn is statements.on's dbtx.
type preparedOn struct {
	st *statements
	tx *sql.Tx // nil: the pool
}

// prepared returns query as one of the store's prepared statements, if it
// is one.
func (p preparedOn) prepared(query string) (stmt, bool) {
	ps, ok := p.st.byText[query]
	return stmt{query: query, pool: ps}, ok
}

// text is where a text that is not prepared runs: tx, or the pool.
func (p preparedOn) text() dbtx {
	if p.tx == nil {
		return p.st.db
	}
	return p.tx
}

func (p preparedOn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s, ok := p.prepared(query); ok {
		return s.exec(ctx, p.tx, args...)
	}
	return p.text().ExecContext(ctx, query, args...)
}

func (p preparedOn) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s, ok := p.prepared(query); ok {
		return s.queryRow(ctx, p.tx, args...)
	}
	return p.text().QueryRowContext(ctx, query, args...)
}

func (p preparedOn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s, ok := p.prepared(query); ok {
		return s.rows(ctx, p.tx, args...)
	}
	return p.text().QueryContext(ctx, query, args...)
}

// exec runs the statement in tx, prepared (txExec), or on the pool when
// tx is nil.
func (s stmt) exec(ctx context.Context, tx *sql.Tx, args ...any) (sql.Result, error) {
	if tx != nil {
		return s.txExec(ctx, tx, args...)
	}
	return s.pool.ExecContext(ctx, args...)
}

// queryRow is exec for a one-row query.
func (s stmt) queryRow(ctx context.Context, tx *sql.Tx, args ...any) *sql.Row {
	if tx != nil {
		return s.txQueryRow(ctx, tx, args...)
	}
	return s.pool.QueryRowContext(ctx, args...)
}

// rows is exec for a query returning rows.
func (s stmt) rows(ctx context.Context, tx *sql.Tx, args ...any) (*sql.Rows, error) {
	if tx != nil {
		return s.txQuery(ctx, tx, args...)
	}
	return s.pool.QueryContext(ctx, args...)
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

// txQueryRow is txExec for a one-row query: the refusal of another
// handle's transaction is the row's error before any scan (Row.Err).
func (s stmt) txQueryRow(ctx context.Context, tx *sql.Tx, args ...any) *sql.Row {
	row := tx.StmtContext(ctx, s.pool).QueryRowContext(ctx, args...)
	if err := row.Err(); err != nil && strings.Contains(err.Error(), errOtherDB) {
		return tx.QueryRowContext(ctx, s.query, args...)
	}
	return row
}

// txQuery is txExec for a query returning rows.
func (s stmt) txQuery(ctx context.Context, tx *sql.Tx, args ...any) (*sql.Rows, error) {
	rows, err := tx.StmtContext(ctx, s.pool).QueryContext(ctx, args...)
	if err != nil && strings.Contains(err.Error(), errOtherDB) {
		return tx.QueryContext(ctx, s.query, args...)
	}
	return rows, err
}
