package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// contenders is how many goroutines race for one key, released together.
const contenders = 64

// race runs claim from contenders goroutines released together and
// returns their results.
func race(t *testing.T, claim func(i int) (store.ClaimResult, error)) []store.ClaimResult {
	t.Helper()
	results := make([]store.ClaimResult, contenders)
	errs := make([]error, contenders)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	for i := range contenders {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gate
			results[i], errs[i] = claim(i)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("contender %d: %v", i, err)
		}
	}
	return results
}

// winner checks that exactly one result is Claimed with wantEpoch and that
// every other result carries that same claim, and returns it.
func winner(t *testing.T, results []store.ClaimResult, wantEpoch int64) store.ClaimResult {
	t.Helper()
	var won []store.ClaimResult
	for _, r := range results {
		if r.Claimed {
			won = append(won, r)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d of %d contenders claimed the key, want exactly 1", len(won), len(results))
	}
	w := won[0]
	if w.Record.Epoch != wantEpoch {
		t.Fatalf("winner has epoch %d, want %d", w.Record.Epoch, wantEpoch)
	}
	for i, r := range results {
		if r.Claimed {
			continue
		}
		// Not a stale version of the row: the winner's claim.
		if r.Record.Epoch != w.Record.Epoch || r.Record.Owner != w.Record.Owner || r.Record.State != store.StateProcessing {
			t.Fatalf("contender %d got epoch %d state %v owner %x; the winner holds epoch %d owner %x",
				i, r.Record.Epoch, r.Record.State, r.Record.Owner, w.Record.Epoch, w.Record.Owner)
		}
	}
	return w
}

func TestClaimRaceOnNewKey(t *testing.T) {
	t.Parallel()
	for _, clock := range []string{"Injected", "Server"} {
		t.Run(clock, func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t)
			if clock == "Server" {
				s = newStore(t, migratedPool(t), nil)
			}
			for round := range 20 {
				key := fmt.Sprintf("new-%d", round)
				winner(t, race(t, func(int) (store.ClaimResult, error) {
					return s.Claim(context.Background(), params(key, "fp"))
				}), 1)
			}
		})
	}
}

// The row exists and is claimable in every contender's snapshot; all but
// one must see the winner's version, not the stale one.
func TestClaimRaceOnTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, kind := range []string{"LeaseEnded", "Released", "Expired"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			for round := range 20 {
				key := fmt.Sprintf("%s-%d", kind, round)
				p := params(key, "fp")
				p.Lease, p.Retention = time.Second, time.Minute
				first := mustClaim(t, s, p)
				switch kind {
				case "LeaseEnded":
					b.clock.Advance(time.Second)
				case "Released":
					if err := s.Release(ctx, fenceOf(first)); err != nil {
						t.Fatal(err)
					}
				case "Expired":
					if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(first), Retention: time.Minute}); err != nil {
						t.Fatal(err)
					}
					b.clock.Advance(time.Minute)
				}
				winner(t, race(t, func(int) (store.ClaimResult, error) {
					return s.Claim(ctx, params(key, "fp"))
				}), 2)
			}
		})
	}
}

// Claims on expired keys race with sweepers deleting them: every key still
// gets exactly one holder, and no claim is deleted under its holder.
func TestClaimRaceWithSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	const keys = 20
	for round := range 5 {
		for k := range keys {
			p := params(fmt.Sprintf("k%d", k), "fp")
			p.Lease, p.Retention = time.Second, time.Second
			res := mustClaim(t, s, p)
			if !res.Claimed && round == 0 {
				t.Fatalf("setup claim: %+v", res)
			}
			if res.Claimed {
				if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res), Retention: time.Second}); err != nil {
					t.Fatal(err)
				}
			}
		}
		b.clock.Advance(time.Hour)
		results := race(t, func(i int) (store.ClaimResult, error) {
			if i%8 == 0 {
				_, err := s.Sweep(ctx, 3)
				return store.ClaimResult{}, err
			}
			return s.Claim(ctx, params(fmt.Sprintf("k%d", i%keys), "fp"))
		})
		holders := map[string]store.Record{}
		for _, r := range results {
			if r.Claimed {
				if prev, ok := holders[r.Record.Key]; ok {
					t.Fatalf("round %d: key %q claimed twice: %+v and %+v", round, r.Record.Key, prev, r.Record)
				}
				holders[r.Record.Key] = r.Record
			}
		}
		for key, rec := range holders {
			got, err := s.Get(ctx, key)
			if err != nil || got.Owner != rec.Owner || got.Epoch != rec.Epoch {
				t.Fatalf("round %d: key %q: holder %+v, stored %+v, %v", round, key, rec, got, err)
			}
			if err := s.Release(ctx, store.Fence{Key: key, Epoch: rec.Epoch, Owner: rec.Owner}); err != nil {
				t.Fatalf("release %q: %v", key, err)
			}
		}
		for i, r := range results {
			if i%8 != 0 && !r.Claimed && r.Record.State == store.StateProcessing {
				if h, ok := holders[r.Record.Key]; !ok || h.Owner != r.Record.Owner {
					t.Fatalf("round %d: contender %d saw a holder that never won: %+v", round, i, r.Record)
				}
			}
		}
	}
}
