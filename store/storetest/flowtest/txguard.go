package flowtest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// exerciseTxGuard checks key.TxGuard on the store: the business write and
// the fenced completion commit together, so the ledger holds exactly one
// row per key whatever fails.
func exerciseTxGuard[TX any](t *testing.T, open storetest.Open[TX]) {
	ctx := context.Background()
	type txBundle struct {
		ts     *fault.TxStore[TX]
		raw    store.TxStore[TX]
		ledger storetest.Ledger[TX]
		clock  *testclock.Clock
		guard  *key.TxGuard[TX]
	}
	setupTx := func(t *testing.T) txBundle {
		t.Helper()
		clock := testclock.New(testclock.Epoch0)
		ts, ledger := storetest.OpenAs[store.TxStore[TX]](t, open, clock.Now)
		fts := fault.WrapTx(ts)
		g, err := key.NewTx[TX](fts, &key.Config{Lease: testLease, Retention: testRetention, Heartbeat: -1})
		if err != nil {
			t.Fatal(err)
		}
		return txBundle{ts: fts, raw: ts, ledger: ledger, clock: clock, guard: g}
	}
	charge := func(b txBundle, id, resp string) func(context.Context, TX) ([]byte, error) {
		return func(ctx context.Context, tx TX) ([]byte, error) {
			if err := b.ledger.Charge(ctx, tx, id); err != nil {
				return nil, err
			}
			return []byte(resp), nil
		}
	}

	t.Run("EffectAndRecordCommitTogether", func(t *testing.T) {
		t.Parallel()
		b := setupTx(t)
		res, err := b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "paid"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		res, err = b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "again"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
		if string(res.Response) != "paid" || charges(t, b.ledger, "order-1") != 1 {
			t.Fatalf("response %q, charges %d", res.Response, charges(t, b.ledger, "order-1"))
		}
	})

	t.Run("ConcurrentDuplicatesChargeOnce", func(t *testing.T) {
		t.Parallel()
		b := setupTx(t)
		const n = 64
		var (
			mu       sync.Mutex
			outcomes = map[key.Outcome]int{}
		)
		storetest.Concurrently(n, func(int) {
			res, err := b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "paid"))
			if err != nil && !errors.Is(err, key.ErrInFlight) {
				t.Errorf("outcome %v: %v", res.Outcome, err)
			}
			mu.Lock()
			outcomes[res.Outcome]++
			mu.Unlock()
		})
		if outcomes[key.OutcomeExecuted] != 1 || outcomes[key.OutcomeExecuted]+outcomes[key.OutcomeReplayed]+outcomes[key.OutcomeInFlight] != n {
			t.Fatalf("outcomes %v", outcomes)
		}
		if got := charges(t, b.ledger, "order-1"); got != 1 {
			t.Fatalf("charges %d, want 1", got)
		}
	})

	t.Run("FailureRollsBackAndReleases", func(t *testing.T) {
		t.Parallel()
		b := setupTx(t)
		declined := errors.New("card declined")
		res, err := b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), func(ctx context.Context, tx TX) ([]byte, error) {
			if err := b.ledger.Charge(ctx, tx, "order-1"); err != nil {
				return nil, err
			}
			return nil, declined
		})
		mustOutcome(t, res, err, key.OutcomeExecuted, declined)
		if charges(t, b.ledger, "order-1") != 0 {
			t.Fatal("failed operation's write committed")
		}
		res, err = b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "paid"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		if res.Epoch != 2 || charges(t, b.ledger, "order-1") != 1 {
			t.Fatalf("retry: epoch %d charges %d", res.Epoch, charges(t, b.ledger, "order-1"))
		}
	})

	t.Run("LeaseLostBeforeCommitRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setupTx(t)
		r := req("alice", "charge", "k1", "100")
		// The owner stalls past its lease after its claim; another process
		// takes the key over before the owner's transaction begins. (On
		// SQLite the open transaction holds the write lock, so this is the
		// only window in which a takeover can land.)
		var takeover store.ClaimResult
		var takeoverErr error
		b.ts.SetPlan(func(op fault.Op) fault.Mode {
			if op == fault.BeginTx {
				b.clock.Advance(testLease)
				takeover, takeoverErr = b.raw.Claim(ctx, store.ClaimParams{Key: r.Scope.StoreKey(),
					Fingerprint: r.Fingerprint, Owner: "second", Lease: testLease, Retention: testRetention})
			}
			return fault.Pass
		})
		res, err := b.guard.DoTx(ctx, r, charge(b, "order-1", "first"))
		mustOutcome(t, res, err, key.OutcomeExecuted, key.ErrFenced)
		if takeoverErr != nil || !takeover.Claimed || takeover.Record.Epoch != 2 {
			t.Fatalf("takeover: %+v %v", takeover, takeoverErr)
		}
		if charges(t, b.ledger, "order-1") != 0 {
			t.Fatalf("charges %d; the fenced write must roll back", charges(t, b.ledger, "order-1"))
		}
	})

	t.Run("CommitAnswerLostResolvedByReading", func(t *testing.T) {
		t.Parallel()
		b := setupTx(t)
		b.ts.SetPlan(fault.Once(fault.After, fault.CommitTx))
		res, err := b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "paid"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		if string(res.Response) != "paid" {
			t.Fatalf("response %q", res.Response)
		}
		res, err = b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "again"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
		if charges(t, b.ledger, "order-1") != 1 {
			t.Fatalf("charges %d", charges(t, b.ledger, "order-1"))
		}
	})

	// A transaction that never began, whose completion failed, or whose
	// COMMIT never reached the database: nothing committed, so the claim
	// was released, and the retry runs now, once.
	for _, tc := range []struct {
		name string
		plan fault.Plan
	}{
		{"BeginFailsNothingRuns", fault.Once(fault.Before, fault.BeginTx)},
		{"CompleteFailsNothingCommits", fault.Once(fault.Before, fault.CompleteTx)},
		{"CommitNotSentNothingCommits", fault.Once(fault.Before, fault.CommitTx)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupTx(t)
			b.ts.SetPlan(tc.plan)
			res, err := b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "paid"))
			mustOutcome(t, res, err, key.OutcomeExecuted, key.ErrUnavailable)
			if charges(t, b.ledger, "order-1") != 0 {
				t.Fatal("write committed without its record")
			}
			res, err = b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "paid"))
			mustOutcome(t, res, err, key.OutcomeExecuted, nil)
			if charges(t, b.ledger, "order-1") != 1 {
				t.Fatalf("charges %d", charges(t, b.ledger, "order-1"))
			}
		})
	}

	t.Run("StoreDownRunsNothing", func(t *testing.T) {
		t.Parallel()
		b := setupTx(t)
		b.ts.SetPlan(fault.Always(fault.Before, fault.Claim, fault.Get))
		res, err := b.guard.DoTx(ctx, req("alice", "charge", "k1", "100"), charge(b, "order-1", "paid"))
		mustOutcome(t, res, err, key.OutcomeUnavailable, key.ErrUnavailable)
		if b.ts.Calls(fault.BeginTx) != 0 || charges(t, b.ledger, "order-1") != 0 {
			t.Fatal("operation ran without a claim")
		}
	})
}
