package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

var ctx = context.Background()

func claimParams(key, fp, owner string) store.ClaimParams {
	return store.ClaimParams{
		Key:         key,
		Fingerprint: []byte(fp),
		Owner:       owner,
		Lease:       10 * time.Second,
		Retention:   time.Hour,
	}
}

func mustClaim(t *testing.T, s *Store, p store.ClaimParams) store.ClaimResult {
	t.Helper()
	res, err := s.Claim(ctx, p)
	if err != nil {
		t.Fatalf("Claim(%q): %v", p.Key, err)
	}
	return res
}

func TestClaim(t *testing.T) {
	t.Parallel()

	t.Run("NewKey", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		res := mustClaim(t, s, claimParams("k", "fp", "o1"))
		want := store.Record{
			Key: "k", Fingerprint: []byte("fp"), State: store.StateProcessing, Epoch: 1, Owner: "o1",
			LeaseUntil: t0.Add(10 * time.Second), ExpiresAt: t0.Add(time.Hour),
		}
		if !res.Claimed || !recordEqual(res.Record, want) || !res.Now.Equal(b.clock.Now()) {
			t.Fatalf("got %+v, want claimed %+v at %v", res, want, t0)
		}
		got, err := s.Get(ctx, "k")
		if err != nil || !recordEqual(got, want) {
			t.Fatalf("Get = %+v, %v; want %+v", got, err, want)
		}
	})

	t.Run("LiveLeaseRefuses", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		mustClaim(t, s, claimParams("k", "fp", "o1"))
		b.clock.Advance(9 * time.Second)
		for _, fp := range []string{"fp", "other"} {
			res := mustClaim(t, s, claimParams("k", fp, "o2"))
			if res.Claimed || res.Record.Owner != "o1" || res.Record.Epoch != 1 {
				t.Fatalf("fingerprint %q: got %+v, want the first claim unchanged", fp, res)
			}
		}
	})

	t.Run("EndedLeaseTakeover", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := mustClaim(t, s, claimParams("k", "fp", "o1"))
		if err := s.MarkUnknown(ctx, fenceOf(first.Record)); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(10 * time.Second) // LeaseUntil <= now
		if res := mustClaim(t, s, claimParams("k", "other", "o2")); res.Claimed {
			t.Fatalf("another fingerprint took over: %+v", res)
		}
		res := mustClaim(t, s, claimParams("k", "fp", "o3"))
		if !res.Claimed || res.Record.Epoch != 2 || res.Record.Owner != "o3" || res.Record.Unknown {
			t.Fatalf("got %+v, want takeover with epoch 2 and Unknown cleared", res)
		}
	})

	t.Run("DoneRefuses", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := mustClaim(t, s, claimParams("k", "fp", "o1"))
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(first.Record), Response: []byte("resp"), Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Minute)
		res := mustClaim(t, s, claimParams("k", "fp", "o2"))
		if res.Claimed || res.Record.State != store.StateDone || string(res.Record.Response) != "resp" {
			t.Fatalf("got %+v, want the stored response", res)
		}
	})

	t.Run("ReleasedAnyFingerprint", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		first := mustClaim(t, s, claimParams("k", "fp", "o1"))
		if err := s.Release(ctx, fenceOf(first.Record)); err != nil {
			t.Fatal(err)
		}
		res := mustClaim(t, s, claimParams("k", "other", "o2"))
		if !res.Claimed || res.Record.Epoch != 2 || string(res.Record.Fingerprint) != "other" {
			t.Fatalf("got %+v, want takeover of the released record", res)
		}
	})

	t.Run("ExpiredContinuesEpoch", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := mustClaim(t, s, claimParams("k", "fp", "o1"))
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(first.Record), Retention: time.Minute}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Minute) // ExpiresAt <= now
		if _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get after expiry: %v, want ErrNotFound", err)
		}
		res := mustClaim(t, s, claimParams("k", "other", "o2"))
		if !res.Claimed || res.Record.Epoch != 2 || res.Record.Response != nil {
			t.Fatalf("got %+v, want a fresh claim with epoch 2", res)
		}
	})

	t.Run("EmptyFingerprintAndOwner", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		mustClaim(t, s, store.ClaimParams{Key: "k", Lease: time.Second, Retention: time.Hour})
		b.clock.Advance(time.Second)
		res := mustClaim(t, s, store.ClaimParams{Key: "k", Fingerprint: []byte{}, Lease: time.Second, Retention: time.Hour})
		if !res.Claimed || res.Record.Epoch != 2 {
			t.Fatalf("got %+v, want takeover: nil and empty fingerprints are equal", res)
		}
	})

	t.Run("BinaryKeys", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		keys := []string{"\x00", "\x00\x00", "\xff", strings.Repeat("k", 255), "a\x00b"}
		for _, k := range keys {
			if res := mustClaim(t, s, claimParams(k, "fp", "o")); !res.Claimed || res.Record.Epoch != 1 {
				t.Fatalf("key %q: got %+v, want a new claim", k, res)
			}
		}
		for _, k := range keys {
			if rec, err := s.Get(ctx, k); err != nil || rec.Key != k {
				t.Fatalf("Get(%q) = %+v, %v", k, rec, err)
			}
		}
	})
}

