package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lazyTx is the transaction InTx and BeginTx hand out. It is a pgx.Tx
// that saves two round trips of pgx's own:
//
//   - its BEGIN goes out with its first statement, in one pipeline
//     (pgx.Batch.BeginTx), instead of in a round trip of its own;
//   - a write that needs no answer (see later) is queued and goes out with
//     the next statement or with the COMMIT, in one pipeline.
//
// A transaction of n statements thus costs n round trips where it cost
// n+2. Nothing else changes: the statements run in the order they were
// issued, in one transaction on one connection, and a queued write that
// fails fails the statement or the commit it went out with (the server
// skips the rest of a pipeline after an error, so nothing after it runs,
// and a commit after it never happens).
//
// Once the transaction is begun, everything goes to the pgx.Tx that began
// it. Methods whose use needs the transaction to exist (Begin, CopyFrom,
// Prepare, LargeObjects, Conn) send what is pending first, and from then on
// nothing is queued: a savepoint or the raw connection would otherwise see
// the statements out of order.
//
// Like any pgx.Tx it is used by one goroutine at a time.
type lazyTx struct {
	conn *pgxpool.Conn
	// tx is the transaction once begun: from the batch whose first query
	// began it. A failed begin leaves a closed one.
	tx pgx.Tx
	// pending are the writes later queued, sent before anything else;
	// watched holds, for each, where to report its failure (laterWatched),
	// or nil.
	pending []*pgx.QueuedQuery
	watched []*error
	// direct is set once the caller may reach the connection around tx
	// (a savepoint, the raw connection): nothing is queued any more.
	direct bool
	closed bool
}

var _ pgx.Tx = (*lazyTx)(nil)

// errQueued wraps the failure of a queued write, reported by the statement
// or commit it went out with.
var errQueued = errors.New("idem/pgstore: a write queued earlier in the transaction failed")

func newLazyTx(conn *pgxpool.Conn) *lazyTx { return &lazyTx{conn: conn} }

// later runs a write whose only answer is an error in tx: queued when tx
// is a lazyTx that may queue, so that it goes out with the next statement
// or the commit; otherwise now. A caller that needs rows affected or
// returned must not use it.
func later(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	if queue(tx, nil, sql, args) {
		return nil
	}
	_, err := tx.Exec(ctx, sql, args...)
	return err
}

// laterWatched is later, and also returns failed, which reports the
// failure of the write once it has gone out with a later statement or the
// commit, or the failure that kept it from running (of a write queued
// ahead of it, or pgx's refusal of the whole pipeline, which it reports on
// every result, BEGIN's included, when it cannot prepare or encode any of
// its statements), and nil before that or when it succeeded: the caller
// learns that its statement did not run, whatever the statement it went
// out with reports. Where the write runs at once, its failure is err, and
// failed reports nil.
func laterWatched(ctx context.Context, tx pgx.Tx, sql string, args ...any) (failed func() error, err error) {
	var ferr error
	if queue(tx, &ferr, sql, args) {
		return func() error { return ferr }, nil
	}
	_, err = tx.Exec(ctx, sql, args...)
	return func() error { return nil }, err
}

// queue queues sql in tx, with where to report its failure (or nil), when
// tx is a lazyTx that may queue, and reports whether it did.
func queue(tx pgx.Tx, failed *error, sql string, args []any) bool {
	t, ok := tx.(*lazyTx)
	if !ok || t.closed || t.direct {
		return false
	}
	t.pending = append(t.pending, &pgx.QueuedQuery{SQL: sql, Arguments: args})
	t.watched = append(t.watched, failed)
	return true
}

// heads is how many queries go out ahead of the caller's: BEGIN when the
// transaction is not begun yet, and the pending writes.
func (t *lazyTx) heads() int {
	n := len(t.pending)
	if t.tx == nil {
		n++
	}
	return n
}

