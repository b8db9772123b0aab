package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// waitTimeout bounds every wait for another goroutine in these tests.
const waitTimeout = 10 * time.Second

var errRollback = errors.New("test: roll back")

// heldTx is a transaction of the store's InTx that the test commits or
// rolls back when it chooses, so that two transactions can overlap.
type heldTx struct {
	tx     pgx.Tx
	pid    uint32 // the backend running it, to watch it wait
	finish chan error
	done   chan error
	once   sync.Once
	err    error
}

// holdTx begins a transaction and returns it held open; the test ends it
// with commit or rollback (t.Cleanup rolls it back otherwise).
func holdTx(t *testing.T, s *pgstore.Store) *heldTx {
	t.Helper()
	h := &heldTx{finish: make(chan error), done: make(chan error, 1)}
	ready := make(chan pgx.Tx, 1)
	go func() {
		h.done <- s.InTx(context.Background(), func(_ context.Context, tx pgx.Tx) error {
			ready <- tx
			return <-h.finish
		})
	}()
	select {
	case h.tx = <-ready:
	case err := <-h.done:
		t.Fatalf("begin: %v", err)
	}
	h.pid = h.tx.Conn().PgConn().PID()
	t.Cleanup(h.rollback)
	return h
}

// end ends the transaction once, committing when with is nil, and returns
// InTx's error.
func (h *heldTx) end(with error) error {
	h.once.Do(func() {
		h.finish <- with
		h.err = <-h.done
	})
	return h.err
}