// TestConcurrentClaims releases 64 claims of one key at once: exactly one
// is granted and every other answer carries that claim.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	const n = 64
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results [n]store.ClaimResult
		errs    [n]error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.Claim(ctx, claimParams("k", "fp", fmt.Sprint("o", i)))
		})
	}
	close(start)
	wg.Wait()
	winner := ""
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if results[i].Claimed {
			if winner != "" {
				t.Fatalf("two claims granted: %s and %s", winner, results[i].Record.Owner)
			}
			winner = results[i].Record.Owner
		}
	}
	if winner == "" {
		t.Fatal("no claim granted")
	}
	for i := range n {
		if r := results[i].Record; r.Owner != winner || r.Epoch != 1 {
			t.Fatalf("claim %d saw %+v, want the winner %s at epoch 1", i, r, winner)
		}
	}
}

func TestFence(t *testing.T) {
	t.Parallel()

	// Every holder write, with a stale fence, after a takeover.
	writes := map[string]func(s *Store, f store.Fence) error{
		"Complete": func(s *Store, f store.Fence) error {
			return s.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("x"), Retention: time.Hour})
		},
		"Release": func(s *Store, f store.Fence) error { return s.Release(ctx, f) },
		"Extend": func(s *Store, f store.Fence) error {
			_, err := s.Extend(ctx, f, time.Minute)
			return err
		},
		"MarkUnknown": func(s *Store, f store.Fence) error { return s.MarkUnknown(ctx, f) },
		"CompleteTx": func(s *Store, f store.Fence) error {
			return s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				return s.CompleteTx(ctx, tx, store.CompleteParams{Fence: f, Retention: time.Hour})
			})
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			old := mustClaim(t, s, claimParams("k", "fp", "o1"))
			b.clock.Advance(10 * time.Second)
			cur := mustClaim(t, s, claimParams("k", "fp", "o2"))
			if !cur.Claimed {
				t.Fatalf("takeover refused: %+v", cur)
			}
			before, _ := s.Get(ctx, "k")

			if err := write(s, fenceOf(old.Record)); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("old epoch: %v, want ErrFenced", err)
			}
			wrongOwner := fenceOf(cur.Record)
			wrongOwner.Owner = "o1"
			if err := write(s, wrongOwner); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("current epoch, other owner: %v, want ErrFenced", err)
			}
			missing := fenceOf(cur.Record)
			missing.Key = "absent"
			if err := write(s, missing); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("absent key: %v, want ErrFenced", err)
			}
			if after, _ := s.Get(ctx, "k"); !recordEqual(before, after) {
				t.Fatalf("fenced write changed the record: %+v -> %+v", before, after)
			}
			if err := write(s, fenceOf(cur.Record)); err != nil {
				t.Fatalf("current fence: %v", err)
			}
		})
	}
}

func TestHolderWrites(t *testing.T) {
	t.Parallel()

	t.Run("CompleteAfterLeaseEnded", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := mustClaim(t, s, claimParams("k", "fp", "o1"))
		b.clock.Advance(time.Minute)
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(c.Record), Response: []byte("r"), Retention: 2 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, "k")
		want := store.Record{Key: "k", Fingerprint: []byte("fp"), State: store.StateDone, Epoch: 1, Owner: "o1",
			ExpiresAt: t0.Add(time.Minute + 2*time.Hour), Response: []byte("r")}
		if err != nil || !recordEqual(got, want) {
			t.Fatalf("Get = %+v, %v; want %+v", got, err, want)
		}
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(c.Record), Retention: time.Hour}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("second Complete: %v, want ErrFenced", err)
		}
	})

	t.Run("ExtendRaisesExpiry", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		p := claimParams("k", "fp", "o1")
		p.Retention = 20 * time.Second
		c := mustClaim(t, s, p)
		b.clock.Advance(5 * time.Second)
		until, err := s.Extend(ctx, fenceOf(c.Record), time.Minute)
		if err != nil || !until.Equal(t0.Add(65*time.Second)) {
			t.Fatalf("Extend = %v, %v; want %v", until, err, t0.Add(65*time.Second))
		}
		got, _ := s.Get(ctx, "k")
		if !got.LeaseUntil.Equal(until) || !got.ExpiresAt.Equal(until) {
			t.Fatalf("got %+v, want lease and expiry at %v", got, until)
		}
		b.clock.Advance(30 * time.Second) // past the claim's retention, inside the lease
		if res := mustClaim(t, s, claimParams("k", "other", "o2")); res.Claimed {
			t.Fatalf("claim inside an extended lease was granted: %+v", res)
		}
	})

	t.Run("MarkUnknownKeepsLease", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		c := mustClaim(t, s, claimParams("k", "fp", "o1"))
		if err := s.MarkUnknown(ctx, fenceOf(c.Record)); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Get(ctx, "k")
		want := c.Record
		want.Unknown = true
		if !recordEqual(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})

	t.Run("ReleaseClearsLease", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		c := mustClaim(t, s, claimParams("k", "fp", "o1"))
		if err := s.MarkUnknown(ctx, fenceOf(c.Record)); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, fenceOf(c.Record)); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Get(ctx, "k")
		if got.State != store.StateReleased || !got.LeaseUntil.IsZero() || got.Unknown || !got.ExpiresAt.Equal(c.Record.ExpiresAt) {
			t.Fatalf("got %+v, want RELEASED without lease, same expiry", got)
		}
	})
}

// recordEqual compares records field by field, times with Equal and nil
// and empty byte slices alike.
func recordEqual(a, b store.Record) bool {
	return a.Key == b.Key && bytes.Equal(a.Fingerprint, b.Fingerprint) && a.State == b.State &&
		a.Epoch == b.Epoch && a.Owner == b.Owner && a.Unknown == b.Unknown &&
		a.LeaseUntil.Equal(b.LeaseUntil) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		bytes.Equal(a.Response, b.Response)
}

func fenceOf(r store.Record) store.Fence {
	return store.Fence{Key: r.Key, Epoch: r.Epoch, Owner: r.Owner}
}