// send sends b's queries after the heads, in one pipeline, and returns its
// results positioned at b's first query. The heads' results are read
// here: when one failed, every result of b reports that failure.
func (t *lazyTx) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.closed {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	heads := t.heads()
	if heads == 0 {
		return t.tx.SendBatch(ctx, b)
	}
	all := &pgx.Batch{}
	beginning := t.tx == nil
	if beginning {
		all.BeginTx(pgx.TxOptions{})
	}
	all.QueuedQueries = append(all.QueuedQueries, t.pending...)
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	watched := t.watched
	t.pending, t.watched = nil, nil
	var br pgx.BatchResults
	if beginning {
		br = t.conn.SendBatch(ctx, all)
		t.tx = br.Tx()
	} else {
		br = t.tx.SendBatch(ctx, all)
	}
	for i := range heads {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			if !beginning || i > 0 {
				err = fmt.Errorf("%w: %w", errQueued, interpretError(err))
			}
			// The write that failed and those after it, which the
			// server skipped: each watcher learns what stopped it.
			first := i
			if beginning {
				first = max(i-1, 0)
			}
			for _, w := range watched[first:] {
				if w != nil {
					*w = err
				}
			}
			return pgx.FailedBatchResults(b, err)
		}
	}
	return br
}

// flush sends the heads alone, when there are any.
func (t *lazyTx) flush(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	if t.heads() == 0 {
		return nil
	}
	return t.send(ctx, &pgx.Batch{}).Close()
}

// Exec implements pgx.Tx. A statement without arguments may hold several
// statements (pgx sends it with the simple protocol), which a pipeline
// cannot: it goes out after the heads.
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	if t.heads() == 0 || len(args) == 0 && strings.Contains(sql, ";") {
		if err := t.flush(ctx); err != nil {
			return pgconn.CommandTag{}, err
		}
		return t.tx.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.send(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query implements pgx.Tx: the rows come from the pipeline that sent the
// heads, which closes with them.
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed {
		return errRows{pgx.ErrTxClosed}, pgx.ErrTxClosed
	}
	if t.heads() == 0 {
		return t.tx.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.send(ctx, b)
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow implements pgx.Tx.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !t.closed && t.heads() == 0 {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		return errRows{err}
	}
	return queryRow{rows}
}

// SendBatch implements pgx.Tx: b goes out after the heads, in the same
// pipeline.
func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.send(ctx, b)
}

// Commit implements pgx.Tx: the heads and COMMIT in one pipeline. A
// transaction in which nothing was sent has nothing to commit. When a
// queued write failed, the server skipped the COMMIT: the transaction is
// rolled back here and the error wraps pgx.ErrTxCommitRollback, since its
// outcome is known.
func (t *lazyTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	defer t.release()
	if t.tx == nil && len(t.pending) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue("commit")
	br := t.send(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if t.conn.Conn().PgConn().TxStatus() == 'E' { // failed before the COMMIT ran
			_, _ = t.conn.Exec(ctx, "rollback")
			return fmt.Errorf("%w: %w", pgx.ErrTxCommitRollback, err)
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback implements pgx.Tx. Pending writes are dropped; a transaction
// not begun has nothing to roll back.
func (t *lazyTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	defer t.release()
	t.pending, t.watched = nil, nil
	if t.tx == nil {
		return nil
	}
	return t.tx.Rollback(ctx)
}

// release ends t and returns its connection to the pool, which destroys
// it unless it is idle outside a transaction.
func (t *lazyTx) release() {
	t.closed = true
	t.pending, t.watched = nil, nil
	t.conn.Release()
}

// begin sends the heads and stops queuing: the caller reaches the
// transaction around t from now on.
func (t *lazyTx) begin(ctx context.Context) error {
	err := t.flush(ctx)
	t.direct = true
	return err
}

// Begin implements pgx.Tx with a savepoint, as pgx does.
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// CopyFrom implements pgx.Tx.
func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, src)
}

// Prepare implements pgx.Tx.
func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

// LargeObjects implements pgx.Tx. It begins the transaction first, without
// a context to bound that round trip; a failure shows in the large
// objects' own calls. Called on a transaction that ended before anything
// was sent, it returns a zero LargeObjects, which must not be used.
func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	_ = t.begin(context.Background())
	if t.tx == nil {
		return pgx.LargeObjects{}
	}
	return t.tx.LargeObjects()
}

// Conn implements pgx.Tx: the connection, with the transaction begun.
func (t *lazyTx) Conn() *pgx.Conn {
	_ = t.begin(context.Background())
	return t.conn.Conn()
}

// batchRows are rows read from a pipeline, which is closed with them.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// queryRow is pgx's QueryRow over rows: the first row scanned, then the
// rows closed; no row is pgx.ErrNoRows.
type queryRow struct{ rows pgx.Rows }

func (r queryRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if err := r.rows.Err(); err != nil {
		return err
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errRows are rows, and a row, that only report err.
type errRows struct{ err error }

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return nil }
func (r errRows) TypeMap() *pgtype.Map                         { return nil }
