package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// intent returns a pending intent to target, due at start.
func intent(target, stream string) store.Intent {
	return store.Intent{Target: target, Method: "POST", Path: "/charges", Body: []byte(`{}`),
		Stream: stream, DueAt: start, EnqueuedAt: start}
}

// enqueue enqueues in in a transaction of its own.
func enqueue(t testing.TB, s *pgstore.Store, in store.Intent) (id, seq int64) {
	t.Helper()
	err := s.InTx(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		var err error
		id, seq, err = s.EnqueueTx(ctx, tx, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return id, seq
}

// claimAt claims up to limit intents at now for a day.
func claimAt(t testing.TB, s *pgstore.Store, owner string, now time.Time, limit int, skip ...string) []store.Intent {
	t.Helper()
	got, err := s.ClaimIntents(context.Background(), store.OutboxClaim{Owner: owner, Now: now, Lease: 24 * time.Hour, Limit: limit, Skip: skip})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func intentIDs(in []store.Intent) []int64 {
	out := []int64{}
	for _, i := range in {
		out = append(out, i.ID)
	}
	return out
}

// Identifiers are bytea: NUL and invalid UTF-8 in a target, a stream or an
// owner survive. Zero DueAt is due at once; zero EnqueuedAt is DueAt.
func TestOutboxIdentifiersAndDefaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	target, stream, owner := "pay\x00\xff", "order\x00\xfe-1", token()+"\x00"
	in := store.Intent{Target: target, Method: "PUT", Path: "/x", Stream: stream} // Body, Headers, Metadata nil
	id, seq := enqueue(t, s, in)
	if seq != 1 {
		t.Fatalf("sequence %d, want 1", seq)
	}
	got, err := s.GetIntent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Target != target || got.Stream != stream || got.Sequence != 1 || !got.DueAt.IsZero() || !got.EnqueuedAt.IsZero() ||
		got.Headers != nil || got.Metadata != nil || len(got.Body) != 0 || got.Owner != "" || !got.LeaseUntil.IsZero() {
		t.Fatalf("stored %+v", got)
	}
	if err := s.DisableTarget(ctx, "other\x00", "410 Gone \xff\x00", start); err != nil {
		t.Fatal(err)
	}
	dis, err := s.DisabledTargets(ctx)
	if err != nil || !slices.Equal(dis, []string{"other\x00"}) {
		t.Fatalf("DisabledTargets = %q, %v", dis, err)
	}
	c, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: owner, Now: start, Lease: time.Minute, Limit: 5, Skip: dis})
	if err != nil || len(c) != 1 || c[0].ID != id || c[0].Owner != owner || !c[0].LeaseUntil.Equal(start.Add(time.Minute)) {
		t.Fatalf("claim %+v, %v", c, err)
	}
	if err := s.KillIntent(ctx, c[0].Fence(), "bad \xff\x00 reason", start); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetIntent(ctx, id)
	if got.State != store.IntentDead || got.LastError != "bad \uFFFD\uFFFD reason" || !got.LeaseUntil.IsZero() || !got.DoneAt.Equal(start) {
		t.Fatalf("after kill %+v", got)
	}
	if err := s.RequeueIntent(ctx, id+1, start); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("requeue of an unknown intent = %v", err)
	}
	// A target disabled twice keeps one mark; enabling an unknown one is fine.
	for range 2 {
		if err := s.DisableTarget(ctx, "legacy", "410", start); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EnableTarget(ctx, "never-disabled"); err != nil {
		t.Fatal(err)
	}
	if dis, _ := s.DisabledTargets(ctx); !slices.Equal(dis, []string{"legacy", "other\x00"}) {
		t.Fatalf("DisabledTargets = %q", dis)
	}
	for _, f := range []func() error{
		func() error { _, err := s.SweepIntents(ctx, start, 0); return err },
		func() error { _, err := s.ListIntents(ctx, store.IntentDone, 0, -1); return err },
	} {
		if f() == nil {
			t.Error("limit below 1: no error")
		}
	}
}

