package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

var (
	evA  = store.EventKey{Source: "src", ID: "a"}
	evB  = store.EventKey{Source: "src", ID: "b"}
	evC  = store.EventKey{Source: "src", ID: "c"}
	strm = store.StreamKey{Source: "src", Subject: "order/1"}
)

// mustTx runs fn in s.InTx and fails the test on an error.
func mustTx(t *testing.T, s *Store, fn func(ctx context.Context, tx *sql.Tx) error) {
	t.Helper()
	if err := s.InTx(ctx, fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

// inboxStatus returns the status of key's inbox row, 0 when absent.
func inboxStatus(t *testing.T, db *sql.DB, key store.EventKey) store.EventStatus {
	t.Helper()
	var st int64
	err := db.QueryRow(`SELECT status FROM idem_inbox WHERE source = ? AND id = ?`, key.Source, key.ID).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return store.EventStatus(st)
}

// record is RecordEventTx that fails the test on an error.
func record(t *testing.T, s *Store, tx *sql.Tx, key store.EventKey) (store.EventStatus, bool) {
	t.Helper()
	st, ins, err := s.RecordEventTx(ctx, tx, key, t0)
	if err != nil {
		t.Fatalf("RecordEventTx(%v): %v", key, err)
	}
	return st, ins
}

func TestRecordEventTx(t *testing.T) {
	t.Parallel()

	t.Run("InsertThenDuplicate", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			if st, ins := record(t, s, tx, evA); !ins || st != 0 {
				t.Fatalf("first RecordEventTx = %v, %v; want inserted", st, ins)
			}
			if st, ins := record(t, s, tx, evA); ins || st != store.EventDone {
				t.Fatalf("same tx again = %v, %v; want done, not inserted", st, ins)
			}
			return nil
		})
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			if st, ins := record(t, s, tx, evA); ins || st != store.EventDone {
				t.Fatalf("next tx = %v, %v; want done, not inserted", st, ins)
			}
			// Another source with the same id is another event.
			if _, ins := record(t, s, tx, store.EventKey{Source: "other", ID: "a"}); !ins {
				t.Fatal("another source's id was taken for a duplicate")
			}
			return nil
		})
		var at int64
		if err := b.db.QueryRow(`SELECT received_at FROM idem_inbox WHERE source = 'src' AND id = 'a'`).Scan(&at); err != nil || at != t0.UnixMicro() {
			t.Fatalf("received_at = %d, %v; want %d", at, err, t0.UnixMicro())
		}
	})

	t.Run("DeadStatus", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: evA, Event: []byte("{}")}); err != nil {
				return err
			}
			if st, ins := record(t, s, tx, evA); ins || st != store.EventDead {
				t.Fatalf("RecordEventTx of a dead event = %v, %v; want dead, not inserted", st, ins)
			}
			return nil
		})
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		boom := errors.New("boom")
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			record(t, s, tx, evA)
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx = %v, want boom", err)
		}
		if inboxStatus(t, b.db, evA) != 0 {
			t.Fatal("a rolled-back inbox row was stored")
		}
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			if _, ins := record(t, s, tx, evA); !ins {
				t.Fatal("RecordEventTx after the rollback did not insert")
			}
			return nil
		})
	})

	t.Run("ConcurrentOneInserts", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			inserted int
		)
		for range 8 {
			wg.Go(func() {
				err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					_, ins, err := s.RecordEventTx(ctx, tx, evA, t0)
					if ins {
						mu.Lock()
						inserted++
						mu.Unlock()
					}
					return err
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if inserted != 1 {
			t.Fatalf("%d transactions inserted the row, want 1", inserted)
		}
	})
}

