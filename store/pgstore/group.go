package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit for the short writes of request keys (claim, complete,
// extend, release, mark unknown) made outside a caller's transaction.
//
// One group runs at a time. A write that finds no group running runs at
// once: alone, it is one autocommit statement, as without groups. Writes
// that arrive while a group runs wait in a queue, and the next caller to
// get the turn runs all of them as one pipeline (pgx.Batch): one round
// trip, which PostgreSQL runs as one implicit transaction, so one commit
// and one WAL flush for all of them. One group at a time makes the groups
// as large as the load allows: on a 2-core machine, against two groups at
// once, it cost PostgreSQL a quarter to a half less CPU per key (16 and 64
// clients), for 0.9-1.2x the keys (two groups overlap their commits' syncs,
// which counts when the disk is slow).
//
// A group can stall: one of its writes may wait for a row lock that a
// caller's transaction holds (a key completed in the caller's business
// transaction). So that the other writes do not wait for it, a write that
// has waited groupStall while a group runs may run the queue as a further
// group, up to groupLeaders at once. When that group stalls too (say, on
// a key the first one inserted and has not committed), every write waits
// for the caller's transaction or groupTimeout, as it did when two groups
// ran at once.
//
// Each write keeps its own outcome: a fence that no longer holds updates no
// row and fails that write alone. A statement error aborts the implicit
// transaction, so nothing of the group took effect; each write then runs
// again alone, and returns its own outcome. Any other failure of the group
// (a broken connection, a failed commit) returns that error to every write
// of it, as the same failure would to a lone autocommit. A write is
// acknowledged only after the group's commit.
//
// The writes of a group run in the order of their keys, so that two groups
// running at once take row locks in the same order and never deadlock.

// groupLeaders is the number of groups that may run at once: one, and
// more while the running ones stall.
var groupLeaders = 2

// groupStall is how long a write waits for a running group before it may
// run the queue as a further group. A group's round trip, commit
// included, takes a few milliseconds; 0 lets every write lead at once.
var groupStall = 20 * time.Millisecond

// groupSent, when set (by tests), runs after a group's pipeline is sent and
// before its results are read, with the keys of its writes: the moment a
// crash test kills the process with a group in flight.
var groupSent func(keys []string)

// groupTimeout bounds a group's round trip.
const groupTimeout = 30 * time.Second

// groupItem is one write waiting for a group.
type groupItem struct {
	ctx context.Context
	// key orders the group's statements.
	key string
	// sql and args are the statement.
	sql  string
	args []any
	// read takes the statement's results: its row (query) or its command
	// tag (exec). It returns the write's own outcome (ErrFenced, no row)
	// or the error that failed the statement.
	read func(r groupResult) error
	// lazy is a write whose commit need not wait for the disk (a
	// transactional claim, store.ClaimParams.Transactional).
	lazy bool
	err  error
	done chan struct{}
}

// groupResult is how a write reads its statement's results, from a batch or
// from a lone statement alike.
type groupResult interface {
	QueryRow() pgx.Row
	Exec() (pgconn.CommandTag, error)
}

// group holds the writes waiting for a turn.
type group struct {
	// turn is held by the running group; spare by the groups started
	// because it stalled.
	turn, spare chan struct{}
	mu          sync.Mutex
	queue       []*groupItem
	// commits counts the groups of more than one write that committed,
	// and items their writes (for tests and benchmarks); lazyCommits the
	// groups and lone writes committed without waiting for the disk.
	commits, items, lazyCommits atomic.Int64
}

// lazyCommitSQL makes the rest of its implicit transaction (a pipeline's)
// commit without waiting for the WAL to reach the disk, for the writes
// that need not (groupItem.lazy). A later commit that waits, or the WAL
// writer within a fraction of a second, makes it durable.
const lazyCommitSQL = "SELECT set_config('synchronous_commit', 'off', true)"

func newGroup() *group {
	return &group{turn: make(chan struct{}, 1), spare: make(chan struct{}, max(groupLeaders-1, 0))}
}

// grouped runs one write through the group and returns its outcome. A
// lazy write's commit need not wait for the disk: a group of lazy writes
// alone, or a lone lazy write, commits without the sync; a group with any
// other write syncs for all.
func (s *Store) grouped(ctx context.Context, key, sql string, args []any, lazy bool, read func(groupResult) error) error {
	it := &groupItem{ctx: ctx, key: key, sql: sql, args: args, read: read, lazy: lazy, done: make(chan struct{})}
	g := s.group
	g.mu.Lock()
	g.queue = append(g.queue, it)
	g.mu.Unlock()
	// lead runs the queue on the turn it holds.
	lead := func(turn chan struct{}) error {
		s.lead()
		<-turn
		<-it.done
		return it.err
	}
	select {
	case g.turn <- struct{}{}: // no group runs: the usual case of a lone write
		return lead(g.turn)
	default:
	}
	// A spare turn is open to this write once it has waited groupStall.
	spare, stalled := g.spare, (<-chan time.Time)(nil)
	if groupStall > 0 {
		t := time.NewTimer(groupStall)
		defer t.Stop()
		spare, stalled = nil, t.C
	}
	for {
		select {
		case <-it.done:
			return it.err
		case g.turn <- struct{}{}:
			return lead(g.turn)
		case spare <- struct{}{}:
			return lead(spare)
		case <-stalled:
			spare, stalled = g.spare, nil
		case <-ctx.Done():
			if s.unqueue(it) {
				return ctx.Err()
			}
			// A leader took it: its result comes.
			<-it.done
			return it.err
		}
	}
}

// unqueue takes it off the queue, if no leader took it yet.
func (s *Store) unqueue(it *groupItem) bool {
	g := s.group
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == it {
			g.queue = slices.Delete(g.queue, i, i+1)
			return true
		}
	}
	return false
}

