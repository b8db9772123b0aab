package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
)

// groupItem is one write waiting for a group commit.
type groupItem struct {
	ctx context.Context
	// key is the record's key (for tests).
	key string
	fn  func(ctx context.Context, tx *sql.Tx) error
	// lazy is a write that need not be durable on its own (a
	// transactional claim, store.ClaimParams.Transactional).
	lazy bool
	err  error
	done chan struct{}
}

// group holds the writes waiting for the writer turn.
type group struct {
	mu    sync.Mutex
	queue []*groupItem
	// commits counts the groups committed (for tests); lazyCommits those
	// of them committed without a sync (beginLazy).
	commits, lazyCommits atomic.Int64
}

// groupCommitting, when set (by tests), runs when a group's writes have
// run and its commit has not, with their keys: the moment a crash test
// kills the process with a group in flight.
var groupCommitting func(keys []string)

// groupTimeout bounds a group's transaction.
const groupTimeout = 30 * time.Second

// grouped runs fn, a short write of a request key (claim, complete,
// extend, release, mark), in a transaction it may share with the writes
// that other callers make while the writer turn is taken: group commit.
// SQLite syncs once per commit, so writes that arrive together pay for
// one sync instead of one each; a write that arrives alone runs at once,
// as it would without groups (autocommit, tx nil). In a group the writes
// run one after another in the shared transaction; when one fails (other
// than a fence that no longer holds, which changes nothing), the whole
// transaction is rolled back and each write runs again in a transaction
// of its own, so that a failed write returns its own error and never
// fails or shows in another. fn's result is returned
// only once the transaction holding its writes committed; when the commit
// fails, every write of the group returns that error, and none of them
// took effect. A caller whose context ends before its write ran gets the
// context's error, and the write never runs.
func (s *Store) grouped(ctx context.Context, key string, lazy bool, fn func(ctx context.Context, tx *sql.Tx) error) error {
	it := &groupItem{ctx: ctx, key: key, fn: fn, lazy: lazy, done: make(chan struct{})}
	s.group.mu.Lock()
	s.group.queue = append(s.group.queue, it)
	s.group.mu.Unlock()
	var timeout <-chan time.Time
	if s.busyTimeout > 0 {
		t := time.NewTimer(s.busyTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		select {
		case <-it.done: // a leader ran it
			return it.err
		case s.writer <- struct{}{}:
			// This caller leads: it runs what waits, its own write among
			// them unless an earlier leader took it.
			s.lead()
			s.unlockWrite()
			<-it.done
			return it.err
		case <-timeout:
			if s.unqueue(it) {
				return errWriteLockTimeout
			}
			timeout = nil // a leader holds it: wait for its result
		case <-ctx.Done():
			if s.unqueue(it) {
				return ctx.Err()
			}
		}
	}
}

// unqueue takes it off the queue, if no leader took it yet.
func (s *Store) unqueue(it *groupItem) bool {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	for i, q := range s.group.queue {
		if q == it {
			s.group.queue = append(s.group.queue[:i], s.group.queue[i+1:]...)
			return true
		}
	}
	return false
}

// lead runs the waiting writes in one transaction (each again in one of
// its own when one of them fails), commits, and then gives each its
// result. The caller holds the writer turn.
func (s *Store) lead() {
	s.group.mu.Lock()
	batch := s.group.queue
	s.group.queue = nil
	s.group.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	defer func() {
		for _, it := range batch {
			close(it.done)
		}
	}()
	var live []*groupItem
	for _, it := range batch {
		if it.err = it.ctx.Err(); it.err == nil {
			live = append(live, it)
		}
	}
	lazy := s.lazySync != "" && !slices.ContainsFunc(live, func(it *groupItem) bool { return !it.lazy })
	switch {
	case len(live) == 0:
		return
	case len(live) == 1 && !lazy:
		// Alone: one autocommit statement on the pool, as without groups,
		// at no added cost.
		live[0].err = live[0].fn(live[0].ctx, nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	var (
		tx  *sql.Tx
		err error
		// end gives a lazy transaction's connection back, once it ended.
		end = func() {}
	)
	if lazy {
		tx, end, err = s.beginLazy(ctx)
	} else {
		tx, err = s.db.BeginTx(ctx, nil)
	}
	if err != nil {
		for _, it := range live {
			it.err = fmt.Errorf("begin: %w", interpretError(err))
		}
		return
	}
	failed := false
	for _, it := range live {
		// The group's context, not the caller's: SQLite rolls the whole
		// transaction back when a statement in it is interrupted, which
		// would undo the others' writes too.
		it.err = it.fn(ctx, tx)
		if it.err != nil && !errors.Is(it.err, store.ErrFenced) {
			// A write that failed may have left part of itself, or (some
			// SQLite errors) rolled the transaction back: nothing of the
			// group commits, and each write runs again in a transaction
			// of its own, for its own outcome. A fence that no longer
			// holds changed nothing, and is that write's outcome alone.
			failed = true
			break
		}
	}
	if failed {
		_ = tx.Rollback()
		end()
		for _, it := range live {
			it.err = s.alone(ctx, it)
		}
		return
	}
	if groupCommitting != nil {
		keys := make([]string, len(live))
		for i, it := range live {
			keys[i] = it.key
		}
		groupCommitting(keys)
	}
	err = tx.Commit()
	end()
	if err != nil {
		for _, it := range batch {
			if it.err == nil {
				it.err = fmt.Errorf("commit (outcome unknown: read the record again): %w", interpretError(err))
			}
		}
		return
	}
	s.group.commits.Add(1)
	if lazy {
		s.group.lazyCommits.Add(1)
	}
}

// beginLazy begins a transaction that commits without syncing the
// write-ahead log (synchronous=NORMAL on its connection), for writes that
// need not be durable on their own (transactional claims): the next commit
// that syncs makes them durable, since it syncs the whole log. end gives
// the connection back with the handle's setting (lazySync), or closes it
// when that cannot be restored, so that no pooled connection skips syncs.
func (s *Store) beginLazy(ctx context.Context) (tx *sql.Tx, end func(), err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, func() {}, err
	}
	end = func() {
		rctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
		defer cancel()
		if _, err := conn.ExecContext(rctx, s.lazySync); err != nil {
			s.logger.Warn("sqlitestore: closing a connection whose synchronous setting could not be restored", "err", err)
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA synchronous=NORMAL"); err != nil {
		end()
		return nil, func() {}, err
	}
	if tx, err = conn.BeginTx(ctx, nil); err != nil {
		end()
		return nil, func() {}, err
	}
	return tx, end, nil
}

// alone runs one write of a failed group in a transaction of its own: it
// commits when the write succeeds (or is fenced, which changed nothing),
// and rolls back when it fails, so that a failed write leaves nothing.
func (s *Store) alone(ctx context.Context, it *groupItem) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", interpretError(err))
	}
	err = it.fn(ctx, tx)
	if err != nil && !errors.Is(err, store.ErrFenced) {
		_ = tx.Rollback()
		return err
	}
	if cerr := tx.Commit(); cerr != nil {
		return fmt.Errorf("commit (outcome unknown: read the record again): %w", interpretError(cerr))
	}
	return err
}