// Text that text and jsonb columns cannot hold is refused before any
// statement runs, so the caller's transaction goes on.
func TestOutboxEnqueueRefusesUnstorableText(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	bad := []store.Intent{
		{Target: "t", Method: "POST", Path: "/a\x00"},
		{Target: "t", Method: "PO\xffST", Path: "/"},
		{Target: "t", Method: "POST", Headers: map[string]string{"X-A": "\x00"}},
		{Target: "t", Method: "POST", Metadata: map[string]string{"\xff": "v"}},
		{Target: "", Method: "POST"},
		{Target: "t", Method: ""},
	}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		for _, in := range bad {
			if _, _, err := s.EnqueueTx(ctx, tx, in); err == nil {
				t.Errorf("EnqueueTx(%+v): no error", in)
			}
		}
		in := intent("t", "")
		in.Headers = map[string]string{"Content-Type": "application/json; charset=utf-8", "X-É": "ü"}
		in.Metadata = map[string]string{}
		id, _, err := s.EnqueueTx(ctx, tx, in)
		if err != nil {
			return fmt.Errorf("the transaction is unusable after the refusals: %w", err)
		}
		got, err := s.GetIntent(ctx, id)
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("uncommitted intent visible outside its transaction: %+v, %v", got, err)
		}
		return nil
	})
	if n := count(t, b.pool, "idem_outbox"); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	got, err := s.ListIntents(context.Background(), store.IntentPending, 0, 10)
	if err != nil || len(got) != 1 || got[0].Headers["X-É"] != "ü" || got[0].Metadata == nil || len(got[0].Metadata) != 0 {
		t.Fatalf("stored %+v, %v", got, err)
	}
}

// ids and sequences may disagree within a stream: an id is drawn before the
// enqueue waits for the stream's row. The stream is delivered by sequence.
func TestOutboxStreamOrderIsBySequenceNotID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	a := holdTx(t, s)
	id1, seq1, err := s.EnqueueTx(ctx, a.tx, intent("pay", "order-1"))
	if err != nil || seq1 != 1 {
		t.Fatal(seq1, err)
	}
	other := holdTx(t, s)
	waiting := async(func() ([2]int64, error) {
		id, seq, err := s.EnqueueTx(ctx, other.tx, intent("pay", "order-1"))
		return [2]int64{id, seq}, err
	})
	waitBlocked(t, b.pool, other.pid, waiting)
	id3, seq2, err := s.EnqueueTx(ctx, a.tx, intent("pay", "order-1"))
	if err != nil || seq2 != 2 {
		t.Fatal(seq2, err)
	}
	a.commit(t)
	r, err := receive(t, waiting)
	if err != nil {
		t.Fatal(err)
	}
	other.commit(t)
	id2, seq3 := r[0], r[1]
	if !(id1 < id2 && id2 < id3) || seq3 != 3 {
		t.Fatalf("ids %d %d %d, sequences 1 2 %d: want the waiting enqueue's id drawn before the wait, sequence 3 after it", id1, id2, id3, seq3)
	}
	for _, want := range []int64{id1, id3, id2} {
		got := claimAt(t, s, "r", start, 10)
		if len(got) != 1 || got[0].ID != want {
			t.Fatalf("claimed %v, want [%d] (by sequence)", intentIDs(got), want)
		}
		if err := s.CompleteIntent(ctx, got[0].Fence(), 200, start); err != nil {
			t.Fatal(err)
		}
	}
}

// A rolled-back enqueue leaves no gap in its stream.
func TestOutboxStreamSequenceAfterRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	enqueue(t, s, intent("pay", "o"))
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, seq, err := s.EnqueueTx(ctx, tx, intent("pay", "o")); err != nil || seq != 2 {
			t.Errorf("in the rolled-back transaction: sequence %d, %v", seq, err)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	if _, seq := enqueue(t, s, intent("pay", "o")); seq != 2 {
		t.Fatalf("sequence after a rollback %d, want 2", seq)
	}
}