func TestStreamState(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		state, err := s.LockStreamTx(ctx, tx, strm)
		if err != nil || state != nil {
			t.Fatalf("LockStreamTx of a new stream = %q, %v; want nil", state, err)
		}
		return s.PutStreamTx(ctx, tx, strm, []byte("v1"), time.Time{})
	})
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		state, err := s.LockStreamTx(ctx, tx, strm)
		if err != nil || string(state) != "v1" {
			t.Fatalf("LockStreamTx = %q, %v; want v1", state, err)
		}
		if err := s.PutStreamTx(ctx, tx, strm, []byte("v2"), t0); err != nil {
			return err
		}
		// Another subject of the source is another stream.
		other := store.StreamKey{Source: strm.Source, Subject: "order/2"}
		if state, err := s.LockStreamTx(ctx, tx, other); err != nil || state != nil {
			t.Fatalf("LockStreamTx of another subject = %q, %v; want nil", state, err)
		}
		return s.PutStreamTx(ctx, tx, other, nil, time.Time{})
	})
	var since sql.NullInt64
	if err := b.db.QueryRow(`SELECT gap_since FROM idem_streams WHERE subject = 'order/1'`).Scan(&since); err != nil || since.Int64 != t0.UnixMicro() {
		t.Fatalf("gap_since = %v, %v; want t0", since, err)
	}
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		state, err := s.LockStreamTx(ctx, tx, store.StreamKey{Source: strm.Source, Subject: "order/2"})
		if err != nil || state == nil || len(state) != 0 {
			t.Fatalf("LockStreamTx of a stored empty state = %#v, %v; want empty and not nil", state, err)
		}
		// Clearing the gap stores NULL.
		return s.PutStreamTx(ctx, tx, strm, []byte("v3"), time.Time{})
	})
	if err := b.db.QueryRow(`SELECT gap_since FROM idem_streams WHERE subject = 'order/1'`).Scan(&since); err != nil || since.Valid {
		t.Fatalf("gap_since = %v, %v; want NULL", since, err)
	}

	// A rolled-back put leaves the stored state.
	boom := errors.New("boom")
	err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.PutStreamTx(ctx, tx, strm, []byte("lost"), t0); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		if state, err := s.LockStreamTx(ctx, tx, strm); err != nil || string(state) != "v3" {
			t.Fatalf("LockStreamTx after a rollback = %q, %v; want v3", state, err)
		}
		return nil
	})
}

func TestParked(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	other := store.StreamKey{Source: strm.Source, Subject: "order/2"}
	ev := func(seq int64) store.ParkedEvent {
		return store.ParkedEvent{Sequence: seq, Event: fmt.Appendf(nil, `{"seq":%d}`, seq)}
	}
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		for _, seq := range []int64{3, 4, 5, 7} {
			if err := s.ParkTx(ctx, tx, strm, ev(seq)); err != nil {
				return err
			}
		}
		if err := s.ParkTx(ctx, tx, other, ev(3)); err != nil {
			t.Fatalf("parking the same sequence on another stream: %v", err)
		}
		if err := s.ParkTx(ctx, tx, strm, store.ParkedEvent{Sequence: 4, Event: []byte("x")}); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("parking sequence 4 twice = %v, want ErrCorrupt", err)
		}
		return nil
	})

	// Missing and repeated sequences are ErrCorrupt; the caller rolls back.
	for _, seqs := range [][]int64{{3, 6}, {3, 3}} {
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := s.UnparkTx(ctx, tx, strm, seqs)
			return err
		})
		if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("UnparkTx(%v) = %v, want ErrCorrupt", seqs, err)
		}
	}

	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		got, err := s.UnparkTx(ctx, tx, strm, []int64{5, 3})
		if err != nil {
			return err
		}
		if want := []store.ParkedEvent{ev(5), ev(3)}; !reflect.DeepEqual(got, want) {
			t.Fatalf("UnparkTx(5, 3) = %+v, want %+v", got, want)
		}
		if got, err := s.UnparkTx(ctx, tx, strm, nil); err != nil || len(got) != 0 {
			t.Fatalf("UnparkTx(nil) = %v, %v", got, err)
		}
		if _, err := s.UnparkTx(ctx, tx, strm, []int64{3}); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("UnparkTx of an unparked sequence = %v, want ErrCorrupt", err)
		}
		return nil
	})
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		// Missing sequences are ignored.
		if err := s.DropParkedTx(ctx, tx, strm, []int64{4, 99}); err != nil {
			return err
		}
		if err := s.DropParkedTx(ctx, tx, strm, nil); err != nil {
			return err
		}
		if _, err := s.UnparkTx(ctx, tx, strm, []int64{4}); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("UnparkTx of a dropped sequence = %v, want ErrCorrupt", err)
		}
		// What is left: 7 here, 3 on the other stream.
		got, err := s.UnparkTx(ctx, tx, strm, []int64{7})
		if err != nil || !reflect.DeepEqual(got, []store.ParkedEvent{ev(7)}) {
			t.Fatalf("UnparkTx(7) = %+v, %v", got, err)
		}
		got, err = s.UnparkTx(ctx, tx, other, []int64{3})
		if err != nil || !reflect.DeepEqual(got, []store.ParkedEvent{ev(3)}) {
			t.Fatalf("UnparkTx(other, 3) = %+v, %v", got, err)
		}
		return nil
	})
}

