package flowtest

import (
	"context"
	"errors"
	"testing"

	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/key"
)

// exerciseFaults checks that a failing store never lets an operation run
// without a confirmed claim, and that a write whose answer was lost is
// resolved by reading, never by running again.
func exerciseFaults(t *testing.T, newStore newStoreFunc) {
	ctx := context.Background()
	setupFault := func(t *testing.T) (*fault.Store, *key.Guard, *testclock.Clock) {
		b := setup(t, newStore)
		fs := fault.Wrap(b.store)
		return fs, newGuard(t, fs), b.clock
	}
	// executeThenReplay sends one request twice through a guard on a store
	// that fails as plan says: the first must execute and the second replay.
	executeThenReplay := func(t *testing.T, plan fault.Plan) (fs *fault.Store, replay key.Result, runs int32) {
		t.Helper()
		fs, g, _ := setupFault(t)
		fs.SetPlan(plan)
		var c counter
		res, err := g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("paid"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		res, err = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("again"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
		return fs, res, c.n.Load()
	}

	t.Run("StoreDownFailsClosed", func(t *testing.T) {
		t.Parallel()
		for _, plan := range []fault.Plan{
			fault.Always(fault.Before, fault.Claim, fault.Get),
			fault.Always(fault.Before, fault.Claim),
		} {
			fs, g, _ := setupFault(t)
			fs.SetPlan(plan)
			var c counter
			res, err := g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
			mustOutcome(t, res, err, key.OutcomeUnavailable, key.ErrUnavailable)
			if !errors.Is(err, fault.ErrInjected) || c.n.Load() != 0 {
				t.Fatalf("store down: err %v, runs %d", err, c.n.Load())
			}
			// Back up: the key was never claimed, so it runs now.
			fs.SetPlan(nil)
			res, err = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
			mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		}
	})

	t.Run("ClaimCommittedAnswerLost", func(t *testing.T) {
		t.Parallel()
		fs, _, runs := executeThenReplay(t, fault.Once(fault.After, fault.Claim))
		if runs != 1 || fs.Calls(fault.Get) == 0 {
			t.Fatalf("runs %d, reads %d", runs, fs.Calls(fault.Get))
		}
	})

	t.Run("ClaimCommittedReadFails", func(t *testing.T) {
		t.Parallel()
		fs, g, clock := setupFault(t)
		fs.SetPlan(func(op fault.Op) fault.Mode {
			switch op {
			case fault.Claim:
				return fault.After
			case fault.Get:
				return fault.Before
			}
			return fault.Pass
		})
		var c counter
		res, err := g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeUnavailable, key.ErrUnavailable)
		fs.SetPlan(nil)
		// The orphaned claim holds the key until its lease ends, then frees it.
		res, err = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeInFlight, key.ErrInFlight)
		clock.Advance(testLease)
		res, err = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		if res.Epoch != 2 || c.n.Load() != 1 {
			t.Fatalf("epoch %d runs %d", res.Epoch, c.n.Load())
		}
	})

	t.Run("CompleteCommittedAnswerLost", func(t *testing.T) {
		t.Parallel()
		fs, res, runs := executeThenReplay(t, fault.Once(fault.After, fault.Complete))
		if string(res.Response) != "paid" || runs != 1 || fs.Calls(fault.Complete) != 1 {
			t.Fatalf("response %q runs %d completes %d", res.Response, runs, fs.Calls(fault.Complete))
		}
	})

	t.Run("CompleteLostBeforeStoreIsRetriedOnce", func(t *testing.T) {
		t.Parallel()
		fs, _, runs := executeThenReplay(t, fault.Once(fault.Before, fault.Complete))
		if runs != 1 || fs.Calls(fault.Complete) != 2 {
			t.Fatalf("runs %d completes %d", runs, fs.Calls(fault.Complete))
		}
	})

	t.Run("CompleteImpossibleKeepsKeyHeld", func(t *testing.T) {
		t.Parallel()
		fs, g, _ := setupFault(t)
		other := newGuard(t, fs) // another process on the same store
		fs.SetPlan(fault.Always(fault.Before, fault.Complete))
		var c counter
		res, err := g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("paid"))
		mustOutcome(t, res, err, key.OutcomeExecuted, key.ErrRecording)
		if string(res.Response) != "paid" || !errors.Is(err, key.ErrUnavailable) {
			t.Fatalf("caller lost the response it produced: %q (%v)", res.Response, err)
		}
		// Not released: the effect happened, so the key stays held, in the
		// store by its lease and here by the guard, which keeps trying.
		res, err = other.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeInFlight, key.ErrInFlight)
		res, err = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeUnavailable, key.ErrUnavailable)
		// The store recovers: the first write is the completion, and every
		// retry replays it.
		fs.SetPlan(nil)
		if err := g.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		for _, gg := range []*key.Guard{other, g} {
			res, err = gg.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
			mustOutcome(t, res, err, key.OutcomeReplayed, nil)
			if string(res.Response) != "paid" {
				t.Fatalf("replayed %q", res.Response)
			}
		}
		if c.n.Load() != 1 {
			t.Fatalf("ran %d times", c.n.Load())
		}
	})

	t.Run("ReleaseFailsKeyFreesAtLeaseEnd", func(t *testing.T) {
		t.Parallel()
		fs, g, clock := setupFault(t)
		fs.SetPlan(fault.Always(fault.Before, fault.Release))
		boom := errors.New("boom")
		res, err := g.Do(ctx, req("alice", "charge", "k1", "100"), func(context.Context) ([]byte, error) { return nil, boom })
		mustOutcome(t, res, err, key.OutcomeExecuted, boom)
		var c counter
		res, err = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeInFlight, key.ErrInFlight)
		clock.Advance(testLease)
		res, err = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
	})
}