// readSQL reads one of the store's statements, to run it in a transaction
// the test holds open.
func readSQL(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("sql/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An open claim holds its rows locked until it commits: another claim does
// not wait for it, takes none of its rows, and none of the rows behind a
// stream head it holds.
func TestOutboxClaimSkipsLockedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	head, _ := enqueue(t, s, intent("pay", "order-1"))
	second, _ := enqueue(t, s, intent("pay", "order-1"))
	plain, _ := enqueue(t, s, intent("pay", ""))

	open := holdTx(t, s)
	var locked int64
	err := open.tx.QueryRow(ctx, readSQL(t, "outbox_claim.sql"), start, []byte("relay-a"), start.Add(time.Minute), 1, [][]byte{}).
		Scan(&locked, new(any), new(any), new(any), new(any), new(any), new(any), new(any), new(any), new(any),
			new(any), new(any), new(any), new(any), new(any), new(any), new(any), new(any), new(any))
	if err != nil || locked != head {
		t.Fatalf("the open claim took %d, %v; want the head %d", locked, err, head)
	}
	b := async(func() ([]store.Intent, error) {
		return s.ClaimIntents(ctx, store.OutboxClaim{Owner: "relay-b", Now: start, Lease: time.Minute, Limit: 10})
	})
	got, err := receive(t, b) // returns while the open claim still holds the head
	if err != nil || !slices.Equal(intentIDs(got), []int64{plain}) {
		t.Fatalf("claim beside an open one: %v, %v; want only the plain row %d", intentIDs(got), err, plain)
	}
	open.commit(t)
	if got := claimAt(t, s, "relay-c", start, 10); len(got) != 0 {
		t.Fatalf("claimed %v while the head is in flight", intentIDs(got))
	}
	in, err := s.GetIntent(ctx, head)
	if err != nil || in.State != store.IntentInFlight || in.Owner != "relay-a" || in.Epoch != 1 || in.Attempts != 1 {
		t.Fatalf("the head after the open claim committed: %+v, %v", in, err)
	}
	if err := s.CompleteIntent(ctx, in.Fence(), 200, start); err != nil {
		t.Fatal(err)
	}
	if got := claimAt(t, s, "relay-c", start, 10); !slices.Equal(intentIDs(got), []int64{second}) {
		t.Fatalf("after the head completed: %v, want [%d]", intentIDs(got), second)
	}
}

// An in-flight head whose lease ended is taken over alone; the rows behind
// it stay behind it.
func TestOutboxStreamHeadTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	head, _ := enqueue(t, s, intent("pay", "o"))
	enqueue(t, s, intent("pay", "o"))
	a, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: "a", Now: start, Lease: time.Second, Limit: 10})
	if err != nil || len(a) != 1 {
		t.Fatal(a, err)
	}
	b, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: "b", Now: start.Add(time.Second), Lease: time.Second, Limit: 10})
	if err != nil || len(b) != 1 || b[0].ID != head || b[0].Epoch != 2 {
		t.Fatalf("takeover %+v, %v", b, err)
	}
	if err := s.RetryIntent(ctx, a[0].Fence(), start, "late"); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale retry = %v", err)
	}
}