func TestGaps(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	other := store.StreamKey{Source: strm.Source, Subject: "order/2"}
	gaps := []store.GapRecord{
		{Stream: strm, From: 5, To: 6, Delta: true, FirstSeen: t0.Add(2 * time.Second)},
		{Stream: other, From: 2, To: 2, Delta: false, FirstSeen: t0},
		{Stream: strm, From: 9, To: 12, Delta: true, FirstSeen: t0.Add(time.Second)},
		{Stream: other, From: 7, To: 8, Delta: false, FirstSeen: t0.Add(time.Second)}, // tie: after the one above
	}
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		for _, g := range gaps {
			if err := s.RecordGapTx(ctx, tx, g); err != nil {
				return err
			}
		}
		return nil
	})
	got, err := s.ListGaps(ctx, nil, 10)
	if want := []store.GapRecord{gaps[1], gaps[2], gaps[3], gaps[0]}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ListGaps(all) = %+v, %v; want %+v", got, err, want)
	}
	got, err = s.ListGaps(ctx, nil, 2)
	if want := []store.GapRecord{gaps[1], gaps[2]}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ListGaps(all, 2) = %+v, %v; want %+v", got, err, want)
	}
	got, err = s.ListGaps(ctx, &strm, 10)
	if want := []store.GapRecord{gaps[2], gaps[0]}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ListGaps(strm) = %+v, %v; want %+v", got, err, want)
	}
	got, err = s.ListGaps(ctx, &store.StreamKey{Source: "none", Subject: "x"}, 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("ListGaps(unknown stream) = %+v, %v; want none", got, err)
	}
	if _, err := s.ListGaps(ctx, nil, 0); err == nil {
		t.Fatal("ListGaps(limit 0) succeeded")
	}
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()

	letter := func(key store.EventKey, n int) store.DeadLetter {
		return store.DeadLetter{
			ID:          999, // ignored
			Key:         key,
			Stream:      strm,
			Sequence:    int64(n),
			Reason:      fmt.Sprint("reason ", n),
			Event:       fmt.Appendf(nil, `{"n":%d}`, n),
			Attempts:    n,
			FirstFailed: t0.Add(time.Duration(n) * time.Microsecond),
			LastFailed:  t0.Add(time.Duration(n) * time.Second),
		}
	}
	deadLetter := func(t *testing.T, s *Store, d store.DeadLetter) int64 {
		t.Helper()
		var id int64
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			var err error
			id, err = s.DeadLetterTx(ctx, tx, d)
			return err
		})
		return id
	}
	take := func(t *testing.T, s *Store, id int64) (store.DeadLetter, bool, error) {
		t.Helper()
		var (
			d       store.DeadLetter
			wasDead bool
		)
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var err error
			d, wasDead, err = s.TakeDeadLetterTx(ctx, tx, id)
			return err
		})
		return d, wasDead, err
	}

	t.Run("TakeDead", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// One event recorded as done first, one never recorded.
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			record(t, s, tx, evA)
			return nil
		})
		idA, idB := deadLetter(t, s, letter(evA, 1)), deadLetter(t, s, letter(evB, 2))
		if idA < 1 || idB <= idA {
			t.Fatalf("ids %d, %d; want increasing from 1", idA, idB)
		}
		if inboxStatus(t, b.db, evA) != store.EventDead || inboxStatus(t, b.db, evB) != store.EventDead {
			t.Fatal("DeadLetterTx did not mark both inbox rows dead")
		}
		d, wasDead, err := take(t, s, idB)
		want := letter(evB, 2)
		want.ID = idB
		if err != nil || !wasDead || !reflect.DeepEqual(d, want) {
			t.Fatalf("TakeDeadLetterTx = %+v, %v, %v; want %+v, true", d, wasDead, err, want)
		}
		if inboxStatus(t, b.db, evB) != 0 {
			t.Fatal("the dead inbox row was not deleted")
		}
		if _, _, err := take(t, s, idB); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("taking it again = %v, want ErrNotFound", err)
		}
		if _, _, err := take(t, s, 12345); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("taking an unknown id = %v, want ErrNotFound", err)
		}
		// The highest id was taken; the next is still higher.
		if idC := deadLetter(t, s, letter(evC, 3)); idC <= idB {
			t.Fatalf("id %d after taking %d: ids were reused", idC, idB)
		}
	})

	t.Run("TakeDone", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		idA, idB := deadLetter(t, s, letter(evA, 1)), deadLetter(t, s, letter(evB, 2))
		// a's dead row went away (as if expired) and a was delivered again
		// and handled; b's row went away for good.
		if _, err := b.db.Exec(`DELETE FROM idem_inbox`); err != nil {
			t.Fatal(err)
		}
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			record(t, s, tx, evA)
			return nil
		})
		if _, wasDead, err := take(t, s, idA); err != nil || wasDead {
			t.Fatalf("TakeDeadLetterTx over a done row = %v, %v; want wasDead false", wasDead, err)
		}
		if inboxStatus(t, b.db, evA) != store.EventDone {
			t.Fatal("the done inbox row was not left alone")
		}
		if _, wasDead, err := take(t, s, idB); err != nil || wasDead {
			t.Fatalf("TakeDeadLetterTx without a row = %v, %v; want wasDead false", wasDead, err)
		}
	})

	t.Run("TakeRolledBack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		id := deadLetter(t, s, letter(evA, 1))
		boom := errors.New("boom")
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, _, err := s.TakeDeadLetterTx(ctx, tx, id); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if inboxStatus(t, b.db, evA) != store.EventDead {
			t.Fatal("a rolled-back take changed the inbox row")
		}
		if got, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{Limit: 10}); err != nil || len(got) != 1 {
			t.Fatalf("ListDeadLetters = %+v, %v; want the dead letter back", got, err)
		}
	})

	t.Run("ListPages", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		var want []store.DeadLetter
		for i := range 5 {
			d := letter(store.EventKey{Source: "src", ID: fmt.Sprint("e", i)}, i+1)
			d.ID = deadLetter(t, s, d)
			want = append(want, d)
		}
		var got []store.DeadLetter
		after, pages := int64(0), 0
		for {
			page, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			pages++
			got = append(got, page...)
			after = page[len(page)-1].ID
		}
		if pages != 3 || !reflect.DeepEqual(got, want) {
			t.Fatalf("%d pages of %+v; want 3 pages of %+v", pages, got, want)
		}
		page, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{After: want[1].ID, Limit: 100})
		if err != nil || len(page) != 3 || page[0].ID != want[2].ID {
			t.Fatalf("ListDeadLetters(after the 2nd) = %+v, %v", page, err)
		}
		if _, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{}); err == nil {
			t.Fatal("ListDeadLetters(limit 0) succeeded")
		}
	})
}

