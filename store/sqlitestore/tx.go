package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// InTx begins a read-write transaction (BEGIN IMMEDIATE on a handle from
// Open: it holds the database's write lock from the start, so the caller's
// reads and writes never fail halfway on a lock upgrade), calls fn with it,
// and commits when fn returns nil. When fn returns an error or panics, the
// transaction is rolled back, and InTx returns fn's error (or the panic
// continues).
//
// An error from the commit itself leaves the outcome unknown: resolve it
// with Get, never by running fn again.
//
// SQLite has one writer per file, so the transaction blocks every other
// write, in this process and in others, until it ends: keep fn short, and
// do not call this store's non-Tx methods from fn (they wait for the write
// lock that fn holds, and fail after the busy timeout).
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	fnFailed := false
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		err := fn(ctx, tx)
		fnFailed = err != nil
		return err
	})
	if err != nil && !fnFailed {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	return err
}

// inTx is InTx without the package prefix on its own errors.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return err
	}
	defer unlock()

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", interpretError(err))
	}
	done := false
	defer func() {
		if done {
			return
		}
		// fn failed or panicked: undo its writes. ErrTxDone means the
		// context ended and database/sql already rolled back.
		if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
			s.logger.Error("sqlitestore: rollback failed", "error", rbErr)
		}
	}()

	if err := fn(ctx, tx); err != nil {
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit (outcome unknown: read the record again): %w", interpretError(err))
	}
	return nil
}

// CompleteTx is Complete inside tx: the completion commits or rolls back
// with the caller's writes. tx should come from InTx (or from a handle
// opened with Open, whose transactions take the write lock at BEGIN).
// Returns store.ErrFenced when the fence does not match; the caller must
// then roll back.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, p store.CompleteParams) error {
	if tx == nil {
		return opError("complete", p.Key, errors.New("tx is nil"))
	}
	return opError("complete", p.Key, s.complete(ctx, tx, p))
}

// lockWrite waits for this store's writer turn (see Store.writer), at most
// the busy timeout, and returns the function that gives it back.
func (s *Store) lockWrite(ctx context.Context) (unlock func(), err error) {
	select {
	case s.writer <- struct{}{}:
		return s.unlockWrite, nil
	default:
	}
	var timeout <-chan time.Time
	if s.busyTimeout > 0 {
		t := time.NewTimer(s.busyTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case s.writer <- struct{}{}:
		return s.unlockWrite, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timeout:
		return nil, errWriteLockTimeout
	}
}

func (s *Store) unlockWrite() { <-s.writer }

// withWrite runs fn, one autocommit statement on the pool, in this store's
// writer turn.
func (s *Store) withWrite(ctx context.Context, fn func() error) error {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}
