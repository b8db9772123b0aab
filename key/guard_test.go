package key_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	for _, tt := range []struct {
		name string
		cfg  *key.Config
		ok   bool
	}{
		{"Nil", nil, true},
		{"ZeroLeaseMeansDefault", &key.Config{Lease: 0}, true},
		{"NegativeLease", &key.Config{Lease: -time.Second}, false},
		{"AbsurdLease", &key.Config{Lease: 48 * time.Hour, Retention: 72 * time.Hour}, false},
		{"RetentionShorterThanLease", &key.Config{Lease: time.Minute, Retention: time.Second}, false},
		{"AbsurdRetention", &key.Config{Retention: 400 * 24 * time.Hour}, false},
		{"HeartbeatNotShorterThanLease", &key.Config{Lease: time.Second, Heartbeat: time.Second}, false},
		{"HeartbeatOff", &key.Config{Heartbeat: -1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := key.New(s, tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("New(%+v) = %v, want ok=%v", tt.cfg, err, tt.ok)
			}
		})
	}
}

func request(body string) key.Request {
	return key.Request{
		Scope:       key.Scope{Principal: "alice", Operation: "charge", Key: "k1"},
		Fingerprint: key.FingerprintOf([]byte(body)),
	}
}

// The heartbeat keeps a slow operation's lease alive, so nobody takes over
// an owner that is still working.
func TestHeartbeatExtendsLease(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil) // time.Now: the bubble's fake clock
		g, err := key.New(s, &key.Config{Lease: 3 * time.Second, Heartbeat: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		res, err := g.Do(t.Context(), request("a"), func(ctx context.Context) ([]byte, error) {
			time.Sleep(10 * time.Second) // far past the lease, heartbeats keep it
			rec, err := s.Get(ctx, request("a").Scope.StoreKey())
			if err != nil || rec.LeaseUntil.Before(time.Now()) {
				t.Errorf("lease not extended: %+v %v", rec, err)
			}
			inner, err := g.Do(ctx, request("a"), func(context.Context) ([]byte, error) { return nil, nil })
			if inner.Outcome != key.OutcomeInFlight || !errors.Is(err, key.ErrInFlight) {
				t.Errorf("duplicate during a heartbeat-held lease: %v %v", inner.Outcome, err)
			}
			return []byte("done"), ctx.Err()
		})
		if res.Outcome != key.OutcomeExecuted || err != nil {
			t.Fatalf("%v %v", res.Outcome, err)
		}
	})
}

// When an extension finds the claim taken over, the operation's context is
// cancelled with ErrFenced, so it can stop before doing more harm.
func TestHeartbeatCancelsFencedOperation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil)
		g, err := key.New(s, &key.Config{Lease: 3 * time.Second, Heartbeat: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		res, err := g.Do(t.Context(), request("a"), func(ctx context.Context) ([]byte, error) {
			// Someone else takes the key over (as if our lease had ended).
			rec, _ := s.Get(ctx, request("a").Scope.StoreKey())
			if err := s.Release(ctx, store.Fence{Key: rec.Key, Epoch: rec.Epoch, Owner: rec.Owner}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Claim(ctx, store.ClaimParams{Key: rec.Key, Fingerprint: rec.Fingerprint, Owner: "thief", Lease: time.Hour, Retention: time.Hour}); err != nil {
				t.Fatal(err)
			}
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), key.ErrFenced) {
				t.Errorf("cause %v", context.Cause(ctx))
			}
			return nil, context.Cause(ctx)
		})
		if res.Outcome != key.OutcomeExecuted || !errors.Is(err, key.ErrFenced) {
			t.Fatalf("%v %v", res.Outcome, err)
		}
	})
}

// A new fingerprint algorithm must not turn keys stored under the old one
// into conflicts.
func TestFingerprintVersionUpgrade(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	g, err := key.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := request("body")
	if _, err := g.Do(t.Context(), old, func(context.Context) ([]byte, error) { return []byte("v1 answer"), nil }); err != nil {
		t.Fatal(err)
	}
	v2 := func(body string) key.Fingerprint { return append(key.Fingerprint{2}, body...) }
	upgraded := key.Request{
		Scope:       old.Scope,
		Fingerprint: v2("body"),
		FingerprintFor: func(v byte) (key.Fingerprint, bool) {
			if v == key.FingerprintV1 {
				return key.FingerprintOf([]byte("body")), true
			}
			return nil, false
		},
	}
	res, err := g.Do(t.Context(), upgraded, func(context.Context) ([]byte, error) { return []byte("ran again"), nil })
	if res.Outcome != key.OutcomeReplayed || string(res.Response) != "v1 answer" || err != nil {
		t.Fatalf("upgraded request: %v %q %v", res.Outcome, res.Response, err)
	}
	// Other content is still a conflict under either version.
	upgraded.Fingerprint = v2("other")
	upgraded.FingerprintFor = func(byte) (key.Fingerprint, bool) { return key.FingerprintOf([]byte("other")), true }
	res, err = g.Do(t.Context(), upgraded, func(context.Context) ([]byte, error) { return nil, nil })
	if res.Outcome != key.OutcomeConflict || !errors.Is(err, key.ErrConflict) {
		t.Fatalf("other content: %v %v", res.Outcome, err)
	}
}

// The sweeper bounds the memory store: expired records go, live claims stay.
func TestSweeperBoundsStore(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(nil)
		g, err := key.New(s, &key.Config{Lease: time.Second, Retention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2500 {
			r := request("x")
			r.Scope.Key = string(rune('a'+i%26)) + time.Duration(i).String()
			if _, err := g.Do(t.Context(), r, func(context.Context) ([]byte, error) { return []byte("r"), nil }); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- key.RunSweeper(ctx, s, &key.SweeperConfig{Interval: 30 * time.Second, BatchSize: 100}) }()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := s.Len(); n != 0 {
			t.Fatalf("%d records left after retention", n)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	})
}

// A caller that goes away while the operation runs (a client disconnect
// cancels the request's context) must not leave the key held and the result
// unrecorded: the next retry would run the operation again.
func TestCompletionOutlivesCancelledCaller(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	g, err := key.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	res, err := g.Do(ctx, request("a"), func(context.Context) ([]byte, error) {
		cancel() // the client hangs up after the effect happened
		return []byte("charged"), nil
	})
	if res.Outcome != key.OutcomeExecuted || err != nil {
		t.Fatalf("%v %v", res.Outcome, err)
	}
	again, err := g.Do(t.Context(), request("a"), func(context.Context) ([]byte, error) { return []byte("twice"), nil })
	if again.Outcome != key.OutcomeReplayed || string(again.Response) != "charged" || err != nil {
		t.Fatalf("retry: %v %q %v", again.Outcome, again.Response, err)
	}
}