func TestOverdueStreams(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	key := func(subject string) store.StreamKey { return store.StreamKey{Source: "src", Subject: subject} }
	since := map[string]time.Time{
		"c":    t0.Add(3 * time.Second),
		"a":    t0.Add(1 * time.Second),
		"b2":   t0.Add(2 * time.Second),
		"b1":   t0.Add(2 * time.Second), // same time as b2: by key
		"none": {},
		"late": t0.Add(time.Hour),
	}
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		for subject, at := range since {
			if err := s.PutStreamTx(ctx, tx, key(subject), []byte("s"), at); err != nil {
				return err
			}
		}
		return nil
	})
	before := t0.Add(3 * time.Second) // at or before: c is included
	got, err := s.OverdueStreams(ctx, before, 10)
	if want := []store.StreamKey{key("a"), key("b1"), key("b2"), key("c")}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("OverdueStreams = %v, %v; want %v", got, err, want)
	}
	got, err = s.OverdueStreams(ctx, before, 2)
	if want := []store.StreamKey{key("a"), key("b1")}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("OverdueStreams(limit 2) = %v, %v; want %v", got, err, want)
	}
	// A stream whose gaps closed is no longer overdue.
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		return s.PutStreamTx(ctx, tx, key("a"), []byte("s"), time.Time{})
	})
	got, err = s.OverdueStreams(ctx, t0.Add(time.Second), 10)
	if err != nil || len(got) != 0 {
		t.Fatalf("OverdueStreams after closing a = %v, %v; want none", got, err)
	}
	if _, err := s.OverdueStreams(ctx, before, 0); err == nil {
		t.Fatal("OverdueStreams(limit 0) succeeded")
	}
}

