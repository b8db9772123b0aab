package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

func TestInTx(t *testing.T) {
	t.Parallel()

	complete := func(s *Store, l *ledger, c store.ClaimResult) func(ctx context.Context, tx *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if err := l.Charge(ctx, tx, "order-1"); err != nil {
				return err
			}
			return s.CompleteTx(ctx, tx, store.CompleteParams{Fence: fenceOf(c.Record), Response: []byte("ok"), Retention: time.Hour})
		}
	}

	t.Run("Commit", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		l := newLedger(t, b.db)
		c := mustClaim(t, s, claimParams("k", "fp", "o"))
		if err := s.InTx(ctx, complete(s, l, c)); err != nil {
			t.Fatal(err)
		}
		assertCharges(t, l, 1)
		if got, _ := s.Get(ctx, "k"); got.State != store.StateDone {
			t.Fatalf("got %+v, want DONE", got)
		}
	})

	t.Run("ErrorRollsBack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		l := newLedger(t, b.db)
		c := mustClaim(t, s, claimParams("k", "fp", "o"))
		boom := errors.New("boom")
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if err := complete(s, l, c)(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InTx = %v, want fn's error", err)
		}
		assertCharges(t, l, 0)
		if got, _ := s.Get(ctx, "k"); got.State != store.StateProcessing {
			t.Fatalf("got %+v, want still PROCESSING", got)
		}
		// The writer turn was given back.
		if err := s.Release(ctx, fenceOf(c.Record)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PanicRollsBack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		l := newLedger(t, b.db)
		c := mustClaim(t, s, claimParams("k", "fp", "o"))
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the panic to continue", r)
				}
			}()
			_ = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if err := complete(s, l, c)(ctx, tx); err != nil {
					return err
				}
				panic("boom")
			})
		}()
		assertCharges(t, l, 0)
		if err := s.Release(ctx, fenceOf(c.Record)); err != nil {
			t.Fatalf("Release after the panic: %v", err)
		}
	})

	t.Run("FencedRollsBack", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		l := newLedger(t, b.db)
		old := mustClaim(t, s, claimParams("k", "fp", "o1"))
		b.clock.Advance(10 * time.Second)
		mustClaim(t, s, claimParams("k", "fp", "o2"))
		err := s.InTx(ctx, complete(s, l, old))
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("InTx = %v, want ErrFenced", err)
		}
		assertCharges(t, l, 0)
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := s.InTx(cctx, func(context.Context, *sql.Tx) error { return nil })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("InTx = %v, want context.Canceled", err)
		}
	})
}

func assertCharges(t *testing.T, l *ledger, want int) {
	t.Helper()
	n, err := l.Charges(ctx, "order-1")
	if err != nil || n != want {
		t.Fatalf("charges = %d, %v; want %d", n, err, want)
	}
}

// TestWriterTurnTimesOut checks that a write waiting behind a long InTx
// gives up after the busy timeout, as SQLite would.
func TestWriterTurnTimesOut(t *testing.T) {
	t.Parallel()
	db, _ := openMigrated(t, &OpenConfig{BusyTimeout: 50 * time.Millisecond})
	s, err := New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.Claim(ctx, claimParams("k", "fp", "o"))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") {
		t.Fatalf("nested Claim = %v, want a busy timeout", err)
	}
}
