package key_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/memstore"
)

// outage is a store that fails every call while down is set.
type outage struct {
	*fault.Store
	down atomic.Bool
}

func newOutage() *outage {
	o := &outage{Store: fault.Wrap(memstore.New(nil))}
	o.SetPlan(func(fault.Op) fault.Mode {
		if o.down.Load() {
			return fault.Before
		}
		return fault.Pass
	})
	return o
}

func mustGuard(t *testing.T, o *outage, cfg *key.Config) *key.Guard {
	t.Helper()
	g, err := key.New(o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The store fails while the operation runs, for far longer than the lease:
// the effect happened, so the guard keeps the key held and records the
// response as soon as the store is back. Retries meanwhile are refused, in
// this process and (after recovery) in another one; none runs it again.
func TestOutageDuringOperationRecordsAfterRecovery(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOutage()
		cfg := &key.Config{Lease: time.Second}
		g, other := mustGuard(t, o, cfg), mustGuard(t, o, cfg) // two processes on one store
		var runs atomic.Int32
		op := func(context.Context) ([]byte, error) {
			runs.Add(1)
			o.down.Store(true) // the store fails while the effect happens
			return []byte("charged"), nil
		}
		res, err := g.Do(t.Context(), request("a"), op)
		if res.Outcome != key.OutcomeExecuted || string(res.Response) != "charged" ||
			!errors.Is(err, key.ErrUnavailable) || !errors.Is(err, key.ErrRecording) {
			t.Fatalf("first: %v %q %v, want Executed with ErrUnavailable and ErrRecording", res.Outcome, res.Response, err)
		}
		if g.Recording() != 1 {
			t.Fatalf("Recording() = %d, want 1", g.Recording())
		}
		time.Sleep(5 * time.Second) // the outage outlasts the lease
		if res, err := g.Do(t.Context(), request("a"), op); res.Outcome != key.OutcomeUnavailable || !errors.Is(err, key.ErrUnavailable) {
			t.Fatalf("retry during the outage: %v %v, want Unavailable", res.Outcome, err)
		}
		o.down.Store(false)
		synctest.Wait()
		time.Sleep(2 * time.Second) // one backoff step at most
		if g.Recording() != 0 {
			t.Fatalf("Recording() = %d after recovery, want 0", g.Recording())
		}
		for _, gg := range []*key.Guard{other, g} {
			res, err := gg.Do(t.Context(), request("a"), op)
			if res.Outcome != key.OutcomeReplayed || string(res.Response) != "charged" || err != nil {
				t.Fatalf("retry after recovery: %v %q %v, want the replay", res.Outcome, res.Response, err)
			}
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("the operation ran %d times", n)
		}
	})
}

