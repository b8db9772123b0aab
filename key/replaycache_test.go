package key_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// counted counts the claims that reach the store.
type counted struct {
	store.Store
	claims atomic.Int64
}

func (c *counted) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, p)
}

func respond(s string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return []byte(s), nil }
}

// A completed response is replayed from memory: no claim reaches the store.
// Another fingerprint, another principal and the cache turned off all ask
// the store.
func TestReplayCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &counted{Store: memstore.New(nil)}
	g, err := key.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := g.Do(ctx, request("a"), respond("first")); err != nil || res.Outcome != key.OutcomeExecuted {
		t.Fatalf("first: %+v %v", res, err)
	}
	for range 10 {
		res, err := g.Do(ctx, request("a"), respond("second"))
		if err != nil || res.Outcome != key.OutcomeReplayed || string(res.Response) != "first" {
			t.Fatalf("replay: %+v %v", res, err)
		}
	}
	if n := s.claims.Load(); n != 1 {
		t.Fatalf("%d claims reached the store, want 1 (replays from memory)", n)
	}
	// Another fingerprint: the store answers the conflict.
	if res, err := g.Do(ctx, request("b"), respond("x")); !errors.Is(err, key.ErrConflict) || res.Outcome != key.OutcomeConflict {
		t.Fatalf("another fingerprint: %+v %v, want a conflict", res, err)
	}
	// Another principal, same key and body: its own operation.
	bob := request("a")
	bob.Scope.Principal = "bob"
	if res, err := g.Do(ctx, bob, respond("bob's")); err != nil || res.Outcome != key.OutcomeExecuted || string(res.Response) != "bob's" {
		t.Fatalf("another principal: %+v %v, want its own run", res, err)
	}
	if n := s.claims.Load(); n != 3 {
		t.Fatalf("%d claims reached the store, want 3", n)
	}
	// Another guard on the same store learns the response from it once,
	// then replays from memory.
	g2, err := key.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res, err := g2.Do(ctx, request("a"), respond("x")); err != nil || res.Outcome != key.OutcomeReplayed || string(res.Response) != "first" {
			t.Fatalf("another guard: %+v %v", res, err)
		}
	}
	if n := s.claims.Load(); n != 4 {
		t.Fatalf("%d claims reached the store, want 4 (one for the other guard)", n)
	}
	// Off: every replay asks the store.
	g3, err := key.New(s, &key.Config{ReplayCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res, err := g3.Do(ctx, request("a"), respond("x")); err != nil || res.Outcome != key.OutcomeReplayed {
			t.Fatalf("cache off: %+v %v", res, err)
		}
	}
	if n := s.claims.Load(); n != 7 {
		t.Fatalf("%d claims reached the store, want 7", n)
	}
}

// A cached response is never served after its record expired: the key is
// new again, and the operation runs.
func TestReplayCacheExpires(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := &counted{Store: memstore.New(nil)} // time.Now: the bubble's fake clock
		g, err := key.New(s, &key.Config{Lease: time.Second, Retention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(ctx, request("a"), respond("first")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(59 * time.Second)
		if res, err := g.Do(ctx, request("a"), respond("second")); err != nil || res.Outcome != key.OutcomeReplayed || s.claims.Load() != 1 {
			t.Fatalf("within the retention: %+v %v, %d claims", res, err, s.claims.Load())
		}
		time.Sleep(time.Second)
		res, err := g.Do(ctx, request("a"), respond("second"))
		if err != nil || res.Outcome != key.OutcomeExecuted || string(res.Response) != "second" {
			t.Fatalf("after the retention: %+v %v, want the operation run again", res, err)
		}
	})
}

// The cache holds at most its size; what it dropped is replayed from the
// store, as before.
func TestReplayCacheIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &counted{Store: memstore.New(nil)}
	g, err := key.New(s, &key.Config{ReplayCacheBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	req := func(i int) key.Request {
		return key.Request{Scope: key.Scope{Principal: "alice", Operation: "charge", Key: fmt.Sprintf("k%d", i)}, Fingerprint: key.FingerprintOf([]byte("x"))}
	}
	body := make([]byte, 500)
	for i := range 100 {
		if _, err := g.Do(ctx, req(i), func(context.Context) ([]byte, error) { return body, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n, size := key.ReplayCacheStats(g); size > 4<<10 || n == 0 || n > 8 {
		t.Fatalf("%d entries, %d bytes in a cache of 4 KiB", n, size)
	}
	before := s.claims.Load()
	if res, err := g.Do(ctx, req(0), nil); err != nil || res.Outcome != key.OutcomeReplayed || len(res.Response) != 500 {
		t.Fatalf("the oldest key, dropped from the cache: %+v %v", res, err)
	}
	if s.claims.Load() != before+1 {
		t.Fatal("a key the cache dropped was not asked of the store")
	}
	if _, err := g.Do(ctx, req(99), nil); err != nil || s.claims.Load() != before+1 {
		t.Fatalf("the newest key: %v, %d claims (want it from memory)", err, s.claims.Load()-before)
	}
}