// The stream head rule under contention: enqueuers commit and roll back
// transactions to a few streams while claimers claim, retry, kill and
// complete. At no time are two rows of a stream in flight (checked in the
// database by an observer, and by the claimers), each stream is claimed in
// sequence order (a retried row again before its successor), and every
// committed row ends.
func TestOutboxStreamHeadUnderContention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	const (
		enqueuers = 3
		txs       = 60
		claimers  = 4
	)
	streams := []string{"s0", "s1", "s2", "s3"}
	var (
		mu        sync.Mutex
		failures  []string
		committed atomic.Int64
		ended     atomic.Int64
		enqDone   atomic.Bool
		inflight  = map[string]int64{} // stream -> id, as the claimers see it
		lastSeq   = map[string]int64{} // stream -> last sequence claimed
		retried   = map[string]bool{}  // whether that claim was retried
		delivered = map[string][]int64{}
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}

	var enq sync.WaitGroup
	for e := range enqueuers {
		enq.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(e), 1))
			for range txs {
				n := 1 + rng.IntN(3)
				picked := make([]string, n)
				for i := range picked {
					if rng.IntN(5) == 0 {
						picked[i] = "" // a plain row
					} else {
						picked[i] = streams[rng.IntN(len(streams))]
					}
				}
				slices.Sort(picked) // one order of streams in every transaction: no deadlock
				rollback := rng.IntN(5) == 0
				err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					for _, st := range picked {
						if _, _, err := s.EnqueueTx(ctx, tx, intent("pay", st)); err != nil {
							return err
						}
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				switch {
				case rollback && errors.Is(err, errRollback):
				case err == nil:
					committed.Add(int64(n))
				default:
					fail("enqueue: %v", err)
					return
				}
			}
		})
	}
	go func() { enq.Wait(); enqDone.Store(true) }()

	observing := make(chan struct{})
	observed := make(chan int, 1)
	go func() {
		polls := 0
		defer func() { observed <- polls }()
		for {
			select {
			case <-observing:
				return
			default:
			}
			var bad []string
			rows, err := b.pool.Query(ctx, `SELECT encode(stream, 'escape') FROM idem_outbox
				WHERE state = 2 AND stream IS NOT NULL GROUP BY stream HAVING count(*) > 1`)
			if err == nil {
				bad, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				fail("observer: %v", err)
				return
			}
			if len(bad) > 0 {
				fail("observer: streams %v have several rows in flight", bad)
			}
			polls++
		}
	}()

	var cl sync.WaitGroup
	for c := range claimers {
		cl.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 2))
			owner := fmt.Sprintf("relay-%d", c)
			deadline := time.Now().Add(60 * time.Second)
			for !(enqDone.Load() && ended.Load() == committed.Load()) {
				if time.Now().After(deadline) {
					fail("%s: not drained after 60s: %d of %d ended", owner, ended.Load(), committed.Load())
					return
				}
				got, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: owner, Now: start, Lease: time.Hour, Limit: 1 + rng.IntN(4)})
				if err != nil {
					fail("%s: claim: %v", owner, err)
					return
				}
				if len(got) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				mu.Lock()
				for _, in := range got {
					if in.Stream == "" {
						continue
					}
					if prev := inflight[in.Stream]; prev != 0 {
						failures = append(failures, fmt.Sprintf("%s claimed %d of %s while %d is in flight", owner, in.ID, in.Stream, prev))
					}
					inflight[in.Stream] = in.ID
					want := lastSeq[in.Stream] + 1
					if retried[in.Stream] {
						want-- // the same row again
					}
					if in.Sequence != want {
						failures = append(failures, fmt.Sprintf("%s claimed %s sequence %d, want %d", owner, in.Stream, in.Sequence, want))
					}
					lastSeq[in.Stream], retried[in.Stream] = in.Sequence, false
				}
				mu.Unlock()
				for _, in := range got {
					// Forget the row before it ends in the database, so that
					// a claim of its successor never finds it marked.
					roll := rng.IntN(8)
					mu.Lock()
					if in.Stream != "" {
						inflight[in.Stream] = 0
						retried[in.Stream] = roll == 0
						if roll != 0 {
							delivered[in.Stream] = append(delivered[in.Stream], in.Sequence)
						}
					}
					mu.Unlock()
					switch roll {
					case 0:
						err = s.RetryIntent(ctx, in.Fence(), start, "503")
					case 1:
						err = s.KillIntent(ctx, in.Fence(), "400", start)
						ended.Add(1)
					default:
						err = s.CompleteIntent(ctx, in.Fence(), 200, start)
						ended.Add(1)
					}
					if err != nil {
						fail("%s: end %d: %v", owner, in.ID, err)
					}
				}
			}
		})
	}
	cl.Wait()
	close(observing)
	polls := <-observed
	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("%d failures, first ones: %q", len(failures), failures[:min(5, len(failures))])
	}
	for _, st := range streams {
		var n int64
		if err := b.pool.QueryRow(ctx, `SELECT coalesce(max(last_seq), 0) FROM idem_outbox_streams WHERE stream = $1`, []byte(st)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		want := make([]int64, 0, n)
		for i := range n {
			want = append(want, i+1)
		}
		if !slices.Equal(delivered[st], want) {
			t.Errorf("stream %s ended in order %v, want 1 to %d", st, delivered[st], n)
		}
	}
	var live int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM idem_outbox WHERE state IN (1, 2)`).Scan(&live); err != nil || live != 0 {
		t.Fatalf("%d rows not ended, %v", live, err)
	}
	t.Logf("%d intents committed and ended; the observer polled %d times", committed.Load(), polls)
}

// A relay is woken when a transaction that enqueued commits: not before,
// not after a rollback, not by another schema's store; wakeups coalesce;
// the channel closes when ctx ends, and the connection goes back to the
// pool no longer listening.
func TestOutboxWakeups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := setup(t)
	pool := singleConnPool(t, b.pool)
	s := newStore(t, pool, nil)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake, err := s.OutboxWakeups(wctx)
	if err != nil {
		t.Fatal(err)
	}
	// The enqueues run on the test's other pool: the single connection is
	// the listener's.
	other := newStore(t, b.pool, nil)

	h := holdTx(t, other)
	if _, _, err := other.EnqueueTx(ctx, h.tx, intent("pay", "")); err != nil {
		t.Fatal(err)
	}
	noWakeup(t, wake, "while the enqueuing transaction is open")
	h.commit(t)
	wakeup(t, wake, "after the commit")

	err = other.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, _, err := other.EnqueueTx(ctx, tx, intent("pay", "")); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	noWakeup(t, wake, "after a rollback")

	_, elsewhere := setup(t) // another schema of the same database
	enqueue(t, newStore(t, elsewhere.pool, nil), intent("pay", ""))
	noWakeup(t, wake, "after an enqueue in another schema")

	// Three transactions and one of three enqueues: four commits, at most
	// four wakeups, coalesced in a buffer of one.
	for range 3 {
		enqueue(t, other, intent("pay", ""))
	}
	inTx(t, other, func(ctx context.Context, tx pgx.Tx) error {
		for range 3 {
			if _, _, err := other.EnqueueTx(ctx, tx, intent("pay", "s")); err != nil {
				return err
			}
		}
		return nil
	})
	wakeup(t, wake, "after four commits")
	// The notifications reach the listener one by one, and under load
	// some only after a wakeup was taken: take them until none comes for
	// a while. Coalesced, they are at most one per commit: the
	// transaction of three enqueues notified once.
	n := 1
	for more := true; more; {
		select {
		case <-wake:
			n++
		case <-time.After(quiet):
			more = false
		}
	}
	if n > 4 {
		t.Fatalf("%d wakeups after four commits", n)
	}
	noWakeup(t, wake, "after the wakeups were taken")

	cancel()
	closed(t, wake)
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the channel closed", n)
	}
	var channels []string
	rows, err := pool.Query(ctx, `SELECT pg_listening_channels()`)
	if err == nil {
		channels, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || len(channels) != 0 {
		t.Fatalf("the pool's connection still listens on %v, %v", channels, err)
	}
}

// A listening connection that breaks closes the channel and is discarded;
// the store can listen again.
func TestOutboxWakeupsConnectionLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := setup(t)
	pool := singleConnPool(t, b.pool)
	s := newStore(t, pool, nil)
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := c.Conn().PgConn().PID()
	c.Release()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake, err := s.OutboxWakeups(wctx)
	if err != nil {
		t.Fatal(err)
	}
	var killed bool
	if err := b.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener's backend %d: %v, %v", pid, killed, err)
	}
	closed(t, wake)
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired", n)
	}
	wake, err = s.OutboxWakeups(wctx)
	if err != nil {
		t.Fatalf("listen again: %v", err)
	}
	enqueue(t, newStore(t, b.pool, nil), intent("pay", ""))
	wakeup(t, wake, "on the new connection")
	cancel()
	closed(t, wake)
}

// singleConnPool opens a pool of one connection on base's schema, so that
// the test knows which connection a listener holds. It is closed by
// t.Cleanup, before base's.
func singleConnPool(t *testing.T, base *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := base.Config().Copy()
	cfg.MaxConns, cfg.MinConns = 1, 0
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// quiet is how long a test watches for a wakeup that must not come. A
// notification is delivered within milliseconds of its commit.
const quiet = 150 * time.Millisecond

func noWakeup(t *testing.T, wake <-chan struct{}, when string) {
	t.Helper()
	select {
	case _, ok := <-wake:
		t.Fatalf("woken (open %v) %s", ok, when)
	case <-time.After(quiet):
	}
}

func wakeup(t *testing.T, wake <-chan struct{}, when string) {
	t.Helper()
	select {
	case _, ok := <-wake:
		if !ok {
			t.Fatalf("channel closed instead of a wakeup %s", when)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("no wakeup %s", when)
	}
}

func closed(t *testing.T, wake <-chan struct{}) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case _, ok := <-wake:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the wakeup channel was not closed")
		}
	}
}

// fillOutbox inserts n intents straight into the table, as a busy outbox
// holds them: most done, some dead, a backlog of pending rows due and not
// yet due, short streams, and a few in flight. The returned time is the
// claims' now.
func fillOutbox(t testing.TB, pool *pgxpool.Pool, n int) time.Time {
	t.Helper()
	ctx := context.Background()
	now := start.Add(time.Hour)
	// g mod 20: 0-11 done, 12 dead, 13-14 pending not due, 15 in flight,
	// 16-19 pending due; every third pending row is in one of n/30
	// streams.
	_, err := pool.Exec(ctx, `
		INSERT INTO idem_outbox (seq, epoch, due_at, lease_until, enqueued_at, done_at, attempts, status, state,
		                         target, stream, owner, method, path, body)
		SELECT NULL, 1,
		       CASE WHEN g % 20 IN (13, 14) THEN $2::timestamptz + interval '1 hour' ELSE $1 END,
		       CASE WHEN g % 20 = 15 THEN $2::timestamptz + interval '1 minute' END,
		       $1,
		       CASE WHEN g % 20 <= 12 THEN $1 END,
		       1, 200,
		       CASE WHEN g % 20 <= 11 THEN 3 WHEN g % 20 = 12 THEN 4 WHEN g % 20 = 15 THEN 2 ELSE 1 END,
		       CASE WHEN g % 7 = 0 THEN 'legacy' ELSE 'pay' END::bytea, NULL, 'r'::bytea, 'POST', '/charges', '{}'::bytea
		FROM generate_series(1, $3::int) AS g`, start, now, n)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `
		WITH s AS (
		    SELECT id, 's' || (id % ($1::int / 30))::text AS stream
		    FROM idem_outbox WHERE state IN (1, 2) AND id % 3 = 0
		)
		UPDATE idem_outbox AS o
		SET stream = s.stream::bytea,
		    seq = row_number
		FROM (SELECT id, stream, row_number() OVER (PARTITION BY stream ORDER BY id) FROM s) AS s
		WHERE o.id = s.id`, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO idem_outbox_streams (stream, last_seq)
		SELECT stream, max(seq) FROM idem_outbox WHERE stream IS NOT NULL GROUP BY stream`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE idem_outbox`); err != nil {
		t.Fatal(err)
	}
	return now
}

// explain returns the plan of sql with args, as PostgreSQL chooses it for
// these values (custom) or for any values (generic, which a prepared
// statement may switch to after five runs).
func explain(t *testing.T, pool *pgxpool.Pool, generic bool, sql string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	var plan strings.Builder
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		mode := "force_custom_plan"
		if generic {
			mode = "force_generic_plan"
		}
		if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `PREPARE explained AS `+sql); err != nil {
			return err
		}
		defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE explained`) }()
		rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE "+execute("explained", args))
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, l := range lines {
			plan.WriteString(l + "\n")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// execute is the call of prepared statement name with args written as
// literals: EXECUTE takes no parameters of its own.
func execute(name string, args []any) string {
	params := make([]string, len(args))
	for i, a := range args {
		params[i] = literal(a)
	}
	return name + "(" + strings.Join(params, ", ") + ")"
}

// literal writes a statement parameter as SQL.
func literal(a any) string {
	switch v := a.(type) {
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'::timestamptz"
	case []byte:
		return fmt.Sprintf(`'\x%x'::bytea`, v)
	case [][]byte:
		parts := make([]string, len(v))
		for i, b := range v {
			parts[i] = literal(b)
		}
		return "ARRAY[" + strings.Join(parts, ", ") + "]::bytea[]"
	default:
		return fmt.Sprint(v)
	}
}

// On a table of 200,000 intents, each statement reads through its index,
// in the custom and the generic plan alike; and a claim, with a backlog of
// 40,000 claimable rows, reads a few pages.
func TestOutboxPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	now := fillOutbox(t, b.pool, 200_000)
	skip := [][]byte{[]byte("legacy")}
	for _, c := range []struct {
		name, file string
		args       []any
		want       []string
	}{
		{"claim", "outbox_claim.sql", []any{now, []byte("r"), now.Add(time.Minute), 32, skip},
			[]string{"Index Scan using idem_outbox_claim on idem_outbox o", "using idem_outbox_stream on idem_outbox e", "Index Scan using idem_outbox_pkey on idem_outbox o"}},
		{"sweep", "outbox_sweep.sql", []any{now, 1000}, []string{"idem_outbox_sweep", "Tid Scan on idem_outbox"}},
		{"list dead", "outbox_list.sql", []any{int16(4), int64(0), 100}, []string{"idem_outbox_dead"}},
		{"list pending", "outbox_list.sql", []any{int16(1), int64(0), 100}, []string{"idem_outbox_claim"}},
		{"list in flight", "outbox_list.sql", []any{int16(2), int64(0), 100}, []string{"idem_outbox_claim"}},
		{"list done", "outbox_list.sql", []any{int16(3), int64(0), 100}, []string{"idem_outbox_pkey"}},
		{"get", "outbox_get.sql", []any{int64(7)}, []string{"idem_outbox_pkey"}},
	} {
		for _, generic := range []bool{false, true} {
			if generic && c.file == "outbox_list.sql" {
				continue // ListIntents runs it unprepared: always a custom plan
			}
			plan := explain(t, b.pool, generic, readSQL(t, c.file), c.args...)
			for _, w := range c.want {
				if !strings.Contains(plan, w) {
					t.Errorf("%s (generic %v): no %q in the plan:\n%s", c.name, generic, w, plan)
				}
			}
			if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Sort") {
				t.Errorf("%s (generic %v): a scan of the table or a sort:\n%s", c.name, generic, plan)
			}
		}
	}

	// Run the claim and count the buffers its search touched (the CTE; the
	// UPDATE's are a few per row claimed, for the row and its indexes): a
	// few dozen pages, not the table's thousands.
	var search, total int
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+readSQL(t, "outbox_claim.sql"),
			now, []byte("r"), now.Add(time.Minute), 32, skip)
		if err != nil {
			return err
		}
		plans, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			return err
		}
		type node struct {
			Name  string  `json:"Subplan Name"`
			Hit   float64 `json:"Shared Hit Blocks"`
			Read  float64 `json:"Shared Read Blocks"`
			Plans []node  `json:"Plans"`
		}
		var out []struct{ Plan node }
		if err := json.Unmarshal(plans[0], &out); err != nil {
			return err
		}
		total = int(out[0].Plan.Hit + out[0].Plan.Read)
		for _, p := range out[0].Plan.Plans {
			if p.Name == "CTE claimable" {
				search = int(p.Hit + p.Read)
			}
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	var pages int
	if err := b.pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE relname = 'idem_outbox' AND relnamespace = current_schema()::regnamespace`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if search == 0 || search > 300 {
		t.Errorf("a claim of 32 searched %d buffers (%d in all); the table has %d pages", search, total, pages)
	}
	got := claimAt(t, s, "r", now, 32, "legacy")
	if len(got) != 32 {
		t.Fatalf("claimed %d, want 32", len(got))
	}
	for _, in := range got {
		if in.Target == "legacy" || in.DueAt.After(now) {
			t.Fatalf("claimed %+v", in)
		}
	}
	t.Logf("a claim of 32 among 200,000 rows searched %d buffers, %d in all; the table has %d pages", search, total, pages)
}

// BenchmarkOutboxMeasure measures the outbox on a large table; it reports
// figures and asserts nothing. It runs once whatever b.N, for about two
// minutes:
//
//	go test -run '^$' -bench OutboxMeasure -benchtime 1x ./store/pgstore/
//
// Enqueue 1,000,000 intents through EnqueueTx in transactions of 10,000 (4
// at once; a quarter of them in streams of 4); the rate of one-intent
// transactions from 8 goroutines, with EnqueueTx and with the same insert
// without pg_notify; the time of a claim of 32 on the full table; the drain
// rate of 2 relays claiming 32 and completing each for 20 s; and claims
// behind the cases the claim index does not skip.
func BenchmarkOutboxMeasure(b *testing.B) {
	for b.Loop() {
		measureOutbox(b)
	}
}

func measureOutbox(b *testing.B) {
	ctx := context.Background()
	pool := migratedPool(b)
	s := newStore(b, pool, nil)
	now := start.Add(time.Hour)

	// 1,000,000 through EnqueueTx.
	const total, perTx, writers = 1_000_000, 10_000, 4
	began := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for t := w; t < total/perTx; t += writers {
				err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					for i := range perTx {
						in := intent("pay", "")
						if n := t*perTx + i; n%4 == 0 {
							in.Stream = fmt.Sprintf("order-%d", n/16)
						}
						if _, _, err := s.EnqueueTx(ctx, tx, in); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	took := time.Since(began)
	b.Logf("enqueue: %d intents through EnqueueTx in transactions of %d, %d at once: %v, %.0f intents/s",
		total, perTx, writers, took.Round(time.Millisecond), total/took.Seconds())

	// One-intent transactions, with and without the notification.
	noNotify := strings.Replace(readSQL(b, "outbox_enqueue.sql"), "(SELECT pg_notify('idem_outbox', current_schema()))", "(SELECT 1)", 1)
	for _, c := range []struct {
		name    string
		enqueue func(ctx context.Context, tx pgx.Tx) error
	}{
		{"EnqueueTx (pg_notify)", func(ctx context.Context, tx pgx.Tx) error {
			_, _, err := s.EnqueueTx(ctx, tx, intent("small", ""))
			return err
		}},
		{"same insert, no pg_notify", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, noNotify, []byte("small"), "POST", "/", []byte("{}"), nil, nil, nil, start, start)
			return err
		}},
	} {
		var n atomic.Int64
		stop := time.Now().Add(3 * time.Second)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if err := s.InTx(ctx, c.enqueue); err != nil {
						b.Error(err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		b.Logf("one-intent transactions, 8 goroutines, %s: %.0f tx/s", c.name, float64(n.Load())/3)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM idem_outbox WHERE target = 'small'`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE idem_outbox`); err != nil {
		b.Fatal(err)
	}

	// Claims of 32 on the full table, settled at once.
	claim := func(owner string) ([]store.Intent, time.Duration) {
		t0 := time.Now()
		got, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: owner, Now: now, Lease: time.Minute, Limit: 32})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		return got, d
	}
	var times []time.Duration
	for range 50 {
		got, d := claim("m")
		times = append(times, d)
		for _, in := range got {
			if err := s.CompleteIntent(ctx, in.Fence(), 200, now); err != nil {
				b.Fatal(err)
			}
		}
	}
	slices.Sort(times)
	b.Logf("claim of 32 on %d rows: median %v, p90 %v, max %v", total, times[len(times)/2], times[len(times)*9/10], times[len(times)-1])

	// The drain: 2 relays, 20 s; then 20 s more with a VACUUM of the table
	// every 2 s, as autovacuum would run on a busy queue (the test server
	// may run without it).
	for _, vacuum := range []bool{false, true} {
		var (
			done                      atomic.Int64
			claimTimes, completeTimes [2][]time.Duration
			vacuums                   atomic.Int64
		)
		stop := time.Now().Add(20 * time.Second)
		if vacuum {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if _, err := pool.Exec(ctx, `VACUUM idem_outbox`); err != nil {
						b.Error(err)
						return
					}
					vacuums.Add(1)
					time.Sleep(2 * time.Second)
				}
			})
		}
		for r := range 2 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					got, d := claim(fmt.Sprintf("relay-%d", r))
					claimTimes[r] = append(claimTimes[r], d)
					for _, in := range got {
						t0 := time.Now()
						if err := s.CompleteIntent(ctx, in.Fence(), 200, now); err != nil {
							b.Error(err)
							return
						}
						completeTimes[r] = append(completeTimes[r], time.Since(t0))
					}
					done.Add(int64(len(got)))
				}
			})
		}
		wg.Wait()
		cl := append(claimTimes[0], claimTimes[1]...)
		co := append(completeTimes[0], completeTimes[1]...)
		slices.Sort(cl)
		slices.Sort(co)
		b.Logf("drain, 2 relays claiming 32 and completing each (%d VACUUMs meanwhile): %d intents in 20 s, %.0f intents/s; "+
			"claim median %v, p90 %v, max %v; complete median %v, p90 %v",
			vacuums.Load(), done.Load(), float64(done.Load())/20, cl[len(cl)/2], cl[len(cl)*9/10], cl[len(cl)-1], co[len(co)/2], co[len(co)*9/10])
	}
}

// BenchmarkOutboxClaimBehind measures claims of 32 behind 100,000 rows that
// cannot be claimed, ahead of 1,000 claimable rows: rows not yet due (which
// the claim index passes over), rows of a skipped target and rows of one
// stream whose head is in flight (which the claim reads and rejects). Run
// it like BenchmarkOutboxMeasure.
func BenchmarkOutboxClaimBehind(b *testing.B) {
	ctx := context.Background()
	now := start.Add(time.Hour)
	for _, c := range []struct {
		name, rows string
	}{
		{"not yet due", `$2::timestamptz + interval '1 hour', 'pay'::bytea, NULL::bytea, NULL::bigint`},
		{"of a skipped target", `$2::timestamptz - interval '1 hour', 'legacy'::bytea, NULL::bytea, NULL::bigint`},
		{"of one stream whose head is in flight", `$2::timestamptz - interval '1 hour', 'pay'::bytea, 'long'::bytea, g::bigint`},
	} {
		p := migratedPool(b)
		ps := newStore(b, p, nil)
		_, err := p.Exec(ctx, `
			INSERT INTO idem_outbox (due_at, target, stream, seq, enqueued_at, method, path, body)
			SELECT `+c.rows+`, $1, 'POST', '/', ''::bytea FROM generate_series(1, 100000) AS g`, start, now)
		if err == nil {
			_, err = p.Exec(ctx, `
				INSERT INTO idem_outbox (due_at, enqueued_at, target, method, path, body)
				SELECT $1, $1, 'pay', 'POST', '/', ''::bytea FROM generate_series(1, 1000)`, start)
		}
		if err == nil {
			_, err = p.Exec(ctx, `UPDATE idem_outbox SET state = 2, lease_until = $1, epoch = 1 WHERE stream = 'long' AND seq = 1`, now.Add(time.Hour))
		}
		if err == nil {
			_, err = p.Exec(ctx, `VACUUM ANALYZE idem_outbox`)
		}
		if err != nil {
			b.Fatal(err)
		}
		var times []time.Duration
		for range max(b.N, 10) {
			t0 := time.Now()
			got, err := ps.ClaimIntents(ctx, store.OutboxClaim{Owner: "m", Now: now, Lease: time.Minute, Limit: 32, Skip: []string{"legacy"}})
			times = append(times, time.Since(t0))
			if err != nil || len(got) != 32 {
				b.Fatalf("%s: claimed %d, %v", c.name, len(got), err)
			}
		}
		slices.Sort(times)
		b.Logf("claim of 32 behind 100,000 rows %s: median %v, max %v", c.name, times[len(times)/2], times[len(times)-1])
	}
}

// With Config.OutboxNotifyAfterCommit, an enqueue notifies no one: the
// caller's NotifyOutbox after its commit does.
func TestOutboxNotifyAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := setup(t)
	pool := singleConnPool(t, b.pool)
	s := newStore(t, pool, nil)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake, err := s.OutboxWakeups(wctx)
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := pgstore.New(b.pool, &pgstore.Config{OutboxNotifyAfterCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	id, seq := enqueue(t, quiet, intent("pay", "s"))
	noWakeup(t, wake, "after a quiet enqueue's commit")
	if err := quiet.NotifyOutbox(ctx); err != nil {
		t.Fatal(err)
	}
	wakeup(t, wake, "after NotifyOutbox")
	// The intent is there, as any other.
	got, err := quiet.ClaimIntents(ctx, store.OutboxClaim{Limit: 10, Owner: "r", Lease: time.Minute, Now: start})
	if err != nil || len(got) != 1 || got[0].ID != id || seq != 1 || got[0].Sequence != 1 {
		t.Fatalf("claimed %+v %v", got, err)
	}
}