func TestSweepInbox(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	// 5 done rows received at t0..t0+4s, 2 dead ones (old), 3 gaps at
	// t0..t0+2s and one at t0+1h.
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		for i := range 5 {
			k := store.EventKey{Source: "src", ID: fmt.Sprint("done", i)}
			if _, _, err := s.RecordEventTx(ctx, tx, k, t0.Add(time.Duration(i)*time.Second)); err != nil {
				return err
			}
		}
		for i := range 2 {
			k := store.EventKey{Source: "src", ID: fmt.Sprint("dead", i)}
			if _, _, err := s.RecordEventTx(ctx, tx, k, t0.Add(-time.Hour)); err != nil {
				return err
			}
			if _, err := s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: k, LastFailed: t0.Add(-time.Hour)}); err != nil {
				return err
			}
		}
		for i := range 3 {
			if err := s.RecordGapTx(ctx, tx, store.GapRecord{Stream: strm, From: int64(i), To: int64(i), FirstSeen: t0.Add(time.Duration(i) * time.Second)}); err != nil {
				return err
			}
		}
		return s.RecordGapTx(ctx, tx, store.GapRecord{Stream: strm, From: 10, To: 10, FirstSeen: t0.Add(time.Hour)})
	})
	count := func(table string) int {
		var n int
		if err := b.db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	before := t0.Add(4 * time.Second) // strictly before: done4 stays
	// Up to 2 of each table: the 2 oldest done rows and the 2 oldest gaps.
	if n, err := s.SweepInbox(ctx, before, 2); err != nil || n != 4 {
		t.Fatalf("SweepInbox(2) = %d, %v; want 4", n, err)
	}
	if inboxStatus(t, b.db, store.EventKey{Source: "src", ID: "done1"}) != 0 || inboxStatus(t, b.db, store.EventKey{Source: "src", ID: "done2"}) == 0 {
		t.Fatal("SweepInbox did not take the oldest rows first")
	}
	if n, err := s.SweepInbox(ctx, before, 100); err != nil || n != 3 {
		t.Fatalf("SweepInbox(100) = %d, %v; want the 2 done rows and 1 gap left", n, err)
	}
	if n, err := s.SweepInbox(ctx, before, 100); err != nil || n != 0 {
		t.Fatalf("third SweepInbox = %d, %v; want 0", n, err)
	}
	if count("idem_inbox") != 3 || count("idem_gaps") != 1 {
		t.Fatalf("%d inbox rows and %d gaps left, want done4, the 2 dead rows, and the late gap", count("idem_inbox"), count("idem_gaps"))
	}
	for i := range 2 {
		if inboxStatus(t, b.db, store.EventKey{Source: "src", ID: fmt.Sprint("dead", i)}) != store.EventDead {
			t.Fatal("SweepInbox deleted a dead row")
		}
	}
	if _, err := s.SweepInbox(ctx, before, 0); err == nil {
		t.Fatal("SweepInbox(limit 0) succeeded")
	}
}

