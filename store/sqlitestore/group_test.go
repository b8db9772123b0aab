package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

func (s *Store) queued() int {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	return len(s.group.queue)
}

// Writes that arrive while the writer turn is taken share one commit, and
// each gets its own result.
func TestGroupCommitSharesOneCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	s.writer <- struct{}{} // another writer holds the turn
	const n = 10
	res := make([]store.ClaimResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res[i], errs[i] = s.Claim(ctx, store.ClaimParams{Key: fmt.Sprintf("k%d", i), Fingerprint: []byte("fp"), Owner: "o",
				Lease: time.Minute, Retention: time.Hour})
		})
	}
	for s.queued() < n {
		time.Sleep(time.Millisecond)
	}
	before := s.group.commits.Load()
	s.unlockWrite()
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !res[i].Claimed {
			t.Fatalf("claim %d: %+v %v", i, res[i], errs[i])
		}
		if rec, err := s.Get(ctx, fmt.Sprintf("k%d", i)); err != nil || rec.State != store.StateProcessing {
			t.Fatalf("k%d after the commit: %+v %v", i, rec, err)
		}
	}
	if c := s.group.commits.Load() - before; c != 1 {
		t.Fatalf("%d claims took %d commits, want 1", n, c)
	}
}

// One write of a group that fails is undone alone: the others commit, and
// a write whose caller has gone never runs.
func TestGroupCommitFailsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	claim := func(key string) func(ctx context.Context, tx *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			_, _, err := s.claimOnce(ctx, tx, store.ClaimParams{Key: key, Fingerprint: []byte("fp"), Owner: "o", Lease: time.Minute, Retention: time.Hour})
			return err
		}
	}
	boom := errors.New("boom")
	gone, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	items := []*groupItem{
		{ctx: ctx, fn: claim("a"), done: make(chan struct{})},
		{ctx: ctx, fn: func(ctx context.Context, tx *sql.Tx) error {
			if err := claim("b")(ctx, tx); err != nil {
				return err
			}
			return boom // after its write: the write is undone
		}, done: make(chan struct{})},
		{ctx: gone, fn: func(ctx context.Context, tx *sql.Tx) error { ran = true; return nil }, done: make(chan struct{})},
		{ctx: ctx, fn: claim("c"), done: make(chan struct{})},
	}
	s.group.queue = items
	s.writer <- struct{}{}
	s.lead()
	s.unlockWrite()
	if items[0].err != nil || !errors.Is(items[1].err, boom) || !errors.Is(items[2].err, context.Canceled) || items[3].err != nil || ran {
		t.Fatalf("results %v %v %v %v, ran %v", items[0].err, items[1].err, items[2].err, items[3].err, ran)
	}
	for key, want := range map[string]bool{"a": true, "b": false, "c": true} {
		_, err := s.Get(ctx, key)
		if (err == nil) != want {
			t.Fatalf("%s after the group: %v, want it there: %v", key, err, want)
		}
	}
}

// A write whose fence no longer holds changed nothing: it fails alone, and
// the rest of its group commits in the group's one commit.
func TestGroupCommitFencedAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	var fences []store.Fence
	for _, k := range []string{"a", "b"} {
		res, err := s.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: []byte("fp"), Owner: "o-" + k, Lease: time.Minute, Retention: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		fences = append(fences, store.Fence{Key: k, Epoch: res.Record.Epoch, Owner: res.Record.Owner})
	}
	stale := fences[0]
	stale.Epoch++
	s.writer <- struct{}{}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		errs[0] = s.Complete(ctx, store.CompleteParams{Fence: stale, Response: []byte("x"), Retention: time.Hour})
	})
	wg.Go(func() {
		errs[1] = s.Complete(ctx, store.CompleteParams{Fence: fences[1], Response: []byte("y"), Retention: time.Hour})
	})
	for s.queued() < 2 {
		time.Sleep(time.Millisecond)
	}
	before := s.group.commits.Load()
	s.unlockWrite()
	wg.Wait()
	if !errors.Is(errs[0], store.ErrFenced) || errs[1] != nil {
		t.Fatalf("errors %v, want ErrFenced and nil", errs)
	}
	if c := s.group.commits.Load() - before; c != 1 {
		t.Fatalf("the group took %d commits, want 1", c)
	}
	if rec, _ := s.Get(ctx, "a"); rec.State != store.StateProcessing {
		t.Fatalf("a: %+v, want still processing", rec)
	}
	if rec, _ := s.Get(ctx, "b"); rec.State != store.StateDone || string(rec.Response) != "y" {
		t.Fatalf("b: %+v, want done with y", rec)
	}
}

