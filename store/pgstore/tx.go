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
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("idem/pgstore: begin: %w", err)
	}
	committing := false
	defer func() {
		if committing {
			return
		}
		// fn returned an error or panicked. Roll back even if ctx is done,
		// so that the connection is returned to the pool clean.
		rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rbErr := tx.Rollback(rbCtx); rbErr != nil {
			s.logger.WarnContext(ctx, "idem/pgstore: rollback failed", slog.Any("error", rbErr))
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	committing = true
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, pgx.ErrTxCommitRollback) {
			// A statement in fn failed and fn went on: nothing committed.
			return fmt.Errorf("idem/pgstore: commit: the transaction had failed and was rolled back: %w", err)
		}
		return fmt.Errorf("idem/pgstore: commit (outcome unknown): %w", err)
	}
	return nil
}
