package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseInbox checks store.InboxStore: each method's contract, and the
// concurrency the inbox relies on (one inbox row per event key, one
// decision at a time per stream, even a new one).
func exerciseInbox[TX any](t *testing.T, open Open[TX]) {
	newStore := onOwnClock[store.InboxStore[TX]](open)
	ctx := context.Background()
	at := testclock.Epoch0
	sk := store.StreamKey{Source: "https://shop.example/orders", Subject: "o-1"}
	ek := func(id string) store.EventKey { return store.EventKey{Source: sk.Source, ID: id} }
	errBoom := errors.New("boom")

	t.Run("RecordEventOnceAndRollback", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			_, ins, err := s.RecordEventTx(ctx, tx, ek("e1"), at)
			if err == nil && !ins {
				err = errors.New("first record not inserted")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.InTx(ctx, func(ctx context.Context, tx TX) error {
			st, ins, err := s.RecordEventTx(ctx, tx, ek("e1"), at)
			if err == nil && (ins || st != store.EventDone) {
				err = fmt.Errorf("second record: inserted %v status %v", ins, st)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// A rolled-back record leaves nothing behind.
		err = s.InTx(ctx, func(ctx context.Context, tx TX) error {
			if _, _, err := s.RecordEventTx(ctx, tx, ek("e2"), at); err != nil {
				return err
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Fatalf("InTx = %v, want boom", err)
		}
		mustInsert(t, s, ek("e2"), at, true)
	})

	t.Run("ConcurrentRecordsOneInsert", func(t *testing.T) {
		t.Parallel()
		s, ledger := newStore(t)
		const n = 32
		var (
			mu       sync.Mutex
			inserted int
		)
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			errs[i] = s.InTx(ctx, func(ctx context.Context, tx TX) error {
				_, ins, err := s.RecordEventTx(ctx, tx, ek("dup"), at)
				if err != nil || !ins {
					return err
				}
				mu.Lock()
				inserted++
				mu.Unlock()
				return ledger.Charge(ctx, tx, "dup")
			})
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("transactions failed: %v", err)
		}
		if c := charges(t, ledger, "dup"); inserted != 1 || c != 1 {
			t.Fatalf("inserted %d times, %d ledger rows; want 1 and 1", inserted, c)
		}
	})

	t.Run("RecordAtCommit", func(t *testing.T) {
		t.Parallel()
		s, ledger := newStore(t)
		rec, ok := s.(store.InboxCommitRecorder[TX])
		if !ok {
			t.Skip("the store records events before the commit only")
		}
		record := func(id string) error {
			return s.InTx(ctx, func(ctx context.Context, tx TX) error {
				if err := ledger.Charge(ctx, tx, id); err != nil {
					return err
				}
				return rec.RecordEventAtCommitTx(ctx, tx, ek(id), at)
			})
		}
		if err := record("c1"); err != nil {
			t.Fatal(err)
		}
		// Recorded before: the commit fails as a duplicate, and the
		// transaction's writes roll back with it.
		if err := record("c1"); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("a second record at the commit: %v, want ErrDuplicate", err)
		}
		mustInsert(t, s, ek("c1"), at, false)
		if c := charges(t, ledger, "c1"); c != 1 {
			t.Fatalf("%d ledger rows, want 1: the duplicate's writes committed", c)
		}
		// Recorded first by RecordEventTx: the same.
		mustInsert(t, s, ek("c2"), at, true)
		if err := record("c2"); !errors.Is(err, store.ErrDuplicate) || charges(t, ledger, "c2") != 0 {
			t.Fatalf("recorded at the commit after RecordEventTx: %v, %d ledger rows; want ErrDuplicate, 0", err, charges(t, ledger, "c2"))
		}

		// Concurrent deliveries: one commits, every other one is a
		// duplicate whose writes rolled back.
		const n = 16
		errs := make([]error, n)
		Concurrently(n, func(i int) { errs[i] = record("dup-at-commit") })
		committed := 0
		for _, err := range errs {
			switch {
			case err == nil:
				committed++
			case !errors.Is(err, store.ErrDuplicate):
				t.Fatalf("a concurrent record at the commit: %v", err)
			}
		}
		if c := charges(t, ledger, "dup-at-commit"); committed != 1 || c != 1 {
			t.Fatalf("%d commits, %d ledger rows; want 1 and 1", committed, c)
		}
	})

	t.Run("StreamLockSerialisesNewStream", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		const n = 24
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			errs[i] = s.InTx(ctx, func(ctx context.Context, tx TX) error {
				state, err := s.LockStreamTx(ctx, tx, sk)
				if err != nil {
					return err
				}
				c := 0
				if state != nil {
					if c, err = strconv.Atoi(string(state)); err != nil {
						return err
					}
				}
				return s.PutStreamTx(ctx, tx, sk, []byte(strconv.Itoa(c+1)), time.Time{})
			})
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var got []byte
		inTx(t, s, func(ctx context.Context, tx TX) error {
			var err error
			got, err = s.LockStreamTx(ctx, tx, sk)
			return err
		})
		if string(got) != strconv.Itoa(n) {
			t.Fatalf("counter = %q after %d increments: an update was lost", got, n)
		}
	})

	t.Run("ParkUnparkDrop", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		other := store.StreamKey{Source: sk.Source, Subject: "o-2"}
		inTx(t, s, func(ctx context.Context, tx TX) error {
			for _, seq := range []int64{9, 4, 7} {
				if err := s.ParkTx(ctx, tx, sk, store.ParkedEvent{Sequence: seq, Event: []byte{byte(seq), 0, 0xff}}); err != nil {
					return err
				}
			}
			if err := s.ParkTx(ctx, tx, other, store.ParkedEvent{Sequence: 4, Event: []byte("other")}); err != nil {
				return err
			}
			return nil
		})
		inTx(t, s, func(ctx context.Context, tx TX) error {
			err := s.ParkTx(ctx, tx, sk, store.ParkedEvent{Sequence: 7, Event: []byte("again")})
			if !errors.Is(err, store.ErrCorrupt) {
				return fmt.Errorf("parking 7 twice = %v, want ErrCorrupt", err)
			}
			return nil
		})
		inTx(t, s, func(ctx context.Context, tx TX) error {
			got, err := s.UnparkTx(ctx, tx, sk, []int64{4, 7})
			if err != nil {
				return err
			}
			if len(got) != 2 || got[0].Sequence != 4 || got[1].Sequence != 7 ||
				string(got[0].Event) != string([]byte{4, 0, 0xff}) || string(got[1].Event) != string([]byte{7, 0, 0xff}) {
				return fmt.Errorf("UnparkTx = %v", got)
			}
			if _, err := s.UnparkTx(ctx, tx, sk, []int64{4}); !errors.Is(err, store.ErrCorrupt) {
				return fmt.Errorf("unparking 4 again = %v, want ErrCorrupt", err)
			}
			return nil
		})
		inTx(t, s, func(ctx context.Context, tx TX) error {
			if err := s.DropParkedTx(ctx, tx, sk, []int64{9, 100}); err != nil {
				return err
			}
			if _, err := s.UnparkTx(ctx, tx, sk, []int64{9}); !errors.Is(err, store.ErrCorrupt) {
				return fmt.Errorf("9 after DropParkedTx: %v, want ErrCorrupt", err)
			}
			got, err := s.UnparkTx(ctx, tx, other, []int64{4})
			if err != nil || len(got) != 1 || string(got[0].Event) != "other" {
				return fmt.Errorf("other stream's parked event: %v, %v", got, err)
			}
			return nil
		})
	})

	t.Run("DeadLetters", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		var ids []int64
		for i := range 5 {
			d := store.DeadLetter{
				Key: ek("d" + strconv.Itoa(i)), Stream: sk, Sequence: int64(i + 1),
				Reason: "invalid payload " + strconv.Itoa(i), Event: []byte(`{"i":` + strconv.Itoa(i) + `}`),
				Attempts: i + 1, FirstFailed: at.Add(time.Duration(i) * time.Second), LastFailed: at.Add(time.Duration(i) * time.Minute),
			}
			inTx(t, s, func(ctx context.Context, tx TX) error {
				if i%2 == 0 { // recorded first, as package inbox does; the odd ones are inserted by DeadLetterTx
					if _, _, err := s.RecordEventTx(ctx, tx, d.Key, at); err != nil {
						return err
					}
				}
				id, err := s.DeadLetterTx(ctx, tx, d)
				ids = append(ids, id)
				return err
			})
		}
		if !slices.IsSorted(ids) || ids[0] == ids[len(ids)-1] {
			t.Fatalf("ids %v are not increasing", ids)
		}
		// Dead events are acknowledged as seen.
		inTx(t, s, func(ctx context.Context, tx TX) error {
			st, ins, err := s.RecordEventTx(ctx, tx, ek("d1"), at)
			if err == nil && (ins || st != store.EventDead) {
				err = fmt.Errorf("redelivered dead event: inserted %v status %v", ins, st)
			}
			return err
		})
		// Paging.
		var got []store.DeadLetter
		after := int64(0)
		for {
			page, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{After: after, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			if len(page) > 2 {
				t.Fatalf("page of %d, limit 2", len(page))
			}
			got = append(got, page...)
			after = page[len(page)-1].ID
		}
		if len(got) != 5 {
			t.Fatalf("listed %d dead letters, want 5", len(got))
		}
		for i, d := range got {
			if d.ID != ids[i] || d.Key != ek("d"+strconv.Itoa(i)) || d.Stream != sk || d.Sequence != int64(i+1) ||
				d.Reason != "invalid payload "+strconv.Itoa(i) || string(d.Event) != `{"i":`+strconv.Itoa(i)+`}` ||
				d.Attempts != i+1 || !d.FirstFailed.Equal(at.Add(time.Duration(i)*time.Second)) ||
				!d.LastFailed.Equal(at.Add(time.Duration(i)*time.Minute)) {
				t.Errorf("dead letter %d = %+v", i, d)
			}
		}
		if _, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{Limit: 0}); err == nil {
			t.Error("ListDeadLetters with limit 0: no error")
		}
		// Take: the dead inbox row goes with it, so the event can run again.
		inTx(t, s, func(ctx context.Context, tx TX) error {
			d, wasDead, err := s.TakeDeadLetterTx(ctx, tx, ids[0])
			if err != nil {
				return err
			}
			if !wasDead || d.Key != ek("d0") || string(d.Event) != `{"i":0}` || d.Attempts != 1 {
				return fmt.Errorf("TakeDeadLetterTx = %+v, wasDead %v", d, wasDead)
			}
			_, ins, err := s.RecordEventTx(ctx, tx, d.Key, at)
			if err == nil && !ins {
				err = errors.New("taken dead letter's event is still recorded")
			}
			return err
		})
		inTx(t, s, func(ctx context.Context, tx TX) error {
			_, _, err := s.TakeDeadLetterTx(ctx, tx, ids[0])
			if !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("taking twice = %v, want ErrNotFound", err)
			}
			return nil
		})
		// Requeue's cycle: take, record, fail again, dead again: a new ID.
		inTx(t, s, func(ctx context.Context, tx TX) error {
			d, wasDead, err := s.TakeDeadLetterTx(ctx, tx, ids[1])
			if err != nil || !wasDead {
				return fmt.Errorf("take %d: wasDead %v, %v", ids[1], wasDead, err)
			}
			if _, ins, err := s.RecordEventTx(ctx, tx, d.Key, at); err != nil || !ins {
				return fmt.Errorf("record after take: inserted %v, %v", ins, err)
			}
			d.Attempts++
			_, err = s.DeadLetterTx(ctx, tx, d)
			return err
		})
		page, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{After: ids[len(ids)-1], Limit: 10})
		if err != nil || len(page) != 1 || page[0].Key != ek("d1") || page[0].Attempts != 3 {
			t.Fatalf("dead again: %+v, %v", page, err)
		}
		mustInsert(t, s, ek("d1"), at, false)
	})

	t.Run("OverdueStreams", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		mk := func(sub string) store.StreamKey { return store.StreamKey{Source: sk.Source, Subject: sub} }
		inTx(t, s, func(ctx context.Context, tx TX) error {
			for _, x := range []struct {
				sub   string
				since time.Time
			}{
				{"late", at.Add(3 * time.Minute)},
				{"first", at.Add(-time.Hour)},
				{"nogap", time.Time{}},
				{"second", at.Add(-time.Minute)},
				{"edge", at},
			} {
				if _, err := s.LockStreamTx(ctx, tx, mk(x.sub)); err != nil {
					return err
				}
				if err := s.PutStreamTx(ctx, tx, mk(x.sub), []byte("{}"), x.since); err != nil {
					return err
				}
			}
			// A stream locked but never written is not overdue either.
			_, err := s.LockStreamTx(ctx, tx, mk("locked-only"))
			return err
		})
		got, err := s.OverdueStreams(ctx, at, 10)
		if err != nil {
			t.Fatal(err)
		}
		want := []store.StreamKey{mk("first"), mk("second"), mk("edge")}
		if !slices.Equal(got, want) {
			t.Fatalf("OverdueStreams = %v, want %v", got, want)
		}
		got, _ = s.OverdueStreams(ctx, at, 1)
		if !slices.Equal(got, want[:1]) {
			t.Fatalf("OverdueStreams limit 1 = %v", got)
		}
		// Closing the gap takes the stream off the list.
		inTx(t, s, func(ctx context.Context, tx TX) error {
			if _, err := s.LockStreamTx(ctx, tx, mk("first")); err != nil {
				return err
			}
			return s.PutStreamTx(ctx, tx, mk("first"), []byte("{}"), time.Time{})
		})
		got, _ = s.OverdueStreams(ctx, at, 10)
		if !slices.Equal(got, want[1:]) {
			t.Fatalf("after closing: %v, want %v", got, want[1:])
		}
		inTx(t, s, func(ctx context.Context, tx TX) error {
			st, err := s.LockStreamTx(ctx, tx, mk("second"))
			if err == nil && string(st) != "{}" {
				err = fmt.Errorf("state = %q", st)
			}
			return err
		})
	})

	t.Run("SweepAndGaps", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		old := at.Add(-48 * time.Hour)
		inTx(t, s, func(ctx context.Context, tx TX) error {
			for i := range 5 {
				if _, _, err := s.RecordEventTx(ctx, tx, ek("old"+strconv.Itoa(i)), old); err != nil {
					return err
				}
			}
			if _, _, err := s.RecordEventTx(ctx, tx, ek("new"), at); err != nil {
				return err
			}
			if _, _, err := s.RecordEventTx(ctx, tx, ek("dead"), old); err != nil {
				return err
			}
			if _, err := s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: ek("dead"), Stream: sk, Reason: "r", Event: []byte("x"), Attempts: 1, FirstFailed: old, LastFailed: old}); err != nil {
				return err
			}
			for i, g := range []store.GapRecord{
				{Stream: sk, From: 2, To: 3, Delta: true, FirstSeen: old},
				{Stream: store.StreamKey{Source: sk.Source, Subject: "o-2"}, From: 5, To: 5, FirstSeen: at},
				{Stream: sk, From: 7, To: 9, FirstSeen: at.Add(time.Second)},
			} {
				if err := s.RecordGapTx(ctx, tx, g); err != nil {
					return fmt.Errorf("gap %d: %w", i, err)
				}
			}
			return nil
		})
		gaps, err := s.ListGaps(ctx, &sk, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(gaps) != 2 || gaps[0].From != 2 || gaps[0].To != 3 || !gaps[0].Delta || !gaps[0].FirstSeen.Equal(old) ||
			gaps[1].From != 7 || gaps[1].To != 9 || gaps[1].Delta || gaps[1].Stream != sk {
			t.Fatalf("ListGaps(stream) = %+v", gaps)
		}
		all, err := s.ListGaps(ctx, nil, 10)
		if err != nil || len(all) != 3 {
			t.Fatalf("ListGaps(all) = %+v, %v", all, err)
		}
		if one, _ := s.ListGaps(ctx, nil, 1); len(one) != 1 || one[0].From != 2 {
			t.Fatalf("ListGaps limit 1 = %+v", one)
		}

		n, err := s.SweepInbox(ctx, at, 3)
		if err != nil {
			t.Fatal(err)
		}
		if n < 3 || n > 4 { // 3 inbox rows, and up to 3 gap records (1 is old)
			t.Fatalf("first sweep deleted %d, want 3 inbox rows (+ at most the 1 old gap)", n)
		}
		total := n
		for {
			n, err := s.SweepInbox(ctx, at, 3)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			total += n
		}
		if total != 6 { // 5 old done rows + 1 old gap
			t.Fatalf("swept %d rows in all, want 6", total)
		}
		for i := range 5 {
			mustInsert(t, s, ek("old"+strconv.Itoa(i)), at, true)
		}
		mustInsert(t, s, ek("new"), at, false)
		mustInsert(t, s, ek("dead"), at, false)
		if gaps, _ := s.ListGaps(ctx, nil, 10); len(gaps) != 2 {
			t.Fatalf("gaps after sweep: %+v", gaps)
		}
		if _, err := s.SweepInbox(ctx, at, 0); err == nil {
			t.Error("SweepInbox limit 0: no error")
		}
	})
}

func mustInsert[TX any](t *testing.T, s store.InboxStore[TX], k store.EventKey, at time.Time, want bool) {
	t.Helper()
	inTx(t, s, func(ctx context.Context, tx TX) error {
		_, ins, err := s.RecordEventTx(ctx, tx, k, at)
		if err == nil && ins != want {
			err = fmt.Errorf("RecordEventTx(%v): inserted %v, want %v", k, ins, want)
		}
		return err
	})
}

func inTx[TX any](t *testing.T, s store.InboxStore[TX], fn func(ctx context.Context, tx TX) error) {
	t.Helper()
	if err := s.InTx(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

func charges[TX any](t *testing.T, l Ledger[TX], id string) int {
	t.Helper()
	n, err := l.Charges(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