// lead runs what waits, as one group. The caller holds a turn.
func (s *Store) lead() {
	g := s.group
	g.mu.Lock()
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	defer func() {
		for _, it := range batch {
			close(it.done)
		}
	}()
	live := batch[:0:0]
	for _, it := range batch {
		if it.err = it.ctx.Err(); it.err == nil {
			live = append(live, it)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		s.alone(live[0])
		return
	}
	slices.SortStableFunc(live, func(a, b *groupItem) int { return cmp.Compare(a.key, b.key) })
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	lazy := !slices.ContainsFunc(live, func(it *groupItem) bool { return !it.lazy })
	b := &pgx.Batch{}
	if lazy {
		b.Queue(lazyCommitSQL)
	}
	for _, it := range live {
		b.Queue(it.sql, it.args...)
	}
	br := s.pool.SendBatch(ctx, b)
	if groupSent != nil {
		keys := make([]string, len(live))
		for i, it := range live {
			keys[i] = it.key
		}
		groupSent(keys)
	}
	var stmtErr error
	if lazy {
		// A statement error rolls the group back (each write then runs
		// alone); any other (a broken connection) is the group's, below.
		var pgErr *pgconn.PgError
		if _, err := br.Exec(); errors.As(err, &pgErr) {
			stmtErr = err
		}
	}
	for _, it := range live {
		if stmtErr != nil {
			break
		}
		it.err = it.read(br)
		var pgErr *pgconn.PgError
		if errors.As(it.err, &pgErr) {
			stmtErr = it.err
		}
	}
	err := br.Close()
	if stmtErr == nil && err == nil {
		g.commits.Add(1)
		g.items.Add(int64(len(live)))
		if lazy {
			g.lazyCommits.Add(1)
		}
		return
	}
	var pgErr *pgconn.PgError
	if stmtErr != nil || errors.As(err, &pgErr) {
		// A statement failed, so the implicit transaction rolled back and
		// none of the group's writes took effect: each runs again alone,
		// for its own outcome.
		for _, it := range live {
			s.alone(it)
		}
		return
	}
	for _, it := range live {
		it.err = fmt.Errorf("group commit: %w", err)
	}
}

// alone runs one write as its own autocommit statement; a lazy one after
// lazyCommitSQL, in one pipeline (one implicit transaction).
func (s *Store) alone(it *groupItem) {
	if it.err = it.ctx.Err(); it.err != nil {
		return
	}
	if !it.lazy {
		it.err = it.read(loneResult{ctx: it.ctx, s: s, it: it})
		return
	}
	b := &pgx.Batch{}
	b.Queue(lazyCommitSQL)
	b.Queue(it.sql, it.args...)
	br := s.pool.SendBatch(it.ctx, b)
	if _, it.err = br.Exec(); it.err == nil {
		it.err = it.read(br)
	}
	if err := br.Close(); it.err == nil {
		it.err = err
	}
	if it.err == nil {
		s.group.lazyCommits.Add(1)
	}
}

// loneResult runs a write's statement on the pool when it reads it.
type loneResult struct {
	ctx context.Context
	s   *Store
	it  *groupItem
}

func (l loneResult) QueryRow() pgx.Row { return l.s.pool.QueryRow(l.ctx, l.it.sql, l.it.args...) }

func (l loneResult) Exec() (pgconn.CommandTag, error) {
	return l.s.pool.Exec(l.ctx, l.it.sql, l.it.args...)
}
