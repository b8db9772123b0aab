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

// The two-step claim is Do: claim, then complete; the key replays after.
// A claim settles once: a second settlement is refused and changes
// nothing.
func TestClaimSettlesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New(nil)
	g, err := key.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, res, err := g.Claim(ctx, request("a"))
	if cl == nil || res.Outcome != key.OutcomeExecuted || err != nil || cl.Epoch() != 1 {
		t.Fatalf("Claim: %v %+v %v", cl, res, err)
	}
	if dup, res, err := g.Claim(ctx, request("a")); dup != nil || res.Outcome != key.OutcomeInFlight || !errors.Is(err, key.ErrInFlight) {
		t.Fatalf("duplicate while held: %v %+v %v", dup, res, err)
	}
	if res, err := cl.Complete(ctx, []byte("paid")); err != nil || string(res.Response) != "paid" {
		t.Fatalf("Complete: %+v %v", res, err)
	}
	if cl.Context().Err() == nil {
		t.Error("the claim's context outlived its settlement")
	}
	for name, again := range map[string]func() error{
		"Complete":    func() error { _, err := cl.Complete(ctx, []byte("other")); return err },
		"Release":     func() error { return cl.Release(ctx) },
		"Fail":        func() error { return cl.Fail(ctx, errors.New("x")) },
		"MarkUnknown": func() error { return cl.MarkUnknown(ctx, errors.New("x")) },
	} {
		if err := again(); !errors.Is(err, key.ErrSettled) {
			t.Errorf("%s after Complete: %v, want ErrSettled", name, err)
		}
	}
	res, err = g.Do(ctx, request("a"), func(context.Context) ([]byte, error) { t.Fatal("ran again"); return nil, nil })
	if res.Outcome != key.OutcomeReplayed || string(res.Response) != "paid" || err != nil {
		t.Fatalf("replay: %+v %v", res, err)
	}
}

// Release lets the next claim run; MarkUnknown holds the key, answering
// OutcomeUnknown.
func TestClaimReleaseAndMarkUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, err := key.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, _, _ := g.Claim(ctx, request("a"))
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cl, res, err := g.Claim(ctx, request("a"))
	if cl == nil || res.Epoch != 2 || err != nil {
		t.Fatalf("after Release: %v %+v %v", cl, res, err)
	}
	lost := errors.New("answer lost")
	if err := cl.MarkUnknown(ctx, lost); !errors.Is(err, key.ErrOutcomeUnknown) || !errors.Is(err, lost) {
		t.Fatalf("MarkUnknown = %v", err)
	}
	if dup, res, err := g.Claim(ctx, request("a")); dup != nil || res.Outcome != key.OutcomeUnknown || !errors.Is(err, key.ErrOutcomeUnknown) {
		t.Fatalf("after MarkUnknown: %v %+v %v", dup, res, err)
	}
}

// The claim owns its heartbeat: a claim held past its lease keeps the key,
// and one taken over has its Context cancelled with ErrFenced, and its
// Complete is fenced.
func TestClaimHeartbeat(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		s := memstore.New(nil)
		g, err := key.New(s, &key.Config{Lease: 3 * time.Second, Heartbeat: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cl, _, _ := g.Claim(ctx, request("a"))
		time.Sleep(10 * time.Second)
		if rec, err := s.Get(ctx, request("a").Scope.StoreKey()); err != nil || rec.LeaseUntil.Before(time.Now()) || rec.Epoch != 1 {
			t.Fatalf("lease not kept: %+v %v", rec, err)
		}
		// Another owner takes the key over (as after a stall longer than
		// the lease): the next heartbeat finds it lost.
		storeKey := request("a").Scope.StoreKey()
		rec, _ := s.Get(ctx, storeKey)
		if err := s.Release(ctx, store.Fence{Key: storeKey, Epoch: rec.Epoch, Owner: rec.Owner}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Claim(ctx, store.ClaimParams{Key: storeKey, Fingerprint: request("a").Fingerprint, Owner: "other",
			Lease: time.Minute, Retention: time.Hour}); err != nil || !r.Claimed {
			t.Fatal(r, err)
		}
		time.Sleep(2 * time.Second)
		if cause := context.Cause(cl.Context()); !errors.Is(cause, key.ErrFenced) {
			t.Fatalf("claim's context cause %v, want ErrFenced", cause)
		}
		if _, err := cl.Complete(ctx, []byte("late")); !errors.Is(err, key.ErrFenced) {
			t.Fatalf("stale Complete: %v, want ErrFenced", err)
		}
	})
}