// TestInboxPlans checks that the inbox's statements search their indexes
// instead of scanning a table.
func TestInboxPlans(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	src, sub := sql.Named("source", "s"), sql.Named("subject", "x")
	before, limit := sql.Named("before", int64(0)), sql.Named("limit", int64(1))
	for _, c := range []struct {
		name, query string
		args        []any
		want        string
	}{
		{"inbox sweep", inboxSweepSQL, []any{before, limit}, "INDEX idem_inbox_sweep (received_at<?)"},
		{"gaps sweep", gapsSweepSQL, []any{before, limit}, "INDEX idem_gaps_first_seen (first_seen<?)"},
		{"overdue", overdueSQL, []any{before, limit}, "INDEX idem_streams_gap_since (gap_since>? AND gap_since<?)"},
		{"gaps of a stream", gapsListStreamSQL, []any{src, sub, limit}, "USING INDEX idem_gaps_stream (source=? AND subject=?)"},
		{"all gaps", gapsListSQL, []any{limit}, "USING INDEX idem_gaps_first_seen"},
		{"unpark", unparkSQL, []any{src, sub, sql.Named("seqs", "[1]")}, "INDEX sqlite_autoindex_idem_parked_1 (source=? AND subject=? AND seq=?)"},
		{"status", inboxStatusSQL, []any{src, sql.Named("id", "a")}, "USING INDEX sqlite_autoindex_idem_inbox_1 (source=? AND id=?)"},
		{"stream", streamGetSQL, []any{src, sub}, "USING PRIMARY KEY (source=? AND subject=?)"},
	} {
		plan := queryPlan(t, b.db, c.query, c.args...)
		if !strings.Contains(plan, c.want) || strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("%s: plan lacks %q or sorts:\n%s", c.name, c.want, plan)
		}
	}
}

// TestInboxEventBytes checks that stored events come back byte for byte.
func TestInboxEventBytes(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	raw := []byte("\x00\xff{\"data\":\"\u00e9\"}\n")
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.ParkTx(ctx, tx, strm, store.ParkedEvent{Sequence: 1, Event: raw}); err != nil {
			return err
		}
		got, err := s.UnparkTx(ctx, tx, strm, []int64{1})
		if err != nil || !bytes.Equal(got[0].Event, raw) {
			t.Fatalf("UnparkTx = %+v, %v; want %q", got, err, raw)
		}
		_, err = s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: evA, Event: raw})
		return err
	})
	got, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{Limit: 1})
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Event, raw) {
		t.Fatalf("ListDeadLetters = %+v, %v; want the event byte for byte", got, err)
	}
}

