package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// rollbackTimeout bounds a rollback, which runs even when the caller's
// context is done.
const rollbackTimeout = 10 * time.Second

// InTx implements store.TxStore: it begins a transaction on the pool (READ
// COMMITTED unless the server's default says otherwise), calls fn with it,
// and commits when fn returns nil. When fn returns an error or panics, the
// transaction is rolled back and the error (or panic) is passed on as is.
//
// An error from the commit leaves the outcome unknown (the server may have
// committed before the connection failed): resolve it with Get, never by
// running fn again. The one exception is pgx.ErrTxCommitRollback (wrapped):
// a statement in fn had failed, so the server rolled everything back.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	tx, err := s.BeginTx(ctx)
	if err != nil {
		return err
	}
	committing := false
	defer func() {
		if !committing { // fn returned an error or panicked
			_ = s.RollbackTx(ctx, tx)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	committing = true
	return s.CommitTx(ctx, tx)
}

// BeginTx begins a transaction as InTx does, for the caller to end with
// CommitTx or RollbackTx (one of them, always: the transaction holds a
// pooled connection until then).
//
// The transaction is a pgx.Tx whose BEGIN goes out with its first
// statement, and whose last writes of idem's own go out with its COMMIT,
// in one pipeline each: a transaction costs one round trip per statement,
// not two more for BEGIN and COMMIT. BeginTx itself only takes a
// connection from the pool, so a server that is down shows at the first
// statement.
func (s *Store) BeginTx(ctx context.Context) (pgx.Tx, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: begin: %w", err)
	}
	return newLazyTx(conn), nil
}

// CommitTx commits tx. An error leaves the outcome unknown (the server may
// have committed before the connection failed): resolve it with Get. The
// one exception is pgx.ErrTxCommitRollback (wrapped): a statement in the
// transaction had failed, so the server rolled everything back. When that
// statement was a write queued for the COMMIT, the error also matches what
// interpretError made of it (lazyTx): store.ErrFenced for a CompleteTx
// whose fence was gone, store.ErrDuplicate for a RecordEventAtCommitTx of
// an event recorded before.
func (s *Store) CommitTx(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, pgx.ErrTxCommitRollback) {
			return fmt.Errorf("idem/pgstore: commit: the transaction had failed and was rolled back: %w", err)
		}
		return fmt.Errorf("idem/pgstore: commit (outcome unknown): %w", err)
	}
	return nil
}

// RollbackTx rolls tx back even if ctx is done, so that the connection
// goes back to the pool clean.
func (s *Store) RollbackTx(ctx context.Context, tx pgx.Tx) error {
	rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := tx.Rollback(rbCtx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		s.logger.WarnContext(ctx, "idem/pgstore: rollback failed", slog.Any("error", err))
		return fmt.Errorf("idem/pgstore: rollback: %w", err)
	}
	return nil
}
