package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
)

const (
	testLease     = 10 * time.Second
	testRetention = time.Hour
)

// bundle is what each subtest works with.
type bundle struct {
	store store.Store
	clock *testclock.Clock
	guard *key.Guard
	// other is a second guard over the same store: another process. A
	// guard answers a duplicate of a key it holds itself without asking
	// the store, so the store's own decisions are seen through other.
	other *key.Guard
}

func setup(t *testing.T, newStore NewStore) bundle {
	t.Helper()
	clock := testclock.New(testclock.Epoch0)
	s := newStore(t, clock.Now)
	return bundle{store: s, clock: clock, guard: newGuard(t, s), other: newGuard(t, s)}
}

func newGuard(t *testing.T, s store.Store) *key.Guard {
	t.Helper()
	// No heartbeat: the suite moves the clock by hand and must see leases
	// end exactly when it says.
	g, err := key.New(s, &key.Config{Lease: testLease, Retention: testRetention, Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func req(principal, op, k, body string) key.Request {
	return key.Request{
		Scope:       key.Scope{Principal: principal, Operation: op, Key: k},
		Fingerprint: key.FingerprintOf([]byte(body)),
	}
}

// counter is an operation that counts its runs and answers a fixed response.
type counter struct{ n atomic.Int32 }

func (c *counter) op(resp string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		c.n.Add(1)
		return []byte(resp), nil
	}
}

func mustOutcome(t *testing.T, res key.Result, err error, want key.Outcome, wantErr error) {
	t.Helper()
	if res.Outcome != want {
		t.Fatalf("outcome = %v (err %v), want %v", res.Outcome, err, want)
	}
	if wantErr == nil && err != nil {
		t.Fatalf("outcome %v: unexpected error %v", want, err)
	}
	if wantErr != nil && !errors.Is(err, wantErr) {
		t.Fatalf("outcome %v: error = %v, want %v", want, err, wantErr)
	}
}

// Exercise runs the conformance suite against stores made by newStore: the
// guard's promises (through key.Guard, as users call it), the store's
// fencing rules (called directly), faults, and a rapid state-machine check
// against the memory model.
func Exercise(t *testing.T, newStore NewStore) {
	t.Helper()
	ctx := context.Background()

	t.Run("ConcurrentDuplicatesExecuteOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		const n = 64
		var (
			c       counter
			start   = make(chan struct{})
			wg      sync.WaitGroup
			results = make([]key.Result, n)
			errs    = make([]error, n)
		)
		for i := range n {
			g := newGuard(t, b.store) // one process each: the store decides
			wg.Go(func() {
				<-start
				results[i], errs[i] = g.Do(ctx, req("alice", "charge", "k1", "100"), c.op("paid"))
			})
		}
		close(start)
		wg.Wait()
		executed := 0
		for i, res := range results {
			switch res.Outcome {
			case key.Executed:
				executed++
				if errs[i] != nil {
					t.Errorf("executed with error: %v", errs[i])
				}
			case key.Replayed:
				if string(res.Response) != "paid" {
					t.Errorf("replayed %q", res.Response)
				}
			case key.InFlight:
				if !errors.Is(errs[i], key.ErrInFlight) {
					t.Errorf("in flight with error %v", errs[i])
				}
			default:
				t.Errorf("goroutine %d: outcome %v err %v", i, res.Outcome, errs[i])
			}
		}
		if executed != 1 || c.n.Load() != 1 {
			t.Fatalf("executed=%d runs=%d, want 1 and 1", executed, c.n.Load())
		}
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("again"))
		mustOutcome(t, res, err, key.Replayed, nil)
	})

	t.Run("ReplayReturnsStoredResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("paid 100"))
		mustOutcome(t, res, err, key.Executed, nil)
		if res.Epoch != 1 || string(res.Response) != "paid 100" {
			t.Fatalf("first: epoch %d response %q", res.Epoch, res.Response)
		}
		for range 3 {
			res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("other"))
			mustOutcome(t, res, err, key.Replayed, nil)
			if string(res.Response) != "paid 100" || res.Epoch != 1 {
				t.Fatalf("replay: epoch %d response %q", res.Epoch, res.Response)
			}
		}
		// An empty response is a response too.
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "100"), c.op(""))
		mustOutcome(t, res, err, key.Executed, nil)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "100"), c.op("x"))
		mustOutcome(t, res, err, key.Replayed, nil)
		if len(res.Response) != 0 {
			t.Fatalf("empty response replayed as %q", res.Response)
		}
		if c.n.Load() != 2 {
			t.Fatalf("runs = %d, want 2", c.n.Load())
		}
	})

	t.Run("ConflictOnOtherFingerprint", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("paid"))
		mustOutcome(t, res, err, key.Executed, nil)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "999"), c.op("paid"))
		mustOutcome(t, res, err, key.Conflict, key.ErrConflict)
		if res.Response != nil || c.n.Load() != 1 {
			t.Fatalf("conflict leaked response %q or ran (runs %d)", res.Response, c.n.Load())
		}
		// The conflict stored nothing: the original still replays.
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.Replayed, nil)
	})

	t.Run("InFlightWhileHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), func(ctx context.Context) ([]byte, error) {
			b.clock.Advance(4 * time.Second)
			inner, err := b.other.Do(ctx, req("alice", "charge", "k1", "100"), c.op("dup"))
			mustOutcome(t, inner, err, key.InFlight, key.ErrInFlight)
			if inner.RetryAfter != testLease-4*time.Second {
				t.Errorf("RetryAfter = %v, want %v", inner.RetryAfter, testLease-4*time.Second)
			}
			// Other content while in flight is still a conflict, not in flight.
			inner, err = b.other.Do(ctx, req("alice", "charge", "k1", "999"), c.op("dup"))
			mustOutcome(t, inner, err, key.Conflict, key.ErrConflict)
			// The holder's own process knows without asking the store.
			inner, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("dup"))
			mustOutcome(t, inner, err, key.InFlight, key.ErrInFlight)
			return []byte("first"), nil
		})
		mustOutcome(t, res, err, key.Executed, nil)
		if c.n.Load() != 0 {
			t.Fatalf("duplicate ran %d times", c.n.Load())
		}
	})

	t.Run("FailureReleasesAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		boom := errors.New("boom")
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), func(context.Context) ([]byte, error) {
			return nil, boom
		})
		mustOutcome(t, res, err, key.Executed, boom)
		rec, err := b.store.Get(ctx, req("alice", "charge", "k1", "100").Scope.StoreKey())
		if err != nil || rec.State != store.StateReleased {
			t.Fatalf("after failure: %+v, %v; want RELEASED", rec, err)
		}
		// No waiting for the lease: the retry runs now, with the next epoch.
		var c counter
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("ok"))
		mustOutcome(t, res, err, key.Executed, nil)
		if res.Epoch != 2 || c.n.Load() != 1 {
			t.Fatalf("retry: epoch %d runs %d", res.Epoch, c.n.Load())
		}
		// A released key is free for other content too (nothing was stored).
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "100"), func(context.Context) ([]byte, error) {
			return nil, boom
		})
		mustOutcome(t, res, err, key.Executed, boom)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "200"), c.op("ok"))
		mustOutcome(t, res, err, key.Executed, nil)
	})

	t.Run("PanicReleases", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		func() {
			defer func() {
				if recover() == nil {
					t.Error("panic was swallowed")
				}
			}()
			_, _ = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), func(context.Context) ([]byte, error) {
				panic("handler bug")
			})
		}()
		var c counter
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("ok"))
		mustOutcome(t, res, err, key.Executed, nil)
		if res.Epoch != 2 {
			t.Fatalf("epoch %d, want 2", res.Epoch)
		}
	})

	t.Run("LeaseExpiryTakeoverFencesStaleOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		var takeover key.Result
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), func(ctx context.Context) ([]byte, error) {
			// This owner stalls past its lease; a retry takes the key over.
			b.clock.Advance(testLease)
			var err error
			takeover, err = b.other.Do(ctx, req("alice", "charge", "k1", "100"), c.op("second"))
			mustOutcome(t, takeover, err, key.Executed, nil)
			return []byte("first"), nil
		})
		mustOutcome(t, res, err, key.Executed, key.ErrFenced)
		if res.Epoch != 1 || takeover.Epoch != 2 {
			t.Fatalf("epochs: stale %d, takeover %d; want 1 and 2", res.Epoch, takeover.Epoch)
		}
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.Replayed, nil)
		if string(res.Response) != "second" || res.Epoch != 2 {
			t.Fatalf("stale owner overwrote the response: %q epoch %d", res.Response, res.Epoch)
		}
	})

	t.Run("StoreFencesEveryHolderWrite", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := "fence-key"
		p := store.ClaimParams{Key: k, Fingerprint: []byte("fp"), Owner: "owner-a", Lease: testLease, Retention: testRetention}
		a, err := b.store.Claim(ctx, p)
		if err != nil || !a.Claimed || a.Record.Epoch != 1 {
			t.Fatalf("claim a: %+v %v", a, err)
		}
		if !a.Now.Equal(testclock.Epoch0) || !a.Record.LeaseUntil.Equal(testclock.Epoch0.Add(testLease)) || !a.Record.ExpiresAt.Equal(testclock.Epoch0.Add(testRetention)) {
			t.Fatalf("claim a times: now %v lease %v expires %v", a.Now, a.Record.LeaseUntil, a.Record.ExpiresAt)
		}
		// Before the lease ends nobody else gets the key.
		b.clock.Advance(testLease - time.Millisecond)
		p.Owner = "owner-b"
		if r, err := b.store.Claim(ctx, p); err != nil || r.Claimed || r.Record.Owner != "owner-a" {
			t.Fatalf("claim b inside lease: %+v %v", r, err)
		}
		b.clock.Advance(time.Millisecond)
		bb, err := b.store.Claim(ctx, p)
		if err != nil || !bb.Claimed || bb.Record.Epoch != 2 || bb.Record.Owner != "owner-b" {
			t.Fatalf("takeover: %+v %v", bb, err)
		}
		stale := store.Fence{Key: k, Epoch: 1, Owner: "owner-a"}
		// Same epoch, other owner: also fenced.
		forged := store.Fence{Key: k, Epoch: 2, Owner: "owner-a"}
		for _, f := range []store.Fence{stale, forged} {
			if err := b.store.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("stale"), Retention: testRetention}); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale complete %+v: %v", f, err)
			}
			if err := b.store.Release(ctx, f); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale release: %v", err)
			}
			if _, err := b.store.Extend(ctx, f, testLease); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale extend: %v", err)
			}
			if err := b.store.MarkUnknown(ctx, f); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale mark unknown: %v", err)
			}
		}
		rec, err := b.store.Get(ctx, k)
		if err != nil || rec.State != store.StateProcessing || rec.Epoch != 2 || rec.Owner != "owner-b" || rec.Unknown {
			t.Fatalf("stale writes changed the record: %+v %v", rec, err)
		}
		// The holder's writes go through.
		cur := store.Fence{Key: k, Epoch: 2, Owner: "owner-b"}
		until, err := b.store.Extend(ctx, cur, 2*testLease)
		if err != nil || !until.Equal(b.clock.Now().Add(2*testLease)) {
			t.Fatalf("extend: %v %v", until, err)
		}
		if err := b.store.Complete(ctx, store.CompleteParams{Fence: cur, Response: []byte("ok"), Retention: testRetention}); err != nil {
			t.Fatal(err)
		}
		// Completed: the holder itself is fenced from further writes.
		if err := b.store.Release(ctx, cur); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("release after complete: %v", err)
		}
		rec, err = b.store.Get(ctx, k)
		if err != nil || rec.State != store.StateDone || string(rec.Response) != "ok" || !rec.LeaseUntil.IsZero() ||
			!rec.ExpiresAt.Equal(b.clock.Now().Add(testRetention)) {
			t.Fatalf("done record: %+v %v", rec, err)
		}
		if err := b.store.Complete(ctx, store.CompleteParams{Fence: store.Fence{Key: "absent", Epoch: 1, Owner: "x"}}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("complete of absent key: %v", err)
		}
	})

	t.Run("EpochFencesEvenWithRepeatedOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		// The guard never repeats an owner token, but the epoch alone must
		// still fence: a caller with its own tokens relies on it.
		p := store.ClaimParams{Key: "k", Fingerprint: []byte("fp"), Owner: "same", Lease: testLease, Retention: testRetention}
		if r, err := b.store.Claim(ctx, p); err != nil || !r.Claimed {
			t.Fatal(r, err)
		}
		if err := b.store.Release(ctx, store.Fence{Key: "k", Epoch: 1, Owner: "same"}); err != nil {
			t.Fatal(err)
		}
		if r, err := b.store.Claim(ctx, p); err != nil || !r.Claimed || r.Record.Epoch != 2 {
			t.Fatal(r, err)
		}
		old := store.Fence{Key: "k", Epoch: 1, Owner: "same"}
		if err := b.store.Complete(ctx, store.CompleteParams{Fence: old, Response: []byte("old"), Retention: testRetention}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("complete with the old epoch: %v", err)
		}
		if err := b.store.MarkUnknown(ctx, old); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("mark unknown with the old epoch: %v", err)
		}
		rec, err := b.store.Get(ctx, "k")
		if err != nil || rec.State != store.StateProcessing || rec.Epoch != 2 || rec.Unknown {
			t.Fatalf("old epoch changed the record: %+v %v", rec, err)
		}
	})

	t.Run("ExtendKeepsLeaseAndRecord", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		p := store.ClaimParams{Key: "ext", Fingerprint: []byte("fp"), Owner: "a", Lease: testLease, Retention: 2 * testLease}
		a, err := b.store.Claim(ctx, p)
		if err != nil || !a.Claimed {
			t.Fatal(a, err)
		}
		f := store.Fence{Key: "ext", Epoch: 1, Owner: "a"}
		b.clock.Advance(testLease - time.Second)
		// Extended beyond the record's expiry: the expiry follows the lease.
		until, err := b.store.Extend(ctx, f, 5*testLease)
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(3 * testLease)
		p.Owner = "b"
		if r, err := b.store.Claim(ctx, p); err != nil || r.Claimed {
			t.Fatalf("claim during extended lease: %+v %v", r, err)
		}
		rec, err := b.store.Get(ctx, "ext")
		if err != nil || !rec.LeaseUntil.Equal(until) || rec.ExpiresAt.Before(until) {
			t.Fatalf("extended record: %+v %v", rec, err)
		}
		if n, err := b.store.Sweep(ctx, 100); err != nil || n != 0 {
			t.Fatalf("sweep took a live lease: %d %v", n, err)
		}
	})

	t.Run("UnknownOutcomeKeepsClaimUntilLeaseEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		lost := errors.New("read timeout after sending")
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), func(context.Context) ([]byte, error) {
			return nil, key.MarkUnknown(lost)
		})
		mustOutcome(t, res, err, key.Executed, lost)
		if !errors.Is(err, key.ErrOutcomeUnknown) {
			t.Fatalf("err %v does not say unknown", err)
		}
		b.clock.Advance(3 * time.Second)
		var c counter
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.Unknown, key.ErrOutcomeUnknown)
		if res.RetryAfter != testLease-3*time.Second || c.n.Load() != 0 {
			t.Fatalf("unknown: retry after %v, runs %d", res.RetryAfter, c.n.Load())
		}
		b.clock.Advance(testLease)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("second try"))
		mustOutcome(t, res, err, key.Executed, nil)
		if res.Epoch != 2 || c.n.Load() != 1 {
			t.Fatalf("after lease: epoch %d runs %d", res.Epoch, c.n.Load())
		}
	})

	t.Run("RetentionExpiresKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		r := req("alice", "charge", "k1", "100")
		res, err := b.guard.Do(ctx, r, c.op("first"))
		mustOutcome(t, res, err, key.Executed, nil)
		b.clock.Advance(testRetention - time.Millisecond)
		res, err = b.guard.Do(ctx, r, c.op("x"))
		mustOutcome(t, res, err, key.Replayed, nil)
		b.clock.Advance(time.Millisecond)
		if _, err := b.store.Get(ctx, r.Scope.StoreKey()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get after retention: %v", err)
		}
		// An expired key is new again, whatever its content.
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "other body"), c.op("second"))
		mustOutcome(t, res, err, key.Executed, nil)
		if c.n.Load() != 2 {
			t.Fatalf("runs %d", c.n.Load())
		}
	})

	t.Run("SweepDeletesOnlyExpired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		claim := func(k string, lease, retention time.Duration) store.Fence {
			t.Helper()
			r, err := b.store.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: []byte("fp"), Owner: "o-" + k, Lease: lease, Retention: retention})
			if err != nil || !r.Claimed {
				t.Fatalf("claim %s: %+v %v", k, r, err)
			}
			return store.Fence{Key: k, Epoch: r.Record.Epoch, Owner: "o-" + k}
		}
		for i := range 5 { // done, will expire
			f := claim(fmt.Sprintf("old-%d", i), time.Second, time.Minute)
			if err := b.store.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("r"), Retention: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		claim("abandoned", time.Second, time.Minute) // its lease ends long before its expiry
		released := claim("released", time.Second, time.Minute)
		if err := b.store.Release(ctx, released); err != nil {
			t.Fatal(err)
		}
		keep := claim("young", time.Second, 3*time.Hour)
		if err := b.store.Complete(ctx, store.CompleteParams{Fence: keep, Response: []byte("r"), Retention: 3 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(2 * time.Minute)
		live := claim("live", time.Hour, time.Hour)
		total := 0
		for {
			n, err := b.store.Sweep(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if n > 2 {
				t.Fatalf("sweep deleted %d, over its limit 2", n)
			}
			if n == 0 {
				break
			}
			total += n
		}
		want := 7
		if b.store.Capabilities().SelfExpiring {
			want = 0 // the store deleted them by itself
		}
		if total != want {
			t.Fatalf("swept %d, want %d", total, want)
		}
		for _, k := range []string{"old-0", "abandoned", "released"} {
			if _, err := b.store.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("expired %s still visible: %v", k, err)
			}
		}
		for _, k := range []string{"young", "live"} {
			if _, err := b.store.Get(ctx, k); err != nil {
				t.Fatalf("sweep took %s: %v", k, err)
			}
		}
		if err := b.store.Complete(ctx, store.CompleteParams{Fence: live, Response: []byte("ok"), Retention: time.Hour}); err != nil {
			t.Fatalf("live claim broken by sweep: %v", err)
		}
	})

	t.Run("ScopesAreIndependent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		res, err := b.guard.Do(ctx, req("alice", "POST /charges", "k1", "100"), func(ctx context.Context) ([]byte, error) {
			// While alice holds k1, the same key in other scopes is free.
			for _, r := range []key.Request{
				req("bob", "POST /charges", "k1", "100"),
				req("alice", "POST /refunds", "k1", "100"),
				req("alice", "POST /charges", "K1", "100"),
				// Parts that would collide if simply concatenated.
				req("alice:POST", " /charges", "k1", "100"),
			} {
				inner, err := b.guard.Do(ctx, r, c.op(r.Scope.Principal+"|"+r.Scope.Operation))
				mustOutcome(t, inner, err, key.Executed, nil)
			}
			return []byte("alice"), nil
		})
		mustOutcome(t, res, err, key.Executed, nil)
		res, err = b.guard.Do(ctx, req("bob", "POST /charges", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.Replayed, nil)
		if string(res.Response) != "bob|POST /charges" {
			t.Fatalf("bob got %q", res.Response)
		}
		res, err = b.guard.Do(ctx, req("alice", "POST /charges", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.Replayed, nil)
		if string(res.Response) != "alice" {
			t.Fatalf("alice got %q", res.Response)
		}
	})

	t.Run("InvalidRequestStoresNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		long := string(bytes.Repeat([]byte("k"), key.MaxKeyLen+1))
		for _, r := range []key.Request{
			req("", "charge", "k", "1"), req("alice", "", "k", "1"), req("alice", "charge", "", "1"),
			req("alice", "charge", long, "1"),
		} {
			_, err := b.guard.Do(ctx, r, c.op("x"))
			if !errors.Is(err, key.ErrInvalidScope) {
				t.Fatalf("scope %+v: err %v", r.Scope, err)
			}
			if _, err := b.store.Get(ctx, r.Scope.StoreKey()); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("invalid scope stored: %v", err)
			}
		}
		_, err := b.guard.Do(ctx, key.Request{Scope: key.Scope{Principal: "a", Operation: "b", Key: "c"}}, c.op("x"))
		if !errors.Is(err, key.ErrInvalidRequest) || c.n.Load() != 0 {
			t.Fatalf("no fingerprint: %v, runs %d", err, c.n.Load())
		}
	})

	exerciseFaults(t, newStore)

	t.Run("StateMachineMatchesModel", func(t *testing.T) {
		t.Parallel()
		checkModel(t, newStore)
	})
}
