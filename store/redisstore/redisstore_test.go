package redisstore

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	lease     = 30 * time.Second
	retention = 24 * time.Hour
)

func claimParams(key, fp, owner string) store.ClaimParams {
	return store.ClaimParams{Key: key, Fingerprint: []byte(fp), Owner: owner, Lease: lease, Retention: retention}
}

func mustClaim(t *testing.T, s *Store, p store.ClaimParams) store.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), p)
	if err != nil {
		t.Fatalf("Claim(%q, owner %q): %v", p.Key, p.Owner, err)
	}
	return res
}

func fenceOf(r store.Record) store.Fence {
	return store.Fence{Key: r.Key, Epoch: r.Epoch, Owner: r.Owner}
}

func TestClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NewKey", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		res := mustClaim(t, s, claimParams("k", "fp", "a"))
		if !res.Claimed {
			t.Fatalf("Claimed = false, want true")
		}
		want := store.Record{
			Key: "k", Fingerprint: []byte("fp"), State: store.StateProcessing, Epoch: 1, Owner: "a",
			LeaseUntil: t0.Add(lease), ExpiresAt: t0.Add(retention),
		}
		assertRecord(t, res.Record, want)
		if !res.Now.Equal(t0) {
			t.Errorf("Now = %v, want %v", res.Now, t0)
		}
		got, err := s.Get(ctx, "k")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		assertRecord(t, got, want)
	})

	t.Run("Conflict", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		first := mustClaim(t, s, claimParams("k", "fp1", "a"))
		res := mustClaim(t, s, claimParams("k", "fp2", "b"))
		if res.Claimed {
			t.Fatal("other fingerprint claimed a held key")
		}
		assertRecord(t, res.Record, first.Record)

		// Even after the lease ends, another fingerprint gets nothing.
		clock.Advance(lease)
		if res := mustClaim(t, s, claimParams("k", "fp2", "b")); res.Claimed {
			t.Fatal("other fingerprint took over an ended lease")
		}
	})

	t.Run("InFlight", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		first := mustClaim(t, s, claimParams("k", "fp", "a"))
		clock.Advance(lease - time.Microsecond)
		res := mustClaim(t, s, claimParams("k", "fp", "b"))
		if res.Claimed {
			t.Fatal("same fingerprint claimed a live lease")
		}
		assertRecord(t, res.Record, first.Record)
		if left := res.Record.LeaseUntil.Sub(res.Now); left != time.Microsecond {
			t.Errorf("lease left = %v, want 1µs", left)
		}
	})

	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		first := mustClaim(t, s, claimParams("k", "fp", "a"))
		clock.Advance(time.Second)
		err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(first.Record), Response: []byte("resp"), Retention: time.Hour})
		if err != nil {
			t.Fatalf("Complete: %v", err)
		}
		res := mustClaim(t, s, claimParams("k", "fp", "b"))
		if res.Claimed {
			t.Fatal("claimed a completed key")
		}
		assertRecord(t, res.Record, store.Record{
			Key: "k", Fingerprint: []byte("fp"), State: store.StateDone, Epoch: 1, Owner: "a",
			ExpiresAt: t0.Add(time.Second + time.Hour), Response: []byte("resp"),
		})
	})

	t.Run("TakeoverAfterLease", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		first := mustClaim(t, s, claimParams("k", "fp", "a"))
		if err := s.MarkUnknown(ctx, fenceOf(first.Record)); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		clock.Advance(lease)
		res := mustClaim(t, s, claimParams("k", "fp", "b"))
		if !res.Claimed {
			t.Fatal("same fingerprint did not take over an ended lease")
		}
		assertRecord(t, res.Record, store.Record{
			Key: "k", Fingerprint: []byte("fp"), State: store.StateProcessing, Epoch: 2, Owner: "b",
			LeaseUntil: t0.Add(2 * lease), ExpiresAt: t0.Add(lease + retention),
		})
	})

	t.Run("TakeoverAfterRelease", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		first := mustClaim(t, s, claimParams("k", "fp1", "a"))
		if err := s.Release(ctx, fenceOf(first.Record)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		got, err := s.Get(ctx, "k")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		assertRecord(t, got, store.Record{
			Key: "k", Fingerprint: []byte("fp1"), State: store.StateReleased, Epoch: 1, Owner: "a",
			ExpiresAt: t0.Add(retention),
		})
		res := mustClaim(t, s, claimParams("k", "fp2", "b"))
		if !res.Claimed || res.Record.Epoch != 2 || string(res.Record.Fingerprint) != "fp2" {
			t.Fatalf("claim after release = %+v, want claimed at epoch 2 with fp2", res)
		}
	})

	t.Run("AfterExpiry", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		first := mustClaim(t, s, claimParams("k", "fp1", "a"))
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(first.Record), Retention: time.Minute}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		clock.Advance(time.Minute)
		if _, err := s.Get(ctx, "k"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get after expiry = %v, want ErrNotFound", err)
		}
		// The hash is still in Redis (its TTL runs in real time), so the
		// epoch continues.
		res := mustClaim(t, s, claimParams("k", "fp2", "b"))
		if !res.Claimed || res.Record.Epoch != 2 {
			t.Fatalf("claim after expiry = %+v, want claimed at epoch 2", res)
		}
	})

	t.Run("BinaryKey", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)

		key := "\x00k\xff*?[\r\n"
		fp := "\x00\x01\xfe\xff"
		res := mustClaim(t, s, claimParams(key, fp, "\x00owner\xff"))
		if !res.Claimed {
			t.Fatal("binary key not claimed")
		}
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res.Record), Response: []byte("\x00\xff"), Retention: time.Hour}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		got, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if got.Key != key || string(got.Fingerprint) != fp || !bytes.Equal(got.Response, []byte("\x00\xff")) {
			t.Fatalf("Get = %+v, bytes not kept", got)
		}
		if _, err := s.Get(ctx, "\x00k\xff"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get(prefix of key) = %v, want ErrNotFound", err)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		s, _ := newTestStore(t, nil)

		var claimed atomic.Int32
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				res, err := s.Claim(ctx, claimParams("k", "fp", string(rune('A'+i))))
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				if res.Claimed {
					claimed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := claimed.Load(); n != 1 {
			t.Fatalf("%d claims granted, want exactly 1", n)
		}
	})

	t.Run("InvalidParams", func(t *testing.T) {
		t.Parallel()
		s, _ := newTestStore(t, nil)
		for name, p := range map[string]store.ClaimParams{
			"EmptyKey":      claimParams("", "fp", "a"),
			"LongKey":       claimParams(strings.Repeat("k", 256), "fp", "a"),
			"ZeroLease":     {Key: "k", Owner: "a", Retention: time.Hour},
			"ZeroRetention": {Key: "k", Owner: "a", Lease: time.Second},
		} {
			if _, err := s.Claim(ctx, p); err == nil || errors.Is(err, store.ErrFenced) {
				t.Errorf("%s: Claim = %v, want a validation error", name, err)
			}
		}
	})
}

func TestFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// writes are the four fenced writes, each applied with fence f.
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
	}

	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clock := testclock.New(t0)
			s, _ := newTestStore(t, clock.Now)

			stale := mustClaim(t, s, claimParams("k", "fp", "a")).Record
			clock.Advance(lease)
			current := mustClaim(t, s, claimParams("k", "fp", "b")).Record
			if current.Epoch != stale.Epoch+1 {
				t.Fatalf("takeover epoch = %d, want %d", current.Epoch, stale.Epoch+1)
			}

			for fname, f := range map[string]store.Fence{
				"StaleOwner":  fenceOf(stale),
				"StaleEpoch":  {Key: "k", Epoch: stale.Epoch, Owner: current.Owner},
				"WrongOwner":  {Key: "k", Epoch: current.Epoch, Owner: "a"},
				"MissingKey":  {Key: "other", Epoch: 1, Owner: "b"},
				"FutureEpoch": {Key: "k", Epoch: current.Epoch + 1, Owner: current.Owner},
			} {
				if err := write(s, f); !errors.Is(err, store.ErrFenced) {
					t.Errorf("%s: %s = %v, want ErrFenced", fname, name, err)
				}
			}
			got, err := s.Get(ctx, "k")
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			assertRecord(t, got, current)

			if err := write(s, fenceOf(current)); err != nil {
				t.Fatalf("%s by the holder: %v", name, err)
			}
		})
	}

	t.Run("AfterComplete", func(t *testing.T) {
		t.Parallel()
		s, _ := newTestStore(t, nil)
		rec := mustClaim(t, s, claimParams("k", "fp", "a")).Record
		if err := writes["Complete"](s, fenceOf(rec)); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		for name, write := range writes {
			if err := write(s, fenceOf(rec)); !errors.Is(err, store.ErrFenced) {
				t.Errorf("%s after Complete = %v, want ErrFenced", name, err)
			}
		}
	})

	t.Run("AfterExpiry", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)
		p := claimParams("k", "fp", "a")
		p.Retention = lease
		rec := mustClaim(t, s, p).Record
		clock.Advance(lease)
		for name, write := range writes {
			if err := write(s, fenceOf(rec)); !errors.Is(err, store.ErrFenced) {
				t.Errorf("%s after expiry = %v, want ErrFenced", name, err)
			}
		}
	})

	t.Run("CompleteAfterLeaseEnded", func(t *testing.T) {
		t.Parallel()
		clock := testclock.New(t0)
		s, _ := newTestStore(t, clock.Now)
		rec := mustClaim(t, s, claimParams("k", "fp", "a")).Record
		clock.Advance(2 * lease)
		if err := writes["Complete"](s, fenceOf(rec)); err != nil {
			t.Fatalf("Complete after the lease ended, nobody took over: %v", err)
		}
	})
}

