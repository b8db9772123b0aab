package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

const (
	testLease     = 10 * time.Second
	testRetention = time.Hour
)

// exerciseRecords checks store.Store by calling it directly: every holder
// write is fenced, leases and expiry hold on the store's clock, the sweep
// takes only what expired, one of many concurrent claims is granted, and a
// random walk of calls matches the model of the record's state machine.
func exerciseRecords[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	// setup opens a store whose clock starts at Epoch0 and moves only
	// when the test moves it.
	setup := func(t *testing.T) (store.Store, *testclock.Clock) {
		t.Helper()
		clock := testclock.New(testclock.Epoch0)
		s, _ := OpenAs[store.Store](t, open, clock.Now)
		return s, clock
	}

	t.Run("ConcurrentClaimsGrantOne", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		const n = 64
		results, errs := make([]store.ClaimResult, n), make([]error, n)
		Concurrently(n, func(i int) {
			results[i], errs[i] = s.Claim(ctx, store.ClaimParams{Key: "k", Fingerprint: []byte("fp"),
				Owner: fmt.Sprintf("owner-%d", i), Lease: testLease, Retention: testRetention})
		})
		var winner string
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("claim %d: %v", i, errs[i])
			}
			if r.Claimed {
				if winner != "" {
					t.Fatalf("granted to %s and to %s", winner, r.Record.Owner)
				}
				winner = r.Record.Owner
			}
		}
		rec, err := s.Get(ctx, "k")
		if winner == "" || err != nil || rec.Owner != winner || rec.Epoch != 1 {
			t.Fatalf("winner %q, record %+v (%v): want one claim granted, at epoch 1", winner, rec, err)
		}
		for i, r := range results {
			if !r.Claimed && (r.Record.Owner != winner || r.Record.Epoch != 1) {
				t.Fatalf("claim %d was refused with record %+v, not the winner's", i, r.Record)
			}
		}
	})

	t.Run("StoreFencesEveryHolderWrite", func(t *testing.T) {
		t.Parallel()
		s, clock := setup(t)
		k := "fence-key"
		p := store.ClaimParams{Key: k, Fingerprint: []byte("fp"), Owner: "owner-a", Lease: testLease, Retention: testRetention}
		a, err := s.Claim(ctx, p)
		if err != nil || !a.Claimed || a.Record.Epoch != 1 {
			t.Fatalf("claim a: %+v %v", a, err)
		}
		if !a.Now.Equal(testclock.Epoch0) || !a.Record.LeaseUntil.Equal(testclock.Epoch0.Add(testLease)) || !a.Record.ExpiresAt.Equal(testclock.Epoch0.Add(testRetention)) {
			t.Fatalf("claim a times: now %v lease %v expires %v", a.Now, a.Record.LeaseUntil, a.Record.ExpiresAt)
		}
		// Before the lease ends nobody else gets the key.
		clock.Advance(testLease - time.Millisecond)
		p.Owner = "owner-b"
		if r, err := s.Claim(ctx, p); err != nil || r.Claimed || r.Record.Owner != "owner-a" {
			t.Fatalf("claim b inside lease: %+v %v", r, err)
		}
		clock.Advance(time.Millisecond)
		bb, err := s.Claim(ctx, p)
		if err != nil || !bb.Claimed || bb.Record.Epoch != 2 || bb.Record.Owner != "owner-b" {
			t.Fatalf("takeover: %+v %v", bb, err)
		}
		stale := store.Fence{Key: k, Epoch: 1, Owner: "owner-a"}
		// Same epoch, other owner: also fenced.
		forged := store.Fence{Key: k, Epoch: 2, Owner: "owner-a"}
		for _, f := range []store.Fence{stale, forged} {
			if err := s.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("stale"), Retention: testRetention}); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale complete %+v: %v", f, err)
			}
			if err := s.Release(ctx, f); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale release: %v", err)
			}
			if _, err := s.Extend(ctx, f, testLease); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale extend: %v", err)
			}
			if err := s.MarkUnknown(ctx, f); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("stale mark unknown: %v", err)
			}
		}
		rec, err := s.Get(ctx, k)
		if err != nil || rec.State != store.StateProcessing || rec.Epoch != 2 || rec.Owner != "owner-b" || rec.Unknown {
			t.Fatalf("stale writes changed the record: %+v %v", rec, err)
		}
		// The holder's writes go through.
		cur := store.Fence{Key: k, Epoch: 2, Owner: "owner-b"}
		until, err := s.Extend(ctx, cur, 2*testLease)
		if err != nil || !until.Equal(clock.Now().Add(2*testLease)) {
			t.Fatalf("extend: %v %v", until, err)
		}
		if err := s.Complete(ctx, store.CompleteParams{Fence: cur, Response: []byte("ok"), Retention: testRetention}); err != nil {
			t.Fatal(err)
		}
		// Completed: the holder itself is fenced from further writes.
		if err := s.Release(ctx, cur); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("release after complete: %v", err)
		}
		rec, err = s.Get(ctx, k)
		if err != nil || rec.State != store.StateDone || string(rec.Response) != "ok" || !rec.LeaseUntil.IsZero() ||
			!rec.ExpiresAt.Equal(clock.Now().Add(testRetention)) {
			t.Fatalf("done record: %+v %v", rec, err)
		}
		if err := s.Complete(ctx, store.CompleteParams{Fence: store.Fence{Key: "absent", Epoch: 1, Owner: "x"}}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("complete of absent key: %v", err)
		}
	})

	t.Run("EpochFencesEvenWithRepeatedOwner", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		// Package key never repeats an owner token, but the epoch alone must
		// still fence: a caller with its own tokens relies on it.
		p := store.ClaimParams{Key: "k", Fingerprint: []byte("fp"), Owner: "same", Lease: testLease, Retention: testRetention}
		if r, err := s.Claim(ctx, p); err != nil || !r.Claimed {
			t.Fatal(r, err)
		}
		if err := s.Release(ctx, store.Fence{Key: "k", Epoch: 1, Owner: "same"}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Claim(ctx, p); err != nil || !r.Claimed || r.Record.Epoch != 2 {
			t.Fatal(r, err)
		}
		old := store.Fence{Key: "k", Epoch: 1, Owner: "same"}
		if err := s.Complete(ctx, store.CompleteParams{Fence: old, Response: []byte("old"), Retention: testRetention}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("complete with the old epoch: %v", err)
		}
		if err := s.MarkUnknown(ctx, old); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("mark unknown with the old epoch: %v", err)
		}
		rec, err := s.Get(ctx, "k")
		if err != nil || rec.State != store.StateProcessing || rec.Epoch != 2 || rec.Unknown {
			t.Fatalf("old epoch changed the record: %+v %v", rec, err)
		}
	})

	t.Run("ExtendKeepsLeaseAndRecord", func(t *testing.T) {
		t.Parallel()
		s, clock := setup(t)
		p := store.ClaimParams{Key: "ext", Fingerprint: []byte("fp"), Owner: "a", Lease: testLease, Retention: 2 * testLease}
		a, err := s.Claim(ctx, p)
		if err != nil || !a.Claimed {
			t.Fatal(a, err)
		}
		f := store.Fence{Key: "ext", Epoch: 1, Owner: "a"}
		clock.Advance(testLease - time.Second)
		// Extended beyond the record's expiry: the expiry follows the lease.
		until, err := s.Extend(ctx, f, 5*testLease)
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(3 * testLease)
		p.Owner = "b"
		if r, err := s.Claim(ctx, p); err != nil || r.Claimed {
			t.Fatalf("claim during extended lease: %+v %v", r, err)
		}
		rec, err := s.Get(ctx, "ext")
		if err != nil || !rec.LeaseUntil.Equal(until) || rec.ExpiresAt.Before(until) {
			t.Fatalf("extended record: %+v %v", rec, err)
		}
		if n, err := s.Sweep(ctx, 100); err != nil || n != 0 {
			t.Fatalf("sweep took a live lease: %d %v", n, err)
		}
	})

	t.Run("SweepDeletesOnlyExpired", func(t *testing.T) {
		t.Parallel()
		s, clock := setup(t)
		claim := func(k string, lease, retention time.Duration) store.Fence {
			t.Helper()
			r, err := s.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: []byte("fp"), Owner: "o-" + k, Lease: lease, Retention: retention})
			if err != nil || !r.Claimed {
				t.Fatalf("claim %s: %+v %v", k, r, err)
			}
			return store.Fence{Key: k, Epoch: r.Record.Epoch, Owner: "o-" + k}
		}
		for i := range 5 { // done, will expire
			f := claim(fmt.Sprintf("old-%d", i), time.Second, time.Minute)
			if err := s.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("r"), Retention: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		claim("abandoned", time.Second, time.Minute) // its lease ends long before its expiry
		released := claim("released", time.Second, time.Minute)
		if err := s.Release(ctx, released); err != nil {
			t.Fatal(err)
		}
		keep := claim("young", time.Second, 3*time.Hour)
		if err := s.Complete(ctx, store.CompleteParams{Fence: keep, Response: []byte("r"), Retention: 3 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(2 * time.Minute)
		live := claim("live", time.Hour, time.Hour)
		total := 0
		for {
			n, err := s.Sweep(ctx, 2)
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
		if s.Capabilities().SelfExpiring {
			want = 0 // the store deleted them by itself
		}
		if total != want {
			t.Fatalf("swept %d, want %d", total, want)
		}
		for _, k := range []string{"old-0", "abandoned", "released"} {
			if _, err := s.Get(ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("expired %s still visible: %v", k, err)
			}
		}
		for _, k := range []string{"young", "live"} {
			if _, err := s.Get(ctx, k); err != nil {
				t.Fatalf("sweep took %s: %v", k, err)
			}
		}
		if err := s.Complete(ctx, store.CompleteParams{Fence: live, Response: []byte("ok"), Retention: time.Hour}); err != nil {
			t.Fatalf("live claim broken by sweep: %v", err)
		}
	})

	t.Run("StateMachineMatchesModel", func(t *testing.T) {
		t.Parallel()
		checkModel(t, open)
	})
}
