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
	tx, err := s.beginTx(ctx)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done { // fn failed or panicked: undo its writes
			s.rollbackTx(tx)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	done = true
	return s.commitTx(tx)
}

// BeginTx begins a transaction as InTx does (BEGIN IMMEDIATE, in this
// store's writer turn), for the caller to end with CommitTx or RollbackTx:
// always one of them, since every other write of the store waits until
// then.
func (s *Store) BeginTx(ctx context.Context) (*sql.Tx, error) {
	tx, err := s.beginTx(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return tx, nil
}

// CommitTx commits a transaction from BeginTx and gives the writer turn
// back. An error leaves the outcome unknown: resolve it with Get.
func (s *Store) CommitTx(_ context.Context, tx *sql.Tx) error {
	if err := s.commitTx(tx); err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	return nil
}

// RollbackTx rolls back a transaction from BeginTx and gives the writer
// turn back.
func (s *Store) RollbackTx(_ context.Context, tx *sql.Tx) error {
	if err := s.rollbackTx(tx); err != nil {
		return fmt.Errorf("sqlitestore: %w", err)
	}
	return nil
}

// beginTx takes the writer turn and begins; the turn is given back by
// commitTx or rollbackTx.
func (s *Store) beginTx(ctx context.Context) (*sql.Tx, error) {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("begin: %w", interpretError(err))
	}
	s.open.Store(tx, unlock)
	return tx, nil
}

// end gives back the writer turn of tx, and reports whether tx was begun
// by beginTx and not ended yet.
func (s *Store) end(tx *sql.Tx) bool {
	unlock, ok := s.open.LoadAndDelete(tx)
	if ok {
		unlock.(func())()
	}
	return ok
}

var errNotBegun = errors.New("the transaction was not begun by BeginTx, or has ended")

func (s *Store) commitTx(tx *sql.Tx) error {
	if tx == nil {
		return errNotBegun
	}
	err := tx.Commit()
	if !s.end(tx) {
		return errNotBegun
	}
	if err != nil {
		return fmt.Errorf("commit (outcome unknown: read the record again): %w", interpretError(err))
	}
	return nil
}

func (s *Store) rollbackTx(tx *sql.Tx) error {
	if tx == nil {
		return errNotBegun
	}
	// ErrTxDone: the context ended and database/sql already rolled back.
	err := tx.Rollback()
	if !s.end(tx) {
		return errNotBegun
	}
	if err != nil && !errors.Is(err, sql.ErrTxDone) {
		s.logger.Error("sqlitestore: rollback failed", "error", err)
		return fmt.Errorf("rollback: %w", err)
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
