package pgstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// queueWrites starts each write in its own goroutine while the group's
// turns are held, waits until all of them wait in the queue, and releases
// the turns: one leader then runs them as one group. It returns their
// errors, in the order of writes.
func queueWrites(t *testing.T, s *pgstore.Store, writes ...func() error) []error {
	t.Helper()
	release := pgstore.HoldGroup(s)
	errs := make([]error, len(writes))
	var wg sync.WaitGroup
	for i, w := range writes {
		wg.Go(func() { errs[i] = w() })
	}
	deadline := time.Now().Add(10 * time.Second)
	for pgstore.GroupQueued(s) < len(writes) {
		if time.Now().After(deadline) {
			release()
			t.Fatalf("%d of %d writes queued", pgstore.GroupQueued(s), len(writes))
		}
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	return errs
}

// TestGroupCommitSharesOneCommit: writes that wait together commit in one
// group, and each gets its own result: claims of distinct keys are
// granted, a second claim of a key the group grants is answered the
// first one's record, and completions whose fence holds are applied.
func TestGroupCommitSharesOneCommit(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	const n = 8
	results := make([]store.ClaimResult, n+1)
	writes := make([]func() error, 0, n+1)
	for i := range n {
		writes = append(writes, func() (err error) {
			results[i], err = s.Claim(ctx, params("k"+strconv.Itoa(i), "f"))
			return err
		})
	}
	writes = append(writes, func() (err error) {
		results[n], err = s.Claim(ctx, params("k0", "f"))
		return err
	})
	for i, err := range queueWrites(t, s, writes...) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if c, items := pgstore.GroupStats(s); c != 1 || items != n+1 {
		t.Fatalf("group commits, writes = %d, %d; want 1, %d", c, items, n+1)
	}
	// The two claims of k0 are decided in the group's order: one is
	// granted, the other is answered its record.
	if results[0].Claimed == results[n].Claimed {
		t.Fatalf("two claims of k0: %+v and %+v, want one granted", results[0], results[n])
	}
	if !results[0].Claimed {
		results[0], results[n] = results[n], results[0]
	}
	if results[n].Record.Owner != results[0].Record.Owner || results[n].Record.State != store.StateProcessing {
		t.Fatalf("the refused claim of k0: %+v, want the granted one's record", results[n])
	}
	for i := range n {
		if !results[i].Claimed || results[i].Record.Epoch != 1 {
			t.Fatalf("claim %d: %+v, want granted at epoch 1", i, results[i])
		}
	}

	// Completions in one group: each fence is its own.
	writes = writes[:0]
	for i := range n {
		writes = append(writes, func() error {
			return s.Complete(ctx, store.CompleteParams{Fence: fenceOf(results[i]), Response: []byte("r" + strconv.Itoa(i)), Retention: time.Hour})
		})
	}
	for i, err := range queueWrites(t, s, writes...) {
		if err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
	}
	for i := range n {
		rec, err := s.Get(ctx, "k"+strconv.Itoa(i))
		if err != nil || rec.State != store.StateDone || string(rec.Response) != "r"+strconv.Itoa(i) {
			t.Fatalf("record %d: %+v, %v; want done with r%d", i, rec, err, i)
		}
	}
}

// TestGroupCommitFencedAlone: a write whose fence no longer holds fails
// alone; the others of its group are applied.
func TestGroupCommitFencedAlone(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	a := mustClaim(t, s, params("a", "f"))
	b := mustClaim(t, s, params("b", "f"))
	stale := fenceOf(a)
	stale.Epoch++
	errs := queueWrites(t, s,
		func() error {
			return s.Complete(ctx, store.CompleteParams{Fence: stale, Response: []byte("x"), Retention: time.Hour})
		},
		func() error {
			return s.Complete(ctx, store.CompleteParams{Fence: fenceOf(b), Response: []byte("y"), Retention: time.Hour})
		},
		func() error { _, err := s.Extend(ctx, stale, time.Minute); return err },
		func() error { return s.Release(ctx, stale) },
	)
	if !errors.Is(errs[0], store.ErrFenced) || errs[1] != nil || !errors.Is(errs[2], store.ErrFenced) || !errors.Is(errs[3], store.ErrFenced) {
		t.Fatalf("errors %v; want ErrFenced, nil, ErrFenced, ErrFenced", errs)
	}
	if c, _ := pgstore.GroupStats(s); c != 1 {
		t.Fatalf("group commits = %d, want 1", c)
	}
	if rec, _ := s.Get(ctx, "a"); rec.State != store.StateProcessing {
		t.Fatalf("a: %+v, want still processing", rec)
	}
	if rec, _ := s.Get(ctx, "b"); rec.State != store.StateDone || string(rec.Response) != "y" {
		t.Fatalf("b: %+v, want done with y", rec)
	}
}

// TestGroupCommitFailsAlone: a write whose statement fails (a key larger
// than the index allows) aborts its group's transaction; each of the
// others then runs alone, and only the failing one returns an error.
func TestGroupCommitFailsAlone(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	huge := make([]byte, 16<<10) // random bytes: they do not compress under the index's limit
	_, _ = rand.Read(huge)
	var granted [3]store.ClaimResult
	errs := queueWrites(t, s,
		func() (err error) { granted[0], err = s.Claim(ctx, params("a", "f")); return err },
		func() error { _, err := s.Claim(ctx, params(string(huge), "f")); return err },
		func() (err error) { granted[1], err = s.Claim(ctx, params("b", "f")); return err },
		func() (err error) { granted[2], err = s.Claim(ctx, params("c", "f")); return err },
	)
	if errs[0] != nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("errors %v: the good claims failed with the bad one", errs)
	}
	if errs[1] == nil {
		t.Fatal("the claim of a key too large for the index succeeded")
	}
	if c, _ := pgstore.GroupStats(s); c != 0 {
		t.Fatalf("group commits = %d, want 0 (the group failed)", c)
	}
	for i, k := range []string{"a", "b", "c"} {
		rec, err := s.Get(ctx, k)
		if err != nil || !granted[i].Claimed || rec.Epoch != 1 || rec.Owner != granted[i].Record.Owner {
			t.Fatalf("%s: %+v, %v; want granted once, at epoch 1", k, rec, err)
		}
	}
}

