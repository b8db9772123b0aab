package flowtest

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

const (
	testLease     = 10 * time.Second
	testRetention = time.Hour
)

// newStoreFunc opens a store for one test on the clock now.
type newStoreFunc func(t *testing.T, now func() time.Time) store.Store

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

func setup(t *testing.T, newStore newStoreFunc) bundle {
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

// exerciseGuard checks key.Guard's promises on the store (as users call
// it), and that a failing store never lets an operation run twice.
func exerciseGuard[TX any](t *testing.T, open storetest.Open[TX]) {
	ctx := context.Background()
	newStore := func(t *testing.T, now func() time.Time) store.Store {
		t.Helper()
		s, _ := storetest.OpenAs[store.Store](t, open, now)
		return s
	}

	t.Run("ConcurrentDuplicatesExecuteOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		const n = 64
		var (
			c       counter
			guards  = make([]*key.Guard, n)
			results = make([]key.Result, n)
			errs    = make([]error, n)
		)
		for i := range guards {
			guards[i] = newGuard(t, b.store) // one process each: the store decides
		}
		storetest.Concurrently(n, func(i int) {
			results[i], errs[i] = guards[i].Do(ctx, req("alice", "charge", "k1", "100"), c.op("paid"))
		})
		executed := 0
		for i, res := range results {
			switch res.Outcome {
			case key.OutcomeExecuted:
				executed++
				if errs[i] != nil {
					t.Errorf("executed with error: %v", errs[i])
				}
			case key.OutcomeReplayed:
				if string(res.Response) != "paid" {
					t.Errorf("replayed %q", res.Response)
				}
			case key.OutcomeInFlight:
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
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
	})

	t.Run("ReplayReturnsStoredResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("paid 100"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		if res.Epoch != 1 || string(res.Response) != "paid 100" {
			t.Fatalf("first: epoch %d response %q", res.Epoch, res.Response)
		}
		for range 3 {
			res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("other"))
			mustOutcome(t, res, err, key.OutcomeReplayed, nil)
			if string(res.Response) != "paid 100" || res.Epoch != 1 {
				t.Fatalf("replay: epoch %d response %q", res.Epoch, res.Response)
			}
		}
		// An empty response is a response too.
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "100"), c.op(""))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
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
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "999"), c.op("paid"))
		mustOutcome(t, res, err, key.OutcomeConflict, key.ErrConflict)
		if res.Response != nil || c.n.Load() != 1 {
			t.Fatalf("conflict leaked response %q or ran (runs %d)", res.Response, c.n.Load())
		}
		// The conflict stored nothing: the original still replays.
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
	})

	t.Run("InFlightWhileHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		var c counter
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), func(ctx context.Context) ([]byte, error) {
			b.clock.Advance(4 * time.Second)
			inner, err := b.other.Do(ctx, req("alice", "charge", "k1", "100"), c.op("dup"))
			mustOutcome(t, inner, err, key.OutcomeInFlight, key.ErrInFlight)
			if inner.RetryAfter != testLease-4*time.Second {
				t.Errorf("RetryAfter = %v, want %v", inner.RetryAfter, testLease-4*time.Second)
			}
			// Other content while in flight is still a conflict, not in flight.
			inner, err = b.other.Do(ctx, req("alice", "charge", "k1", "999"), c.op("dup"))
			mustOutcome(t, inner, err, key.OutcomeConflict, key.ErrConflict)
			// The holder's own process knows without asking the store.
			inner, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("dup"))
			mustOutcome(t, inner, err, key.OutcomeInFlight, key.ErrInFlight)
			return []byte("first"), nil
		})
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
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
		mustOutcome(t, res, err, key.OutcomeExecuted, boom)
		rec, err := b.store.Get(ctx, req("alice", "charge", "k1", "100").Scope.StoreKey())
		if err != nil || rec.State != store.StateReleased {
			t.Fatalf("after failure: %+v, %v; want RELEASED", rec, err)
		}
		// No waiting for the lease: the retry runs now, with the next epoch.
		var c counter
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("ok"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		if res.Epoch != 2 || c.n.Load() != 1 {
			t.Fatalf("retry: epoch %d runs %d", res.Epoch, c.n.Load())
		}
		// A released key is free for other content too (nothing was stored).
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "100"), func(context.Context) ([]byte, error) {
			return nil, boom
		})
		mustOutcome(t, res, err, key.OutcomeExecuted, boom)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k2", "200"), c.op("ok"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
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
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
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
			mustOutcome(t, takeover, err, key.OutcomeExecuted, nil)
			return []byte("first"), nil
		})
		mustOutcome(t, res, err, key.OutcomeExecuted, key.ErrFenced)
		if res.Epoch != 1 || takeover.Epoch != 2 {
			t.Fatalf("epochs: stale %d, takeover %d; want 1 and 2", res.Epoch, takeover.Epoch)
		}
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
		if string(res.Response) != "second" || res.Epoch != 2 {
			t.Fatalf("stale owner overwrote the response: %q epoch %d", res.Response, res.Epoch)
		}
	})

	t.Run("UnknownOutcomeKeepsClaimUntilLeaseEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		lost := errors.New("read timeout after sending")
		res, err := b.guard.Do(ctx, req("alice", "charge", "k1", "100"), func(context.Context) ([]byte, error) {
			return nil, key.MarkUnknown(lost)
		})
		mustOutcome(t, res, err, key.OutcomeExecuted, lost)
		if !errors.Is(err, key.ErrOutcomeUnknown) {
			t.Fatalf("err %v does not say unknown", err)
		}
		b.clock.Advance(3 * time.Second)
		var c counter
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeUnknown, key.ErrOutcomeUnknown)
		if res.RetryAfter != testLease-3*time.Second || c.n.Load() != 0 {
			t.Fatalf("unknown: retry after %v, runs %d", res.RetryAfter, c.n.Load())
		}
		b.clock.Advance(testLease)
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "100"), c.op("second try"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
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
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		b.clock.Advance(testRetention - time.Millisecond)
		res, err = b.guard.Do(ctx, r, c.op("x"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
		b.clock.Advance(time.Millisecond)
		if _, err := b.store.Get(ctx, r.Scope.StoreKey()); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get after retention: %v", err)
		}
		// An expired key is new again, whatever its content.
		res, err = b.guard.Do(ctx, req("alice", "charge", "k1", "other body"), c.op("second"))
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		if c.n.Load() != 2 {
			t.Fatalf("runs %d", c.n.Load())
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
				mustOutcome(t, inner, err, key.OutcomeExecuted, nil)
			}
			return []byte("alice"), nil
		})
		mustOutcome(t, res, err, key.OutcomeExecuted, nil)
		res, err = b.guard.Do(ctx, req("bob", "POST /charges", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
		if string(res.Response) != "bob|POST /charges" {
			t.Fatalf("bob got %q", res.Response)
		}
		res, err = b.guard.Do(ctx, req("alice", "POST /charges", "k1", "100"), c.op("x"))
		mustOutcome(t, res, err, key.OutcomeReplayed, nil)
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
}
