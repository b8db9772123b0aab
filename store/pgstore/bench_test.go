package pgstore_test

import (
	"context"
	"crypto/sha256"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// The engine through this store, on the server's clock.
func BenchmarkEngine(b *testing.B) {
	flowtest.Bench(b, func(b *testing.B) store.Store {
		return newStore(b, migratedPool(b), nil)
	})
}

// BenchmarkRaw is the baseline for BenchmarkEngine: the same work written
// by hand with pgx on the same table, with none of the engine's rules (no
// lease takeover, no fence, no expiry check). NewKey is an insert-if-absent
// and an update; Replay and Conflict are one point read.
func BenchmarkRaw(b *testing.B) {
	ctx := context.Background()
	response := []byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`)
	fingerprint := sha256.Sum256([]byte("100"))
	keyOf := func(k string) []byte { sum := sha256.Sum256([]byte(k)); return sum[:] }
	newKey := func(b *testing.B, pool *pgxpool.Pool, k []byte) {
		tag, err := pool.Exec(ctx, `
			INSERT INTO idem_keys (epoch, expires_at, lease_until, state, unknown, key, fingerprint, owner)
			VALUES (1, now() + interval '24 hours', now() + interval '30 seconds', 1, false, $1, $2, $3)
			ON CONFLICT (key) DO NOTHING`, k, fingerprint[:], k[:16])
		if err != nil || tag.RowsAffected() != 1 {
			b.Fatal(tag, err)
		}
		tag, err = pool.Exec(ctx, `
			UPDATE idem_keys SET state = 2, lease_until = NULL, response = $2,
				expires_at = now() + interval '24 hours'
			WHERE key = $1`, k, response)
		if err != nil || tag.RowsAffected() != 1 {
			b.Fatal(tag, err)
		}
	}
	read := func(b *testing.B, pool *pgxpool.Pool, k []byte, want string) {
		var state int16
		var fp, resp []byte
		err := pool.QueryRow(ctx, `SELECT state, fingerprint, response FROM idem_keys WHERE key = $1`, k).
			Scan(&state, &fp, &resp)
		if err != nil || state != 2 || (string(fp) == string(fingerprint[:])) != (want == "replay") {
			b.Fatal(state, err)
		}
	}

	b.Run("NewKey", func(b *testing.B) {
		pool := migratedPool(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			newKey(b, pool, keyOf("k"+strconv.Itoa(i)))
		}
	})
	b.Run("Replay", func(b *testing.B) {
		pool := migratedPool(b)
		k := keyOf("k")
		newKey(b, pool, k)
		b.ReportAllocs()
		for b.Loop() {
			read(b, pool, k, "replay")
		}
	})
	b.Run("Conflict", func(b *testing.B) {
		pool := migratedPool(b)
		k := keyOf("k")
		newKey(b, pool, k)
		fingerprint = sha256.Sum256([]byte("999"))
		defer func() { fingerprint = sha256.Sum256([]byte("100")) }()
		b.ReportAllocs()
		for b.Loop() {
			read(b, pool, k, "conflict")
		}
	})
}

// BenchmarkDiskPerRecord claims and completes b.N keys the way the engine
// does (32-byte key and fingerprint, 16-byte owner, a 49-byte response),
// from parallel goroutines, and reports the table's size with its indexes
// per record. For the figure at a million records:
//
//	go test -run '^$' -bench DiskPerRecord -benchtime 1000000x ./store/pgstore
func BenchmarkDiskPerRecord(b *testing.B) {
	ctx := context.Background()
	s, bundle := setup(b)
	s = newStore(b, bundle.pool, nil)
	response := []byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`)
	fingerprint := sha256.Sum256([]byte("100"))
	var n atomic.Int64
	b.ResetTimer()
	b.SetParallelism(8) // 16 goroutines on 2 CPUs: the pool, not the CPUs, bounds it
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sum := sha256.Sum256([]byte("k" + strconv.FormatInt(n.Add(1), 10)))
			p := store.ClaimParams{Key: string(sum[:]), Fingerprint: fingerprint[:], Owner: string(sum[:16]),
				Lease: 30 * time.Second, Retention: 24 * time.Hour}
			res, err := s.Claim(ctx, p)
			if err != nil || !res.Claimed {
				b.Fatal(res, err)
			}
			err = s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res), Response: response, Retention: 24 * time.Hour})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	var heap, indexes int64
	err := bundle.pool.QueryRow(ctx, `SELECT pg_table_size('idem_keys'), pg_indexes_size('idem_keys')`).Scan(&heap, &indexes)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(heap)/float64(b.N), "heap-B/record")
	b.ReportMetric(float64(indexes)/float64(b.N), "index-B/record")
	b.ReportMetric(float64(heap+indexes)/float64(b.N), "disk-B/record")
}

// BenchmarkEnqueue measures transactions of one outbox enqueue each, 32
// at once, with the NOTIFY inside them (the default) and without it
// (Config.OutboxNotifyAfterCommit, the caller's NotifyOutbox after the
// commit): PostgreSQL serialises the commits of notifying transactions.
func BenchmarkEnqueue(b *testing.B) {
	for _, c := range []struct {
		name  string
		quiet bool
	}{{"NotifyInTx", false}, {"NotifyAfterCommit", true}} {
		b.Run(c.name, func(b *testing.B) {
			_, bk := setup(b)
			s, err := pgstore.New(bk.pool, &pgstore.Config{OutboxNotifyAfterCommit: c.quiet})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
						_, _, err := s.EnqueueTx(ctx, tx, intent("pay", ""))
						return err
					})
					if err == nil && c.quiet {
						err = s.NotifyOutbox(ctx)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