func TestExtend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(t0)
	s, b := newTestStore(t, clock.Now)

	p := claimParams("k", "fp", "a")
	p.Retention = time.Minute
	rec := mustClaim(t, s, p).Record
	clock.Advance(10 * time.Second)

	until, err := s.Extend(ctx, fenceOf(rec), 5*time.Minute)
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	want := t0.Add(10*time.Second + 5*time.Minute)
	if !until.Equal(want) {
		t.Fatalf("Extend = %v, want %v", until, want)
	}
	got, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !got.LeaseUntil.Equal(want) || !got.ExpiresAt.Equal(want) {
		t.Fatalf("after Extend LeaseUntil = %v, ExpiresAt = %v, want both %v", got.LeaseUntil, got.ExpiresAt, want)
	}
	// Redis keeps the hash at least until the lease ends (relative TTL on
	// the injected clock: 5 minutes from now).
	ttl, err := b.client.PTTL(ctx, b.prefix+"k").Result()
	if err != nil {
		t.Fatalf("PTTL: %v", err)
	}
	if ttl < 5*time.Minute-time.Second || ttl > 5*time.Minute {
		t.Fatalf("PTTL = %v, want about 5m", ttl)
	}
}

func TestServerClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := newTestStore(t, nil)

	p := claimParams("k", "fp", "a")
	p.Retention = time.Second // shorter than the lease
	before := time.Now()
	res := mustClaim(t, s, p)
	if d := res.Now.Sub(before); d < -time.Minute || d > time.Minute {
		t.Fatalf("server Now = %v, local clock %v: not the server's clock?", res.Now, before)
	}
	if !res.Record.LeaseUntil.Equal(res.Now.Add(lease)) || !res.Record.ExpiresAt.Equal(res.Now.Add(time.Second)) {
		t.Fatalf("record = %+v, want lease and retention from Now %v", res.Record, res.Now)
	}
	// The hash expires at the lease's end, not before: a live lease is
	// never dropped by Redis.
	at, err := b.client.PExpireTime(ctx, b.prefix+"k").Result()
	if err != nil {
		t.Fatalf("PEXPIRETIME: %v", err)
	}
	wantMS := (res.Record.LeaseUntil.UnixMicro() + 999) / 1000
	if got := at.Milliseconds(); got != wantMS {
		t.Fatalf("PEXPIRETIME = %d, want %d (LeaseUntil rounded up to ms)", got, wantMS)
	}

	if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res.Record), Retention: time.Hour}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	at, err = b.client.PExpireTime(ctx, b.prefix+"k").Result()
	if err != nil {
		t.Fatalf("PEXPIRETIME: %v", err)
	}
	if want := (got.ExpiresAt.UnixMicro() + 999) / 1000; at.Milliseconds() != want {
		t.Fatalf("PEXPIRETIME after Complete = %d, want %d (ExpiresAt)", at.Milliseconds(), want)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, nil)
	n, err := s.Sweep(context.Background(), 100)
	if n != 0 || err != nil {
		t.Fatalf("Sweep = %d, %v, want 0, nil", n, err)
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	s, _ := newTestStore(t, nil)
	// The test server runs with appendonly no.
	want := store.Capabilities{Durable: false, Transactions: false, Shared: true, SelfExpiring: true}
	if got := s.Capabilities(); got != want {
		t.Fatalf("Capabilities = %+v, want %+v", got, want)
	}
}

// assertRecord compares records field by field, times with Equal.
func assertRecord(t *testing.T, got, want store.Record) {
	t.Helper()
	if got.Key != want.Key || !bytes.Equal(got.Fingerprint, want.Fingerprint) || got.State != want.State ||
		got.Epoch != want.Epoch || got.Owner != want.Owner || got.Unknown != want.Unknown ||
		!got.LeaseUntil.Equal(want.LeaseUntil) || !got.ExpiresAt.Equal(want.ExpiresAt) ||
		!bytes.Equal(got.Response, want.Response) {
		t.Fatalf("record =\n  %+v\nwant\n  %+v", got, want)
	}
}
