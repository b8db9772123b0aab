package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseTx checks store.TxStore by calling it directly: CompleteTx
// commits or rolls back with the caller's transaction, and is fenced like
// Complete, so that a stale holder's business writes roll back.
func exerciseTx[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	setup := func(t *testing.T) (store.TxStore[TX], Ledger[TX], *testclock.Clock) {
		t.Helper()
		clock := testclock.New(testclock.Epoch0)
		s, ledger := OpenAs[store.TxStore[TX]](t, open, clock.Now)
		return s, ledger, clock
	}

	t.Run("CompleteTxCommitsWithTheTransaction", func(t *testing.T) {
		t.Parallel()
		s, ledger, _ := setup(t)
		p := store.ClaimParams{Key: "k", Fingerprint: []byte("fp"), Owner: "a", Lease: testLease, Retention: testRetention}
		if r, err := s.Claim(ctx, p); err != nil || !r.Claimed {
			t.Fatal(r, err)
		}
		done := store.CompleteParams{Fence: store.Fence{Key: "k", Epoch: 1, Owner: "a"}, Response: []byte("paid"), Retention: testRetention}
		declined := errors.New("card declined")
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			if err := ledger.Charge(ctx, tx, "order-1"); err != nil {
				return err
			}
			if err := s.CompleteTx(ctx, tx, done); err != nil {
				return err
			}
			return declined
		})
		if !errors.Is(err, declined) {
			t.Fatalf("InTx = %v, want fn's error", err)
		}
		rec, err := s.Get(ctx, "k")
		if err != nil || rec.State != store.StateProcessing || charges(t, ledger, "order-1") != 0 {
			t.Fatalf("after rollback: record %+v (%v), charges %d; want still processing, no charge", rec, err, charges(t, ledger, "order-1"))
		}
		err = s.InTx(ctx, func(ctx context.Context, tx TX) error {
			if err := ledger.Charge(ctx, tx, "order-1"); err != nil {
				return err
			}
			return s.CompleteTx(ctx, tx, done)
		})
		if err != nil {
			t.Fatal(err)
		}
		rec, err = s.Get(ctx, "k")
		if err != nil || rec.State != store.StateDone || string(rec.Response) != "paid" || charges(t, ledger, "order-1") != 1 {
			t.Fatalf("after commit: record %+v (%v), charges %d; want done with one charge", rec, err, charges(t, ledger, "order-1"))
		}
	})

	t.Run("StaleOwnerWritesRollBack", func(t *testing.T) {
		t.Parallel()
		s, ledger, clock := setup(t)
		p := store.ClaimParams{Key: "k", Fingerprint: []byte("fp"), Owner: "a", Lease: testLease, Retention: testRetention}
		if r, err := s.Claim(ctx, p); err != nil || !r.Claimed {
			t.Fatal(r, err)
		}
		clock.Advance(testLease + time.Second)
		p.Owner = "b"
		if r, err := s.Claim(ctx, p); err != nil || !r.Claimed || r.Record.Epoch != 2 {
			t.Fatal(r, err)
		}
		for _, f := range []store.Fence{{Key: "k", Epoch: 1, Owner: "a"}, {Key: "k", Epoch: 2, Owner: "b"}} {
			err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
				if err := ledger.Charge(ctx, tx, "order-1"); err != nil {
					return err
				}
				return s.CompleteTx(ctx, tx, store.CompleteParams{Fence: f, Response: []byte(f.Owner), Retention: testRetention})
			})
			if f.Owner == "a" && !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale owner's transaction: %v", err)
			}
			if f.Owner == "b" && err != nil {
				t.Fatalf("holder's transaction: %v", err)
			}
		}
		rec, err := s.Get(ctx, "k")
		if err != nil || rec.State != store.StateDone || string(rec.Response) != "b" || charges(t, ledger, "order-1") != 1 {
			t.Fatalf("record %+v (%v), charges %d", rec, err, charges(t, ledger, "order-1"))
		}
	})

	t.Run("BeginCommitRollback", func(t *testing.T) {
		t.Parallel()
		s, ledger, _ := setup(t)
		p := store.ClaimParams{Key: "k", Fingerprint: []byte("fp"), Owner: "a", Lease: testLease, Retention: testRetention}
		if r, err := s.Claim(ctx, p); err != nil || !r.Claimed {
			t.Fatal(r, err)
		}
		done := store.CompleteParams{Fence: store.Fence{Key: "k", Epoch: 1, Owner: "a"}, Response: []byte("paid"), Retention: testRetention}
		// Rolled back: neither the business row nor the completion.
		tx, err := s.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.Charge(ctx, tx, "order-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteTx(ctx, tx, done); err != nil {
			t.Fatal(err)
		}
		if err := s.RollbackTx(ctx, tx); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(ctx, "k")
		if err != nil || rec.State != store.StateProcessing || charges(t, ledger, "order-1") != 0 {
			t.Fatalf("after RollbackTx: record %+v (%v), charges %d; want still processing, no charge", rec, err, charges(t, ledger, "order-1"))
		}
		// A transaction whose context ended is rolled back; RollbackTx
		// still ends it, and the store writes again afterwards.
		cctx, cancel := context.WithCancel(ctx)
		tx, err = s.BeginTx(cctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.Charge(cctx, tx, "order-1"); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := s.RollbackTx(ctx, tx); err != nil {
			t.Fatalf("RollbackTx after the context ended: %v", err)
		}
		// Committed: both, at once.
		tx, err = s.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ledger.Charge(ctx, tx, "order-1"); err != nil {
			t.Fatal(err)
		}
		if err := s.CompleteTx(ctx, tx, done); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitTx(ctx, tx); err != nil {
			t.Fatal(err)
		}
		rec, err = s.Get(ctx, "k")
		if err != nil || rec.State != store.StateDone || string(rec.Response) != "paid" || charges(t, ledger, "order-1") != 1 {
			t.Fatalf("after CommitTx: record %+v (%v), charges %d; want done with one charge", rec, err, charges(t, ledger, "order-1"))
		}
	})

	t.Run("ConcurrentBeginTxBothCommit", func(t *testing.T) {
		t.Parallel()
		s, ledger, _ := setup(t)
		// Two transactions begun at once: a store that serialises writers
		// (SQLite) must hand its lock from the first to the second when
		// CommitTx ends it, and both commit.
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for range 2 {
			wg.Go(func() {
				tx, err := s.BeginTx(ctx)
				if err != nil {
					errs <- err
					return
				}
				if err := ledger.Charge(ctx, tx, "order-2"); err != nil {
					_ = s.RollbackTx(ctx, tx)
					errs <- err
					return
				}
				errs <- s.CommitTx(ctx, tx)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := charges(t, ledger, "order-2"); n != 2 {
			t.Fatalf("charges %d, want 2: both transactions committed", n)
		}
	})
}
