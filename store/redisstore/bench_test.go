package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// The benchmarks measure the store on the work of one request, and a raw
// baseline doing the same work with go-redis alone, so that the store's
// overhead (Lua, hash fields, fence checks, the server clock) reads off
// directly:
//
//   - New: a new key is claimed and completed (store: Claim + Complete, two
//     script calls; raw: SET NX PX + SET XX PX).
//   - Replay: a completed key is asked for again (store: Claim answering
//     from the stored record; raw: one GET).
//
// Each runs sequentially and with b.RunParallel. BenchmarkEngine runs the
// shared suite (key.Guard over this store).

var benchResponse = []byte(`{"id":"ch_123","amount":1000,"currency":"eur","status":"succeeded"}`)

const (
	benchFingerprint = "fingerprint-0123456789abcdef0123"
	benchOwner       = "owner-0123456789"
	benchRetention   = 24 * time.Hour
)

func benchKey(i int64) string { return fmt.Sprintf("%032d", i) }

func BenchmarkEngine(b *testing.B) {
	flowtest.Bench(b, func(b *testing.B) store.Store {
		s, _ := newTestStore(b, nil)
		return s
	})
}

func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	claim := store.ClaimParams{Fingerprint: []byte(benchFingerprint), Owner: benchOwner, Lease: time.Minute, Retention: benchRetention}

	b.Run("New", func(b *testing.B) {
		s, _ := newTestStore(b, nil)
		var n atomic.Int64
		flowtest.RunSeqAndParallel(b, func() {
			p := claim
			p.Key = benchKey(n.Add(1))
			res, err := s.Claim(ctx, p)
			if err != nil || !res.Claimed {
				b.Fatalf("Claim = %+v, %v", res, err)
			}
			if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res.Record), Response: benchResponse, Retention: benchRetention}); err != nil {
				b.Fatal(err)
			}
		})
	})

	b.Run("Replay", func(b *testing.B) {
		s, _ := newTestStore(b, nil)
		const keys = 1000
		for i := range int64(keys) {
			p := claim
			p.Key = benchKey(i)
			res, err := s.Claim(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res.Record), Response: benchResponse, Retention: benchRetention}); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		flowtest.RunSeqAndParallel(b, func() {
			p := claim
			p.Key = benchKey(n.Add(1) % keys)
			res, err := s.Claim(ctx, p)
			if err != nil || res.Claimed || res.Record.State != store.StateDone {
				b.Fatalf("Claim = %+v, %v", res, err)
			}
		})
	})
}

// BenchmarkRaw is the baseline: the least go-redis that does the same work,
// with no fence, no clock and no record layout.
func BenchmarkRaw(b *testing.B) {
	ctx := context.Background()
	claimValue := benchFingerprint + "|" + benchOwner

	b.Run("New", func(b *testing.B) {
		client := testdb.Redis(b)
		prefix := testdb.RedisPrefix(b)
		var n atomic.Int64
		flowtest.RunSeqAndParallel(b, func() {
			key := prefix + benchKey(n.Add(1))
			ok, err := client.SetNX(ctx, key, claimValue, benchRetention).Result()
			if err != nil || !ok {
				b.Fatalf("SET NX = %v, %v", ok, err)
			}
			if err := client.SetXX(ctx, key, benchResponse, benchRetention).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})

	b.Run("Replay", func(b *testing.B) {
		client := testdb.Redis(b)
		prefix := testdb.RedisPrefix(b)
		const keys = 1000
		for i := range int64(keys) {
			if err := client.Set(ctx, prefix+benchKey(i), benchResponse, benchRetention).Err(); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		flowtest.RunSeqAndParallel(b, func() {
			resp, err := client.Get(ctx, prefix+benchKey(n.Add(1)%keys)).Bytes()
			if err != nil || len(resp) == 0 {
				b.Fatalf("GET = %q, %v", resp, err)
			}
		})
	})
}
