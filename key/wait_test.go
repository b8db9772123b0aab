package key_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/memstore"
)

// With WaitInFlight, duplicates of an attempt in flight wait for it and
// get its replay: 16 at once, one run and 15 replays, no 409; in this
// process and from another guard on the same store alike.
func TestWaitInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New(nil)
	cfg := &key.Config{WaitInFlight: 10 * time.Second}
	here, err := key.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	there, err := key.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]key.Result, 16)
	errs := make([]error, 16)
	wg.Go(func() {
		results[0], errs[0] = here.Do(ctx, request("a"), func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("charged"), nil
		})
	})
	<-started
	for i := 1; i < 16; i++ {
		g := here
		if i%2 == 0 {
			g = there // another process's guard: it reads the record
		}
		wg.Go(func() {
			results[i], errs[i] = g.Do(ctx, request("a"), func(context.Context) ([]byte, error) { return []byte("twice"), nil })
		})
	}
	time.Sleep(50 * time.Millisecond) // the duplicates are waiting
	close(release)
	wg.Wait()
	executed := 0
	for i, r := range results {
		switch {
		case errs[i] != nil:
			t.Fatalf("attempt %d: %+v %v", i, r, errs[i])
		case r.Outcome == key.OutcomeExecuted:
			executed++
		case r.Outcome != key.OutcomeReplayed || string(r.Response) != "charged":
			t.Fatalf("attempt %d: %+v", i, r)
		}
	}
	if executed != 1 {
		t.Fatalf("%d runs, want 1", executed)
	}
}

// The wait is bounded by WaitInFlight and by the caller's context: then
// the duplicate is answered OutcomeInFlight, and the operation never runs
// twice.
func TestWaitInFlightIsBounded(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	g, err := key.New(s, &key.Config{WaitInFlight: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = g.Do(context.Background(), request("a"), func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("slow"), nil
		})
	}()
	<-started
	res, err := g.Do(context.Background(), request("a"), nil)
	if !errors.Is(err, key.ErrInFlight) || res.Outcome != key.OutcomeInFlight {
		t.Fatalf("past WaitInFlight: %+v %v, want in flight", res, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Do(ctx, request("a"), nil); !errors.Is(err, key.ErrInFlight) {
		t.Fatalf("a cancelled caller: %v, want in flight", err)
	}
	close(release)
	<-done
	if _, err := key.New(s, &key.Config{WaitInFlight: -time.Second}); !errors.Is(err, key.ErrBadConfig) {
		t.Fatalf("a negative WaitInFlight: %v", err)
	}
}