func (h *heldTx) commit(t *testing.T) {
	t.Helper()
	if err := h.end(nil); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func (h *heldTx) rollback() { _ = h.end(errRollback) }

// async runs f in a goroutine and returns its pending result.
func async[T any](f func() (T, error)) *call[T] {
	c := &call[T]{result: make(chan result[T], 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		v, err := f()
		c.result <- result[T]{v, err}
	}()
	return c
}

// call is a call running in another goroutine.
type call[T any] struct {
	result chan result[T] // receives the result once
	done   chan struct{}  // closed when the call has returned
}

type result[T any] struct {
	v   T
	err error
}

// receive waits for an async call's result.
func receive[T any](t *testing.T, c *call[T]) (T, error) {
	t.Helper()
	select {
	case r := <-c.result:
		return r.v, r.err
	case <-time.After(waitTimeout):
		t.Fatalf("no result after %v", waitTimeout)
		panic("unreachable")
	}
}

// waitBlocked waits until backend pid waits for a lock, which proves that
// the statement it runs is blocked by another transaction, and checks that
// the call running it has not returned.
func waitBlocked[T any](t *testing.T, pool *pgxpool.Pool, pid uint32, c *call[T]) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var waiting *string
		err := pool.QueryRow(context.Background(),
			`SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&waiting)
		if err != nil {
			t.Fatalf("pg_stat_activity: %v", err)
		}
		if waiting != nil && *waiting == "Lock" {
			break
		}
		select {
		case r := <-c.result:
			t.Fatalf("returned (%v, %v) without waiting for the other transaction", r.v, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never waited for a lock", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case r := <-c.result:
		t.Fatalf("returned (%v, %v) while waiting for a lock", r.v, r.err)
	default:
	}
}

// inTx runs fn in a transaction of s and fails the test on error.
func inTx(t *testing.T, s *pgstore.Store, fn func(ctx context.Context, tx pgx.Tx) error) {
	t.Helper()
	if err := s.InTx(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// inboxStatus reads the inbox row of k: its status, 0 when absent.
func inboxStatus(t *testing.T, pool *pgxpool.Pool, k store.EventKey) int {
	t.Helper()
	var st int
	err := pool.QueryRow(context.Background(), `SELECT status FROM idem_inbox WHERE source = $1 AND id = $2`,
		[]byte(k.Source), []byte(k.ID)).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func count(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	evKey = store.EventKey{Source: "https://shop.example/orders", ID: "e-1"}
	stKey = store.StreamKey{Source: "https://shop.example/orders", Subject: "order-1"}
)

func TestRecordEventTx(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		st, ins, err := s.RecordEventTx(ctx, tx, evKey, start)
		if err != nil || !ins || st != 0 {
			t.Errorf("first: status %v inserted %v, %v; want 0, true", st, ins, err)
		}
		st, ins, err = s.RecordEventTx(ctx, tx, evKey, start.Add(time.Hour))
		if err != nil || ins || st != store.EventDone {
			t.Errorf("again in the same tx: status %v inserted %v, %v; want done, false", st, ins, err)
		}
		return nil
	})
	var at time.Time
	if err := b.pool.QueryRow(context.Background(), `SELECT received_at FROM idem_inbox`).Scan(&at); err != nil || !at.Equal(start) {
		t.Fatalf("received_at = %v, %v; want the first record's %v", at, err, start)
	}
	// Keys are bytes: NUL, invalid UTF-8 and the empty string are keys too,
	// each its own.
	keys := []store.EventKey{
		{Source: "a\x00b", ID: "\xff\xfe"}, {Source: "a", ID: "\x00b\xff"}, {Source: "", ID: ""}, {Source: "a\x00", ID: "b"},
	}
	for _, k := range keys {
		inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
			_, ins, err := s.RecordEventTx(ctx, tx, k, start)
			if err == nil && !ins {
				t.Errorf("%q: not inserted", k)
			}
			return err
		})
	}
	if n := count(t, b.pool, "idem_inbox"); n != 1+len(keys) {
		t.Fatalf("%d inbox rows, want %d", n, 1+len(keys))
	}
}

// A second transaction recording a key the first has recorded but not
// committed waits for it, then sees its row, or inserts after a rollback.
func TestRecordEventTxWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run("commit="+strconv.FormatBool(commit), func(t *testing.T) {
			t.Parallel()
			s, bundle := setup(t)
			a, b := holdTx(t, s), holdTx(t, s)
			if _, ins, err := s.RecordEventTx(context.Background(), a.tx, evKey, start); err != nil || !ins {
				t.Fatalf("A: inserted %v, %v", ins, err)
			}
			type rec struct {
				st  store.EventStatus
				ins bool
			}
			got := async(func() (rec, error) {
				st, ins, err := s.RecordEventTx(context.Background(), b.tx, evKey, start)
				return rec{st, ins}, err
			})
			t.Cleanup(func() { a.rollback(); <-got.done; b.rollback() }) // in this order, should the test fail
			waitBlocked(t, bundle.pool, b.pid, got)
			want := rec{store.EventDone, false}
			if commit {
				a.commit(t)
			} else {
				a.rollback()
				want = rec{0, true}
			}
			r, err := receive(t, got)
			if err != nil || r != want {
				t.Fatalf("B: %+v, %v; want %+v", r, err, want)
			}
			b.commit(t)
			if n := count(t, bundle.pool, "idem_inbox"); n != 1 {
				t.Fatalf("%d inbox rows, want 1", n)
			}
		})
	}
}

func TestLockStreamTxNewStream(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		for i := range 2 { // the placeholder row locked by this tx reads as new too
			st, err := s.LockStreamTx(ctx, tx, stKey)
			if err != nil || st != nil {
				t.Errorf("lock %d of a new stream: %q, %v; want nil", i, st, err)
			}
		}
		return nil
	})
	// A stream locked but never written is still new, and not overdue.
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		st, err := s.LockStreamTx(ctx, tx, stKey)
		if err != nil || st != nil {
			t.Errorf("placeholder stream: %q, %v; want nil", st, err)
		}
		return nil
	})
	if n := count(t, b.pool, "idem_streams"); n != 1 {
		t.Fatalf("%d stream rows, want the 1 placeholder", n)
	}
	if got, err := s.OverdueStreams(context.Background(), start.Add(1000*time.Hour), 10); err != nil || len(got) != 0 {
		t.Fatalf("OverdueStreams = %v, %v; the placeholder has no gap", got, err)
	}
	// A nil state is stored as empty, so that the stream is no longer new.
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		return s.PutStreamTx(ctx, tx, stKey, nil, time.Time{})
	})
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		st, err := s.LockStreamTx(ctx, tx, stKey)
		if err != nil || st == nil || len(st) != 0 {
			t.Errorf("after PutStreamTx(nil): %#v, %v; want empty, not nil", st, err)
		}
		return nil
	})
}

// The heart of per-stream order: a second transaction locking a stream
// that has no row yet waits for the first, then reads what it stored (or
// finds the stream new when it rolled back). Also for an existing stream.
func TestLockStreamTxWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		existing       bool
		commit         bool
		want           []byte
		wantStreamRows int
	}{
		{"new/commit", false, true, []byte("from A"), 1},
		{"new/rollback", false, false, nil, 1}, // B's placeholder
		{"existing/commit", true, true, []byte("from A"), 1},
		{"existing/rollback", true, false, []byte("before"), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, bundle := setup(t)
			ctx := context.Background()
			if c.existing {
				inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
					return s.PutStreamTx(ctx, tx, stKey, []byte("before"), time.Time{})
				})
			}
			a, b := holdTx(t, s), holdTx(t, s)
			if _, err := s.LockStreamTx(ctx, a.tx, stKey); err != nil {
				t.Fatalf("A: %v", err)
			}
			got := async(func() ([]byte, error) { return s.LockStreamTx(ctx, b.tx, stKey) })
			t.Cleanup(func() { a.rollback(); <-got.done; b.rollback() })
			waitBlocked(t, bundle.pool, b.pid, got)
			if err := s.PutStreamTx(ctx, a.tx, stKey, []byte("from A"), start); err != nil {
				t.Fatalf("A: put: %v", err)
			}
			if c.commit {
				a.commit(t)
			} else {
				a.rollback()
			}
			st, err := receive(t, got)
			if err != nil || !bytes.Equal(st, c.want) || (st == nil) != (c.want == nil) {
				t.Fatalf("B: %q, %v; want %q", st, err, c.want)
			}
			b.commit(t)
			if n := count(t, bundle.pool, "idem_streams"); n != c.wantStreamRows {
				t.Fatalf("%d stream rows, want %d", n, c.wantStreamRows)
			}
		})
	}
}

func TestPutStreamTx(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	state := []byte{0, 1, 0xff, 'x'}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := s.LockStreamTx(ctx, tx, stKey); err != nil {
			return err
		}
		return s.PutStreamTx(ctx, tx, stKey, state, start.Add(123456789*time.Nanosecond))
	})
	// Put without a lock works too (it upserts).
	other := store.StreamKey{Source: stKey.Source, Subject: "order-2"}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		return s.PutStreamTx(ctx, tx, other, []byte("o"), start.Add(-time.Second))
	})
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		st, err := s.LockStreamTx(ctx, tx, stKey)
		if err != nil || !bytes.Equal(st, state) {
			t.Errorf("state = %q, %v; want %q", st, err, state)
		}
		return err
	})
	// gapSince is kept to the microsecond: the stream is overdue at
	// start+123456µs, not a microsecond before.
	got, err := s.OverdueStreams(ctx, start.Add(123456*time.Microsecond), 10)
	if err != nil || !slices.Equal(got, []store.StreamKey{other, stKey}) {
		t.Fatalf("OverdueStreams = %v, %v", got, err)
	}
	got, err = s.OverdueStreams(ctx, start.Add(123455*time.Microsecond), 10)
	if err != nil || !slices.Equal(got, []store.StreamKey{other}) {
		t.Fatalf("OverdueStreams a microsecond earlier = %v, %v", got, err)
	}
	// A zero gapSince clears the gap.
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		return s.PutStreamTx(ctx, tx, other, []byte("o"), time.Time{})
	})
	if got, err := s.OverdueStreams(ctx, start, 10); err != nil || len(got) != 0 {
		t.Fatalf("OverdueStreams after the gap closed = %v, %v", got, err)
	}
}

func TestOverdueStreamsOrderAndLimit(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	mk := func(sub string) store.StreamKey { return store.StreamKey{Source: "src", Subject: sub} }
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		for _, x := range []struct {
			sub   string
			since time.Time
		}{
			{"c", start.Add(-time.Minute)},
			{"b", start.Add(-time.Minute)}, // same instant as c: ordered by key
			{"a", start.Add(-time.Hour)},
			{"later", start.Add(time.Second)},
			{"nogap", time.Time{}},
		} {
			if err := s.PutStreamTx(ctx, tx, mk(x.sub), []byte("s"), x.since); err != nil {
				return err
			}
		}
		_, err := s.LockStreamTx(ctx, tx, mk("placeholder"))
		return err
	})
	for _, c := range []struct {
		limit int
		want  []store.StreamKey
	}{
		{10, []store.StreamKey{mk("a"), mk("b"), mk("c")}},
		{2, []store.StreamKey{mk("a"), mk("b")}},
		{1, []store.StreamKey{mk("a")}},
	} {
		got, err := s.OverdueStreams(ctx, start, c.limit)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("OverdueStreams(limit %d) = %v, %v; want %v", c.limit, got, err, c.want)
		}
	}
	for _, limit := range []int{0, -1} {
		if _, err := s.OverdueStreams(ctx, start, limit); err == nil {
			t.Errorf("OverdueStreams(limit %d): no error", limit)
		}
	}
}

func TestParkUnparkDrop(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	other := store.StreamKey{Source: stKey.Source, Subject: "order-2"}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		for _, seq := range []int64{3, 1, 2, 4} {
			if err := s.ParkTx(ctx, tx, stKey, store.ParkedEvent{Sequence: seq, Event: []byte{byte(seq), 0, 0xff}}); err != nil {
				return err
			}
		}
		if err := s.ParkTx(ctx, tx, stKey, store.ParkedEvent{Sequence: 5}); err != nil { // nil event
			return err
		}
		return s.ParkTx(ctx, tx, other, store.ParkedEvent{Sequence: 1, Event: []byte("other")})
	})
	// A duplicate is ErrCorrupt, and the transaction stays usable: the
	// statement did not fail.
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		err := s.ParkTx(ctx, tx, stKey, store.ParkedEvent{Sequence: 2, Event: []byte("again")})
		if !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("parking 2 twice: %v, want ErrCorrupt", err)
		}
		_, _, err = s.RecordEventTx(ctx, tx, evKey, start)
		return err
	})
	if inboxStatus(t, b.pool, evKey) != 1 {
		t.Fatal("the transaction after a duplicate park did not commit")
	}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		got, err := s.UnparkTx(ctx, tx, stKey, []int64{3, 1, 5})
		if err != nil {
			return err
		}
		want := []store.ParkedEvent{{Sequence: 3, Event: []byte{3, 0, 0xff}}, {Sequence: 1, Event: []byte{1, 0, 0xff}}, {Sequence: 5, Event: []byte{}}}
		if !slices.EqualFunc(got, want, func(a, b store.ParkedEvent) bool {
			return a.Sequence == b.Sequence && bytes.Equal(a.Event, b.Event)
		}) {
			t.Errorf("UnparkTx = %v, want %v in the order asked", got, want)
		}
		if got, err := s.UnparkTx(ctx, tx, stKey, nil); err != nil || len(got) != 0 {
			t.Errorf("UnparkTx(nil) = %v, %v", got, err)
		}
		return nil
	})
	for _, seqs := range [][]int64{{1}, {2, 9}, {2, 2}} {
		err := s.InTx(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := s.UnparkTx(ctx, tx, stKey, seqs)
			return err
		})
		if !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("UnparkTx(%v) = %v, want ErrCorrupt", seqs, err)
		}
	}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		if err := s.DropParkedTx(ctx, tx, stKey, []int64{2, 99}); err != nil {
			return err
		}
		return s.DropParkedTx(ctx, tx, stKey, nil)
	})
	// Left: 4 of the stream and 1 of the other one.
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		got, err := s.UnparkTx(ctx, tx, stKey, []int64{4})
		if err != nil || len(got) != 1 || got[0].Sequence != 4 {
			t.Errorf("UnparkTx(4) = %v, %v", got, err)
		}
		got, err = s.UnparkTx(ctx, tx, other, []int64{1})
		if err != nil || len(got) != 1 || string(got[0].Event) != "other" {
			t.Errorf("other stream: %v, %v", got, err)
		}
		return nil
	})
	if n := count(t, b.pool, "idem_parked"); n != 0 {
		t.Fatalf("%d parked rows left, want 0", n)
	}
}

func TestGaps(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	other := store.StreamKey{Source: stKey.Source, Subject: "order-2"}
	gaps := []store.GapRecord{
		{Stream: stKey, From: 7, To: 8, FirstSeen: start.Add(time.Minute)},
		{Stream: other, From: 2, To: 2, Delta: true, FirstSeen: start},
		{Stream: stKey, From: 2, To: 4, Delta: true, FirstSeen: start},
		{Stream: stKey, From: 5, To: 5, FirstSeen: start}, // same instant: after the one recorded before it
	}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		for _, g := range gaps {
			if err := s.RecordGapTx(ctx, tx, g); err != nil {
				return err
			}
		}
		return nil
	})
	for _, c := range []struct {
		key   *store.StreamKey
		limit int
		want  []store.GapRecord
	}{
		{nil, 10, []store.GapRecord{gaps[1], gaps[2], gaps[3], gaps[0]}},
		{nil, 2, []store.GapRecord{gaps[1], gaps[2]}},
		{&stKey, 10, []store.GapRecord{gaps[2], gaps[3], gaps[0]}},
		{&stKey, 1, []store.GapRecord{gaps[2]}},
		{&other, 10, []store.GapRecord{gaps[1]}},
		{&store.StreamKey{Source: "none"}, 10, nil},
	} {
		got, err := s.ListGaps(ctx, c.key, c.limit)
		if err != nil || !slices.EqualFunc(got, c.want, func(a, b store.GapRecord) bool {
			return a.Stream == b.Stream && a.From == b.From && a.To == b.To && a.Delta == b.Delta &&
				a.FirstSeen.Equal(b.FirstSeen) && a.FirstSeen.Location() == time.UTC
		}) {
			t.Errorf("ListGaps(%v, %d) = %+v, %v; want %+v", c.key, c.limit, got, err, c.want)
		}
	}
	if _, err := s.ListGaps(ctx, nil, 0); err == nil {
		t.Error("ListGaps(limit 0): no error")
	}
}

func TestDeadLetterTx(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	d := store.DeadLetter{
		ID:          999, // ignored
		Key:         store.EventKey{Source: "src\x00", ID: "id\xff"},
		Stream:      store.StreamKey{Source: "stream", Subject: "subj\xfe"},
		Sequence:    42,
		Reason:      "invalid payload: \x00\xffbad",
		Event:       []byte{'{', 0, 0xff, '}'},
		Attempts:    3,
		FirstFailed: start.Add(-time.Hour),
		LastFailed:  start,
	}
	var id1, id2 int64
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		// Recorded first, as package inbox does: the row turns dead.
		if _, _, err := s.RecordEventTx(ctx, tx, d.Key, start); err != nil {
			return err
		}
		var err error
		id1, err = s.DeadLetterTx(ctx, tx, d)
		return err
	})
	if id1 == 999 || inboxStatus(t, b.pool, d.Key) != 2 {
		t.Fatalf("id %d, inbox status %d; want a new id and dead", id1, inboxStatus(t, b.pool, d.Key))
	}
	// Not recorded before: the row is inserted, dead.
	k2 := store.EventKey{Source: "src", ID: "two"}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		id2, err = s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: k2, Reason: "r", FirstFailed: start, LastFailed: start})
		return err
	})
	if id2 <= id1 || inboxStatus(t, b.pool, k2) != 2 {
		t.Fatalf("second id %d after %d, inbox status %d; want increasing and dead", id2, id1, inboxStatus(t, b.pool, k2))
	}
	// Redeliveries see it dead.
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		st, ins, err := s.RecordEventTx(ctx, tx, k2, start)
		if err != nil || ins || st != store.EventDead {
			t.Errorf("redelivery: %v %v %v; want dead, not inserted", st, ins, err)
		}
		return err
	})
	list, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{Limit: 10})
	if err != nil || len(list) != 2 {
		t.Fatalf("ListDeadLetters = %+v, %v", list, err)
	}
	got := list[0]
	want := d
	want.ID = id1
	want.Reason = "invalid payload: \uFFFD\uFFFDbad" // text holds no NUL nor invalid UTF-8
	if got.ID != want.ID || got.Key != want.Key || got.Stream != want.Stream || got.Sequence != want.Sequence ||
		got.Reason != want.Reason || !bytes.Equal(got.Event, want.Event) || got.Attempts != want.Attempts ||
		!got.FirstFailed.Equal(want.FirstFailed) || !got.LastFailed.Equal(want.LastFailed) ||
		got.FirstFailed.Location() != time.UTC {
		t.Fatalf("dead letter = %+v, want %+v", got, want)
	}
	if list[1].Event == nil || len(list[1].Event) != 0 {
		t.Fatalf("nil event listed as %#v, want empty", list[1].Event)
	}
}

func TestTakeDeadLetterTx(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	deadLetter := func(k store.EventKey) int64 {
		var id int64
		inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
			var err error
			id, err = s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: k, Stream: stKey, Reason: "r", Event: []byte(k.ID),
				Attempts: 1, FirstFailed: start, LastFailed: start})
			return err
		})
		return id
	}
	take := func(id int64) (store.DeadLetter, bool, error) {
		var (
			d       store.DeadLetter
			wasDead bool
		)
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			var err error
			d, wasDead, err = s.TakeDeadLetterTx(ctx, tx, id)
			return err
		})
		return d, wasDead, err
	}

	// Dead row: deleted with the dead letter.
	k1 := store.EventKey{Source: "src", ID: "one"}
	id1 := deadLetter(k1)
	d, wasDead, err := take(id1)
	if err != nil || !wasDead || d.ID != id1 || d.Key != k1 || string(d.Event) != "one" {
		t.Fatalf("take: %+v, wasDead %v, %v", d, wasDead, err)
	}
	if st := inboxStatus(t, b.pool, k1); st != 0 {
		t.Fatalf("inbox row after take: status %d, want none", st)
	}
	if _, _, err := take(id1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("take twice: %v, want ErrNotFound", err)
	}
	if _, _, err := take(1 << 40); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("take unknown: %v, want ErrNotFound", err)
	}

	// Done row: the dead row went away (here deleted by hand, as if swept)
	// and the event was delivered again and handled. The row stays.
	k2 := store.EventKey{Source: "src", ID: "two"}
	id2 := deadLetter(k2)
	if _, err := b.pool.Exec(ctx, `DELETE FROM idem_inbox WHERE id = $1`, []byte(k2.ID)); err != nil {
		t.Fatal(err)
	}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		_, ins, err := s.RecordEventTx(ctx, tx, k2, start)
		if err == nil && !ins {
			t.Error("re-record: not inserted")
		}
		return err
	})
	if _, wasDead, err := take(id2); err != nil || wasDead {
		t.Fatalf("take with a done row: wasDead %v, %v; want false", wasDead, err)
	}
	if st := inboxStatus(t, b.pool, k2); st != 1 {
		t.Fatalf("done row after take: status %d, want 1 (kept)", st)
	}

	// No row at all: wasDead false.
	k3 := store.EventKey{Source: "src", ID: "three"}
	id3 := deadLetter(k3)
	if _, err := b.pool.Exec(ctx, `DELETE FROM idem_inbox WHERE id = $1`, []byte(k3.ID)); err != nil {
		t.Fatal(err)
	}
	if _, wasDead, err := take(id3); err != nil || wasDead {
		t.Fatalf("take without a row: wasDead %v, %v; want false", wasDead, err)
	}

	// Two transactions taking one dead letter: the second waits, then
	// finds it gone.
	k4 := store.EventKey{Source: "src", ID: "four"}
	id4 := deadLetter(k4)
	a, bt := holdTx(t, s), holdTx(t, s)
	if _, wasDead, err := s.TakeDeadLetterTx(ctx, a.tx, id4); err != nil || !wasDead {
		t.Fatalf("A: wasDead %v, %v", wasDead, err)
	}
	got := async(func() (bool, error) {
		_, wasDead, err := s.TakeDeadLetterTx(ctx, bt.tx, id4)
		return wasDead, err
	})
	t.Cleanup(func() { a.rollback(); <-got.done; bt.rollback() })
	waitBlocked(t, b.pool, bt.pid, got)
	a.commit(t)
	if _, err := receive(t, got); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("B: %v, want ErrNotFound", err)
	}
	if n := count(t, b.pool, "idem_dead_letters"); n != 0 {
		t.Fatalf("%d dead letters left", n)
	}
}

func TestListDeadLettersPaging(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	var ids []int64
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		for i := range 7 {
			id, err := s.DeadLetterTx(ctx, tx, store.DeadLetter{
				Key: store.EventKey{Source: "src", ID: strconv.Itoa(i)}, Reason: "r", FirstFailed: start, LastFailed: start})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	var pages [][]int64
	for after := int64(0); ; {
		page, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		var p []int64
		for _, d := range page {
			p = append(p, d.ID)
		}
		pages = append(pages, p)
		after = page[len(page)-1].ID
	}
	want := [][]int64{ids[0:3], ids[3:6], ids[6:7]}
	if !slices.EqualFunc(pages, want, slices.Equal) {
		t.Fatalf("pages %v, want %v", pages, want)
	}
	if page, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{After: ids[4], Limit: 10}); err != nil || len(page) != 2 || page[0].ID != ids[5] {
		t.Fatalf("after %d: %+v, %v", ids[4], page, err)
	}
	for _, limit := range []int{0, -5} {
		if _, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{Limit: limit}); err == nil {
			t.Errorf("ListDeadLetters(limit %d): no error", limit)
		}
	}
}

func TestSweepInbox(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	old := start.Add(-48 * time.Hour)
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		for i := range 5 {
			if _, _, err := s.RecordEventTx(ctx, tx, store.EventKey{Source: "s", ID: "old" + strconv.Itoa(i)}, old); err != nil {
				return err
			}
			if _, err := s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: store.EventKey{Source: "s", ID: "dead" + strconv.Itoa(i)},
				Reason: "r", FirstFailed: old, LastFailed: old}); err != nil {
				return err
			}
		}
		// At the cut-off: kept ("received before before" is strict).
		if _, _, err := s.RecordEventTx(ctx, tx, store.EventKey{Source: "s", ID: "edge"}, start); err != nil {
			return err
		}
		for i := range 3 {
			if err := s.RecordGapTx(ctx, tx, store.GapRecord{Stream: stKey, From: int64(i), To: int64(i), FirstSeen: old}); err != nil {
				return err
			}
		}
		return s.RecordGapTx(ctx, tx, store.GapRecord{Stream: stKey, From: 9, To: 9, FirstSeen: start})
	})
	// Each sweep deletes at most limit inbox rows and limit gaps.
	var runs []int
	for {
		n, err := s.SweepInbox(ctx, start, 2)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		runs = append(runs, n)
	}
	if want := []int{4, 3, 1}; !slices.Equal(runs, want) {
		t.Fatalf("sweeps deleted %v rows, want %v", runs, want)
	}
	if n := count(t, b.pool, "idem_inbox WHERE status = 2"); n != 5 {
		t.Fatalf("%d dead rows left, want all 5", n)
	}
	if n := count(t, b.pool, "idem_inbox WHERE status = 1"); n != 1 {
		t.Fatalf("%d done rows left, want the 1 at the cut-off", n)
	}
	if n := count(t, b.pool, "idem_gaps"); n != 1 {
		t.Fatalf("%d gaps left, want 1", n)
	}
	if _, err := s.SweepInbox(ctx, start, 0); err == nil {
		t.Error("SweepInbox(limit 0): no error")
	}
}

// A sweep never waits for a transaction holding an old done row (here one
// dead-lettering it), and leaves that row alone.
func TestSweepInboxSkipsLockedRows(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	old := start.Add(-48 * time.Hour)
	k := store.EventKey{Source: "s", ID: "busy"}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		_, _, err := s.RecordEventTx(ctx, tx, k, old)
		return err
	})
	a := holdTx(t, s)
	if _, err := s.DeadLetterTx(ctx, a.tx, store.DeadLetter{Key: k, Reason: "r", FirstFailed: start, LastFailed: start}); err != nil {
		t.Fatal(err)
	}
	sweepCtx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	n, err := s.SweepInbox(sweepCtx, start, 10)
	if err != nil || n != 0 {
		t.Fatalf("sweep beside a locked row: %d, %v; want 0 without waiting", n, err)
	}
	a.commit(t)
	if n, err := s.SweepInbox(ctx, start, 10); err != nil || n != 0 {
		t.Fatalf("sweep after it turned dead: %d, %v; want 0", n, err)
	}
	if st := inboxStatus(t, b.pool, k); st != 2 {
		t.Fatalf("status %d, want dead", st)
	}
}

// RecordEventLockStreamTx answers as RecordEventTx and LockStreamTx do, in
// one round trip: a new event on a new stream, the same event again (the
// stream's state as stored), and a second transaction on the stream waits
// for the first and sees what it stored.
func TestRecordEventLockStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	sk := store.StreamKey{Source: "src", Subject: "order-1"}
	at := time.Now()
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		existing, inserted, state, err := s.RecordEventLockStreamTx(ctx, tx, store.EventKey{Source: "src", ID: "e1"}, at, sk)
		if err != nil || !inserted || existing != 0 || state != nil {
			t.Fatalf("a new event on a new stream: %v %v %q %v", existing, inserted, state, err)
		}
		return s.PutStreamTx(ctx, tx, sk, []byte(`{"v":1}`), time.Time{})
	})
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		existing, inserted, state, err := s.RecordEventLockStreamTx(ctx, tx, store.EventKey{Source: "src", ID: "e1"}, at, sk)
		if err != nil || inserted || existing != store.EventDone || string(state) != `{"v":1}` {
			t.Fatalf("the same event again: %v %v %q %v", existing, inserted, state, err)
		}
		return nil
	})
	h := holdTx(t, s)
	if _, inserted, _, err := s.RecordEventLockStreamTx(ctx, h.tx, store.EventKey{Source: "src", ID: "e2"}, at, sk); err != nil || !inserted {
		t.Fatalf("e2: %v %v", inserted, err)
	}
	if err := s.PutStreamTx(ctx, h.tx, sk, []byte(`{"v":2}`), time.Time{}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		_ = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, _, state, err := s.RecordEventLockStreamTx(ctx, tx, store.EventKey{Source: "src", ID: "e3"}, at, sk)
			if err != nil {
				got <- err.Error()
				return err
			}
			got <- string(state)
			return nil
		})
	}()
	select {
	case v := <-got:
		t.Fatalf("the second transaction did not wait for the stream's lock: %q", v)
	case <-time.After(200 * time.Millisecond):
	}
	h.commit(t)
	if v := <-got; v != `{"v":2}` {
		t.Fatalf("after the first committed, the second read %q, want its state", v)
	}
}

// streamState reads the stream's stored state and whether it has a row.
func streamState(t *testing.T, pool *pgxpool.Pool, sk store.StreamKey) ([]byte, bool) {
	t.Helper()
	var state []byte
	err := pool.QueryRow(context.Background(), `SELECT state FROM idem_streams WHERE source = $1 AND subject = $2`,
		[]byte(sk.Source), []byte(sk.Subject)).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return state, true
}

// streamAtV1 returns a store whose stream order-1 holds {"v":1}.
func streamAtV1(t *testing.T) (*pgstore.Store, *testBundle, store.StreamKey) {
	t.Helper()
	s, bundle := setup(t)
	sk := store.StreamKey{Source: "src", Subject: "order-1"}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		return s.PutStreamTx(ctx, tx, sk, []byte(`{"v":1}`), time.Time{})
	})
	return s, bundle, sk
}

// setLater queues the record of event id and the compare and set of sk's
// stream from expect to next in tx, then sends a statement, which it goes
// out with; it returns that statement's error and what failed reports.
func setLater(ctx context.Context, s *pgstore.Store, tx pgx.Tx, sk store.StreamKey, id, expect, next string) (stmtErr, failedErr error) {
	failed, err := s.RecordEventSetStreamLaterTx(ctx, tx, store.EventKey{Source: "src", ID: id}, start, sk, []byte(expect), []byte(next))
	if err != nil {
		return err, err
	}
	if f := failed(); f != nil {
		return fmt.Errorf("failed() reported %w before the statement went out", f), f
	}
	_, stmtErr = tx.Exec(ctx, "SELECT 1")
	return stmtErr, failed()
}

// RecordEventSetStreamLaterTx records the event and sets the stream only
// when the event is new and the stream holds exactly the expected state;
// otherwise the statement it goes out with fails with ErrDuplicate or
// ErrStreamMoved, and nothing of the transaction commits. A set stream is
// locked until the transaction ends.
func TestRecordEventSetStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, bundle := setup(t)
	sk := store.StreamKey{Source: "src", Subject: "order-1"}
	// fails runs the queued statement in a transaction of its own, with a
	// business write, and checks that it fails with want and that the
	// transaction commits nothing.
	fails := func(what, id, expect, next string, want error) {
		t.Helper()
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			stmtErr, failedErr := setLater(ctx, s, tx, sk, id, expect, next)
			if !errors.Is(stmtErr, want) || !errors.Is(failedErr, want) {
				t.Errorf("%s: the statement failed with %v, failed() %v; want both %v", what, stmtErr, failedErr, want)
			}
			return stmtErr
		})
		if !errors.Is(err, want) {
			t.Errorf("%s: the transaction ended with %v, want %v", what, err, want)
		}
	}
	fails("a stream without a row", "e0", `{"v":0}`, `{"v":1}`, store.ErrStreamMoved)
	if st, ok := streamState(t, bundle.pool, sk); ok {
		t.Fatalf("a stream without a row got one: %q", st)
	}
	if n := inboxStatus(t, bundle.pool, store.EventKey{Source: "src", ID: "e0"}); n != 0 {
		t.Fatalf("a failed set recorded its event (status %d)", n)
	}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		return s.PutStreamTx(ctx, tx, sk, []byte(`{"v":1}`), time.Time{})
	})

	h := holdTx(t, s)
	if stmtErr, failedErr := setLater(ctx, s, h.tx, sk, "e1", `{"v":1}`, `{"v":2}`); stmtErr != nil || failedErr != nil {
		t.Fatalf("the expected state: %v, failed() %v; want set", stmtErr, failedErr)
	}
	// The set stream stays locked until the transaction ends.
	other := holdTx(t, s)
	got := async(func() ([]byte, error) { return s.LockStreamTx(ctx, other.tx, sk) })
	t.Cleanup(func() { h.rollback(); <-got.done; other.rollback() })
	waitBlocked(t, bundle.pool, other.pid, got)
	h.commit(t)
	if st, err := receive(t, got); err != nil || string(st) != `{"v":2}` {
		t.Fatalf("the lock after the set's commit read %q, %v", st, err)
	}
	other.rollback()
	if n := inboxStatus(t, bundle.pool, store.EventKey{Source: "src", ID: "e1"}); n != int(store.EventDone) {
		t.Fatalf("the event set is recorded with status %d, want done", n)
	}

	fails("a duplicate", "e1", `{"v":2}`, `{"v":3}`, store.ErrDuplicate)
	fails("a stale expected state", "e2", `{"v":1}`, `{"v":9}`, store.ErrStreamMoved)
	if st, _ := streamState(t, bundle.pool, sk); string(st) != `{"v":2}` {
		t.Fatalf("a failed set moved the stream to %q", st)
	}
	if n := inboxStatus(t, bundle.pool, store.EventKey{Source: "src", ID: "e2"}); n != 0 {
		t.Fatalf("a stale set recorded its event (status %d)", n)
	}

	// With nothing sent after it, it goes out with the COMMIT, which it
	// fails or lets through.
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.RecordEventSetStreamLaterTx(ctx, tx, store.EventKey{Source: "src", ID: "e3"}, start, sk, []byte(`{"v":1}`), []byte(`{"v":9}`))
		return err
	})
	if !errors.Is(err, store.ErrStreamMoved) || !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("a stale set with the commit: %v, want a rollback for a moved stream", err)
	}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.RecordEventSetStreamLaterTx(ctx, tx, store.EventKey{Source: "src", ID: "e3"}, start, sk, []byte(`{"v":2}`), []byte(`{"v":3}`))
		return err
	})
	if st, _ := streamState(t, bundle.pool, sk); string(st) != `{"v":3}` {
		t.Fatalf("a set with the commit left the stream at %q", st)
	}
}

// A compare and set waits for a transaction holding the stream's lock and
// compares with what it left: a stream it moved on is not set (and the
// set's transaction is aborted); one it left as it was is set.
func TestRecordEventSetStreamWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run("commit="+strconv.FormatBool(commit), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, bundle, sk := streamAtV1(t)
			a, b := holdTx(t, s), holdTx(t, s)
			if _, err := s.LockStreamTx(ctx, a.tx, sk); err != nil {
				t.Fatal(err)
			}
			if err := s.PutStreamTx(ctx, a.tx, sk, []byte(`{"v":2}`), time.Time{}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.tx.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err) // sends the queued put ahead of it
			}
			got := async(func() (error, error) { return setLater(ctx, s, b.tx, sk, "e1", `{"v":1}`, `{"v":3}`) })
			t.Cleanup(func() { a.rollback(); <-got.done; b.rollback() })
			waitBlocked(t, bundle.pool, b.pid, got)
			afterHolder(t, bundle.pool, sk, a, b, got, commit, store.ErrStreamMoved, `{"v":2}`, `{"v":3}`)
		})
	}
}

// An event another transaction is recording makes the set wait for it:
// once that transaction commits, the set fails as a duplicate and the
// stream is left alone; once it rolls back, the set records and sets. The
// set takes the event's row before the stream's lock, as the locked path
// does, so a transaction recording the same event and then locking the
// stream never deadlocks with it.
func TestRecordEventSetStreamAfterAConcurrentRecord(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run("commit="+strconv.FormatBool(commit), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, bundle, sk := streamAtV1(t)
			evKey := store.EventKey{Source: "src", ID: "e1"}
			a, b := holdTx(t, s), holdTx(t, s)
			if _, ins, err := s.RecordEventTx(ctx, a.tx, evKey, start); err != nil || !ins {
				t.Fatalf("A: inserted %v, %v", ins, err)
			}
			got := async(func() (error, error) { return setLater(ctx, s, b.tx, sk, "e1", `{"v":1}`, `{"v":2}`) })
			t.Cleanup(func() { a.rollback(); <-got.done; b.rollback() })
			waitBlocked(t, bundle.pool, b.pid, got)
			// A locks the stream now, as the locked path does after its
			// record: the set must not hold it.
			if _, err := s.LockStreamTx(ctx, a.tx, sk); err != nil {
				t.Fatalf("A could not lock the stream while the set waited: %v", err)
			}
			afterHolder(t, bundle.pool, sk, a, b, got, commit, store.ErrDuplicate, `{"v":1}`, `{"v":2}`)
		})
	}
}

// afterHolder ends a, the transaction that the set sent in b (got, from
// setLater) waits for, with a commit or a rollback, and checks the set:
// after a's commit it failed with want, in the statement it went out with
// and in failed() alike, and b's commit fails; after a's rollback it set
// the stream and b commits. The stream then holds ifCommit or
// ifRollback.
func afterHolder(t *testing.T, pool *pgxpool.Pool, sk store.StreamKey, a, b *heldTx, got *call[error], commit bool, want error, ifCommit, ifRollback string) {
	t.Helper()
	if commit {
		a.commit(t)
	} else {
		a.rollback()
	}
	stmtErr, failedErr := receive(t, got)
	if commit && (!errors.Is(stmtErr, want) || !errors.Is(failedErr, want)) {
		t.Fatalf("after the holder's commit: %v, failed() %v; want %v", stmtErr, failedErr, want)
	}
	if !commit && (stmtErr != nil || failedErr != nil) {
		t.Fatalf("after the holder's rollback: %v, failed() %v; want set", stmtErr, failedErr)
	}
	if err := b.end(nil); commit != (err != nil) {
		t.Fatalf("the set's commit: %v", err)
	}
	wantState := map[bool]string{true: ifCommit, false: ifRollback}[commit]
	if st, _ := streamState(t, pool, sk); string(st) != wantState {
		t.Fatalf("state %q, want %s", st, wantState)
	}
}