// TestInboxTxFromAnotherHandle: the per-event statements are prepared on
// the store's pool, and a transaction from another handle on the same file
// runs them unprepared instead of failing.
func TestInboxTxFromAnotherHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db, other := twoHandles(t)
	for i, h := range []*sql.DB{db, other, db} {
		tx, err := h.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		sk := store.StreamKey{Source: "src", Subject: "o-1"}
		_, ins, err := s.RecordEventTx(ctx, tx, store.EventKey{Source: "src", ID: fmt.Sprint(i)}, time.Unix(1, 0))
		if err == nil && !ins {
			err = errors.New("not inserted")
		}
		if err == nil {
			_, err = s.LockStreamTx(ctx, tx, sk)
		}
		if err == nil {
			err = s.PutStreamTx(ctx, tx, sk, []byte("{}"), time.Time{})
		}
		if err != nil {
			tx.Rollback()
			t.Fatalf("transaction %d: %v", i, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompleteTxFromAnotherHandle: a request key's completion in the
// caller's transaction runs the store's prepared statement bound to that
// transaction, and a transaction from another handle on the same file runs
// it unprepared instead of failing; its fence holds either way.
func TestCompleteTxFromAnotherHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db, other := twoHandles(t)
	for i, h := range []*sql.DB{db, other, db, other} {
		c := mustClaim(t, s, claimParams(fmt.Sprint("k", i), "fp", "o1"))
		f := fenceOf(c.Record)
		complete := func(f store.Fence) error {
			tx, err := h.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CompleteTx(ctx, tx, store.CompleteParams{Fence: f, Response: []byte("ok"), Retention: time.Hour}); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}
		stale := f
		stale.Epoch++
		if err := complete(stale); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("handle %d: a stale fence completed: %v", i, err)
		}
		if err := complete(f); err != nil {
			t.Fatalf("handle %d: %v", i, err)
		}
		if got, err := s.Get(ctx, f.Key); err != nil || got.State != store.StateDone || string(got.Response) != "ok" {
			t.Fatalf("handle %d: %+v, %v; want done", i, got, err)
		}
	}
}

// twoHandles returns a store on a new migrated file, the handle it was
// made with, and another handle on the same file.
func twoHandles(t *testing.T) (s *Store, db, other *sql.DB) {
	t.Helper()
	db, path := openMigrated(t, nil)
	s, err := New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if other, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return s, db, other
}

// TestPreparedOnAnotherHandle: the statements statements.on runs prepared
// work in a transaction of the store's handle, of another handle on the
// same file (which cannot use them, and runs their text), and on the pool,
// through each of Exec, QueryRow and Query; and a text that is not one of
// them runs as it is.
func TestPreparedOnAnotherHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, db, other := twoHandles(t)
	check := func(what string, q dbtx) {
		t.Helper()
		if _, err := q.ExecContext(ctx, taskStatusSQL, sql.Named("app", "a"), sql.Named("id", "t"),
			sql.Named("execution_id", "e"), sql.Named("status", 1)); err != nil {
			t.Errorf("%s: exec: %v", what, err)
		}
		var id string
		if err := q.QueryRowContext(ctx, taskGetSQL, sql.Named("app", "a"), sql.Named("id", "t")).Scan(&id); !errors.Is(err, sql.ErrNoRows) {
			t.Errorf("%s: query row: %v, want no rows", what, err)
		}
		rows, err := q.QueryContext(ctx, unparkSQL, sql.Named("source", "s"), sql.Named("subject", "o"), sql.Named("seqs", "[1]"))
		if err != nil {
			t.Errorf("%s: query: %v", what, err)
		} else if rows.Next() || rows.Close() != nil {
			t.Errorf("%s: query: a row, or %v", what, rows.Err())
		}
		var one int
		if err := q.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Errorf("%s: an unprepared text: %d, %v", what, one, err)
		}
	}
	check("the pool", s.stmts.on(nil))
	for _, h := range []*sql.DB{db, other, db} {
		tx, err := h.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		check(map[bool]string{true: "the store's handle", false: "another handle"}[h == db], s.stmts.on(tx))
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}