// A retry that reaches the same process right when the store recovers
// records the first outcome itself before it claims, so it gets the replay
// even if the background attempt has not come round yet.
func TestRetryRecordsPendingOutcomeFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOutage()
		g := mustGuard(t, o, &key.Config{Lease: time.Second})
		var runs atomic.Int32
		op := func(context.Context) ([]byte, error) {
			runs.Add(1)
			o.down.Store(true)
			return []byte("charged"), nil
		}
		if _, err := g.Do(t.Context(), request("a"), op); !errors.Is(err, key.ErrRecording) {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the backoff has grown to a second
		o.down.Store(false)
		res, err := g.Do(t.Context(), request("a"), op) // before the next background attempt
		if res.Outcome != key.OutcomeReplayed || string(res.Response) != "charged" || err != nil {
			t.Fatalf("retry: %v %q %v, want the replay", res.Outcome, res.Response, err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("the operation ran %d times", n)
		}
		if err := g.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// While the operation runs and the store is down (its heartbeat cannot
// extend the lease), a duplicate in the same process is told InFlight
// without a claim: the process knows it holds the key.
func TestDuplicateInProcessIsInFlightWithoutClaim(t *testing.T) {
	t.Parallel()
	o := newOutage()
	g := mustGuard(t, o, nil)
	inside, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(t.Context(), request("a"), func(context.Context) ([]byte, error) {
			close(inside)
			<-finish
			return []byte("ok"), nil
		})
		done <- err
	}()
	<-inside
	o.down.Store(true)
	claims := o.Calls(fault.Claim)
	res, err := g.Do(t.Context(), request("a"), func(context.Context) ([]byte, error) {
		t.Error("the duplicate ran")
		return nil, nil
	})
	if res.Outcome != key.OutcomeInFlight || !errors.Is(err, key.ErrInFlight) || o.Calls(fault.Claim) != claims {
		t.Fatalf("duplicate: %v %v (claims %d→%d), want InFlight without a store call", res.Outcome, err, claims, o.Calls(fault.Claim))
	}
	// Other content under the same key is still the store's to judge.
	o.down.Store(false)
	if res, err := g.Do(t.Context(), request("b"), nil); res.Outcome != key.OutcomeConflict || !errors.Is(err, key.ErrConflict) {
		t.Fatalf("other body: %v %v, want Conflict", res.Outcome, err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// An unknown outcome holds the key for UnknownHold, not for the lease: an
// upstream slower than its caller's timeout may still act, and no retry may
// run before the hold ends.
func TestUnknownHoldOutlastsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOutage()
		g := mustGuard(t, o, &key.Config{Lease: time.Second, UnknownHold: 10 * time.Second})
		var runs atomic.Int32
		lost := func(context.Context) ([]byte, error) {
			runs.Add(1)
			return nil, key.MarkUnknown(errors.New("upstream timed out"))
		}
		if _, err := g.Do(t.Context(), request("a"), lost); !errors.Is(err, key.ErrOutcomeUnknown) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // past the lease, inside the hold
		res, err := g.Do(t.Context(), request("a"), lost)
		if res.Outcome != key.OutcomeUnknown || !errors.Is(err, key.ErrOutcomeUnknown) || res.RetryAfter <= 4*time.Second {
			t.Fatalf("inside the hold: %v %v retry after %v, want Unknown with ~5s left", res.Outcome, err, res.RetryAfter)
		}
		time.Sleep(6 * time.Second)
		if res, _ := g.Do(t.Context(), request("a"), lost); res.Outcome != key.OutcomeExecuted {
			t.Fatalf("after the hold: %v, want Executed", res.Outcome)
		}
		if n := runs.Load(); n != 2 {
			t.Fatalf("ran %d times, want 2 (once, then once after the hold)", n)
		}
	})
}

// The unknown mark itself is recorded after an outage: until then the
// process holds the key, and afterwards the store holds it for the rest of
// UnknownHold.
func TestUnknownMarkRecordedAfterOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOutage()
		cfg := &key.Config{Lease: time.Second, UnknownHold: 30 * time.Second}
		g, other := mustGuard(t, o, cfg), mustGuard(t, o, cfg)
		var runs atomic.Int32
		lost := func(context.Context) ([]byte, error) {
			runs.Add(1)
			o.down.Store(true)
			return nil, key.MarkUnknown(errors.New("reset after sending"))
		}
		if _, err := g.Do(t.Context(), request("a"), lost); !errors.Is(err, key.ErrOutcomeUnknown) {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		o.down.Store(false)
		time.Sleep(2 * time.Second)
		if g.Recording() != 0 {
			t.Fatalf("Recording() = %d, want 0", g.Recording())
		}
		res, err := other.Do(t.Context(), request("a"), lost)
		if res.Outcome != key.OutcomeUnknown || !errors.Is(err, key.ErrOutcomeUnknown) {
			t.Fatalf("other process: %v %v, want Unknown (held)", res.Outcome, err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}

// RecordTimeout bounds the background attempts: after it the guard gives
// up (and says so), and Drain returns.
func TestRecordTimeoutGivesUp(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		o := newOutage()
		g := mustGuard(t, o, &key.Config{Lease: time.Second, RecordTimeout: 10 * time.Second})
		_, err := g.Do(t.Context(), request("a"), func(context.Context) ([]byte, error) {
			o.down.Store(true)
			return []byte("x"), nil
		})
		if !errors.Is(err, key.ErrRecording) {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		if err := g.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 9*time.Second || d > 12*time.Second {
			t.Fatalf("gave up after %v, want about RecordTimeout (10s)", d)
		}
		if g.Recording() != 0 {
			t.Fatal("still recording")
		}
	})
}

// While the store answers but refuses the completion (its writes of the
// response fail), the recorder keeps the store's lease alive by extending
// it, so another process is told InFlight long after the lease would have
// ended, and gets the replay once the completion goes through.
func TestRecorderExtendsLeaseWhileStoreAnswers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		fs := fault.Wrap(memstore.New(nil))
		cfg := &key.Config{Lease: time.Second}
		g, err := key.New(fs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		other, err := key.New(fs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		fs.SetPlan(fault.Always(fault.Before, fault.Complete))
		var runs atomic.Int32
		op := func(context.Context) ([]byte, error) { runs.Add(1); return []byte("charged"), nil }
		if _, err := g.Do(t.Context(), request("a"), op); !errors.Is(err, key.ErrRecording) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second) // five leases
		if res, err := other.Do(t.Context(), request("a"), op); res.Outcome != key.OutcomeInFlight || !errors.Is(err, key.ErrInFlight) {
			t.Fatalf("another process after five leases: %v %v, want InFlight (the recorder extends the lease)", res.Outcome, err)
		}
		fs.SetPlan(nil)
		if err := g.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if res, err := other.Do(t.Context(), request("a"), op); res.Outcome != key.OutcomeReplayed || err != nil {
			t.Fatalf("after the completion went through: %v %v, want the replay", res.Outcome, err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
}