// A transactional claim (store.ClaimParams.Transactional) commits without
// syncing the log, alone or in a group of such claims, on a connection
// whose synchronous setting is restored after; a group with any other
// write syncs for all; and a lazy group that fails gives its connection
// back before its writes run again alone, even when the pool has one.
func TestGroupCommitLazyClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openMigrated(t, &OpenConfig{MaxOpenConns: 1})
	s, err := New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	params := func(key string, tx bool) store.ClaimParams {
		return store.ClaimParams{Key: key, Fingerprint: []byte("fp"), Owner: "o", Lease: time.Minute, Retention: time.Hour, Transactional: tx}
	}
	lazy := func() int64 { return s.group.lazyCommits.Load() }

	if r, err := s.Claim(ctx, params("plain", false)); err != nil || !r.Claimed || lazy() != 0 {
		t.Fatalf("a claim that is not transactional: %+v %v, lazy commits %d", r, err, lazy())
	}
	held, err := s.Claim(ctx, params("tx", true))
	if err != nil || !held.Claimed || lazy() != 1 {
		t.Fatalf("a transactional claim alone: %+v %v, lazy commits %d, want 1", held, err, lazy())
	}

	// queue runs items as one group.
	queue := func(items ...*groupItem) {
		for _, it := range items {
			it.done = make(chan struct{})
		}
		s.group.queue = items
		s.writer <- struct{}{}
		s.lead()
		s.unlockWrite()
	}
	claim := func(key string) func(ctx context.Context, tx *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			_, _, err := s.claimOnce(ctx, tx, params(key, true))
			return err
		}
	}
	group := []*groupItem{{ctx: ctx, fn: claim("g1"), lazy: true}, {ctx: ctx, fn: claim("g2"), lazy: true}}
	queue(group...)
	if group[0].err != nil || group[1].err != nil || lazy() != 2 {
		t.Fatalf("a group of transactional claims: %v %v, lazy commits %d, want 2", group[0].err, group[1].err, lazy())
	}
	complete := func(ctx context.Context, tx *sql.Tx) error {
		return s.complete(ctx, tx, store.CompleteParams{Fence: fenceOf(held.Record), Response: []byte("r"), Retention: time.Hour})
	}
	mixed := []*groupItem{{ctx: ctx, fn: claim("m1"), lazy: true}, {ctx: ctx, fn: complete}}
	queue(mixed...)
	if mixed[0].err != nil || mixed[1].err != nil || lazy() != 2 {
		t.Fatalf("a group with a completion: %v %v, lazy commits %d, want still 2", mixed[0].err, mixed[1].err, lazy())
	}
	boom := errors.New("boom")
	failing := []*groupItem{{ctx: ctx, fn: claim("f1"), lazy: true}, {ctx: ctx, lazy: true, fn: func(ctx context.Context, tx *sql.Tx) error {
		if err := claim("f2")(ctx, tx); err != nil {
			return err
		}
		return boom
	}}}
	queue(failing...)
	if failing[0].err != nil || !errors.Is(failing[1].err, boom) {
		t.Fatalf("a failed lazy group: %v %v", failing[0].err, failing[1].err)
	}
	for key, want := range map[string]store.State{"tx": store.StateDone, "g1": store.StateProcessing, "m1": store.StateProcessing, "f1": store.StateProcessing} {
		if rec, err := s.Get(ctx, key); err != nil || rec.State != want {
			t.Fatalf("%s: %+v %v, want state %v", key, rec, err, want)
		}
	}
	if _, err := s.Get(ctx, "f2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("f2, whose write failed: %v, want not found", err)
	}
	var sync int
	if err := db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("the pooled connection's synchronous is %d (%v), want 2 (FULL) restored", sync, err)
	}
}