// TestGroupCommitCanceledWaiter: a write whose context ends while it waits
// for a turn returns the context's error and never runs.
func TestGroupCommitCanceledWaiter(t *testing.T) {
	s, _ := setup(t)
	release := pgstore.HoldGroup(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := s.Claim(ctx, params("k", "f")); done <- err }()
	for pgstore.GroupQueued(s) == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	err := <-done
	release()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim: %v, want context.Canceled", err)
	}
	if _, err := s.Get(context.Background(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get: %v, want ErrNotFound: the canceled claim ran", err)
	}
}

// TestGroupCommitStalledGroup: a group whose write waits for a row lock
// that a caller's transaction holds does not hold up the other writes:
// once they have waited a little, they run as a further group.
func TestGroupCommitStalledGroup(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	held, err := s.Claim(ctx, params("slow", "f"))
	if err != nil || !held.Claimed {
		t.Fatalf("claim: %+v, %v", held, err)
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM idem_keys FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	completed := make(chan error, 1)
	go func() {
		completed <- s.Complete(ctx, store.CompleteParams{Fence: fenceOf(held), Response: []byte("r"), Retention: time.Hour})
	}()
	select {
	case err := <-completed:
		t.Fatalf("the completion did not wait for the row lock: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	claimed := make(chan error, 1)
	go func() {
		res, err := s.Claim(ctx, params("other", "f"))
		if err == nil && !res.Claimed {
			err = errors.New("not granted")
		}
		claimed <- err
	}()
	select {
	case err := <-claimed:
		if err != nil {
			t.Fatalf("claim of another key: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the claim of another key waited for the stalled group")
	}
	select {
	case err := <-completed:
		t.Fatalf("the completion returned while the row was locked: %v", err)
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-completed; err != nil {
		t.Fatalf("the completion, once the lock was gone: %v", err)
	}
}

// TestGroupCommitLazyClaims: a transactional claim (ClaimParams.
// Transactional) commits without waiting for the disk, alone or in a
// group of such claims; a group holding any other write waits for all, so
// that nothing acknowledged as durable is not; and the setting never
// outlives its pipeline on the pooled connection.
func TestGroupCommitLazyClaims(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	txParams := func(k string) store.ClaimParams { p := params(k, "f"); p.Transactional = true; return p }

	// Alone.
	lazy := pgstore.LazyCommits(s)
	if r, err := s.Claim(ctx, params("plain", "f")); err != nil || !r.Claimed {
		t.Fatal(r, err)
	}
	if got := pgstore.LazyCommits(s); got != lazy {
		t.Fatalf("a claim that is not transactional committed lazily (%d -> %d)", lazy, got)
	}
	held, err := s.Claim(ctx, txParams("tx-alone"))
	if err != nil || !held.Claimed {
		t.Fatal(held, err)
	}
	if got := pgstore.LazyCommits(s); got != lazy+1 {
		t.Fatalf("a transactional claim alone: lazy commits %d -> %d, want one more", lazy, got)
	}

	// A group of transactional claims commits lazily; a group with a
	// completion in it does not.
	lazy = pgstore.LazyCommits(s)
	var writes []func() error
	for i := range 4 {
		writes = append(writes, func() error { _, err := s.Claim(ctx, txParams("tx-"+strconv.Itoa(i))); return err })
	}
	for i, err := range queueWrites(t, s, writes...) {
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	if got := pgstore.LazyCommits(s); got != lazy+1 {
		t.Fatalf("a group of transactional claims: lazy commits %d -> %d, want one more", lazy, got)
	}
	errs := queueWrites(t, s,
		func() error { _, err := s.Claim(ctx, txParams("tx-mixed")); return err },
		func() error {
			return s.Complete(ctx, store.CompleteParams{Fence: fenceOf(held), Response: []byte("r"), Retention: time.Hour})
		})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("mixed group, write %d: %v", i, err)
		}
	}
	if got := pgstore.LazyCommits(s); got != lazy+1 {
		t.Fatalf("a group with a completion in it committed lazily (%d -> %d)", lazy+1, got)
	}
	if rec, err := s.Get(ctx, "tx-alone"); err != nil || rec.State != store.StateDone {
		t.Fatalf("the mixed group's completion: %+v, %v", rec, err)
	}

	// No connection of the store's pool is left committing lazily: hold
	// every idle one at once and ask each.
	var idle []*pgxpool.Conn
	for range b.pool.Stat().IdleConns() {
		c, err := b.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	var bad []string
	for i, c := range idle {
		var setting string
		if err := c.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&setting); err != nil || setting == "off" {
			bad = append(bad, fmt.Sprintf("connection %d of %d: synchronous_commit %q (%v)", i, len(idle), setting, err))
		}
		c.Release() // before failing: the pool closes at cleanup only once all are back
	}
	if len(bad) > 0 {
		t.Fatalf("pooled connections after lazy commits: %v", bad)
	}
	if len(idle) == 0 {
		t.Fatal("no idle connection in the pool after the writes")
	}

	// The statement takes effect in its pipeline and ends with it.
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	batch := &pgx.Batch{}
	batch.Queue(pgstore.LazyCommitSQL)
	batch.Queue("SELECT current_setting('synchronous_commit')")
	br := conn.SendBatch(ctx, batch)
	var in, after string
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	if err := br.QueryRow().Scan(&in); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if in != "off" || after == "off" {
		t.Fatalf("synchronous_commit in the pipeline %q, after it %q: want off, then the server's setting", in, after)
	}
}
