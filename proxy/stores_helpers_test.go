package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/redisstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// storeKinds are the stores every end-to-end test runs on.
var storeKinds = []string{"Memory", "SQLite", "Postgres", "Redis"}

// sharedKinds are the stores several proxies can share.
var sharedKinds = []string{"SQLite", "Postgres", "Redis"}

// openStores returns n handles on one fresh, isolated store of kind, as n
// processes would open it, all on the clock now (nil: the store's own). The
// handles and the store are closed and removed at cleanup.
func openStores(tb testing.TB, kind string, n int, now func() time.Time) []store.Store {
	tb.Helper()
	ctx := context.Background()
	out := make([]store.Store, n)
	switch kind {
	case "Memory":
		if n != 1 {
			tb.Fatal("the memory store lives in one process: it cannot be shared")
		}
		out[0] = memstore.New(&memstore.Config{Now: now})
	case "SQLite":
		path := filepath.Join(tb.TempDir(), "idem.db")
		for i := range out {
			db, err := sqlitestore.Open(path, nil)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { db.Close() })
			if i == 0 {
				if _, err := sqlitestore.Migrate(ctx, db); err != nil {
					tb.Fatal(err)
				}
			}
			s, err := sqlitestore.New(db, &sqlitestore.Config{Now: now})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { s.Close() })
			out[i] = s
		}
	case "Postgres":
		pool := testdb.Postgres(tb)
		if _, err := pgstore.Migrate(ctx, pool); err != nil {
			tb.Fatal(err)
		}
		for i := range out {
			p := pool
			if i > 0 {
				var err error
				if p, err = pgxpool.NewWithConfig(ctx, pool.Config()); err != nil {
					tb.Fatal(err)
				}
				tb.Cleanup(p.Close)
			}
			s, err := pgstore.New(p, &pgstore.Config{Now: now})
			if err != nil {
				tb.Fatal(err)
			}
			out[i] = s
		}
	case "Redis":
		prefix := redisPrefix(tb)
		for i := range out {
			client := redisClient(tb)
			s, err := redisstore.New(ctx, client, &redisstore.Config{Prefix: prefix, Now: now, AllowNonDurable: true})
			if err != nil {
				tb.Fatal(err)
			}
			out[i] = s
		}
	default:
		tb.Fatalf("unknown store kind %q", kind)
	}
	return out
}

// redisAddr is the test server: IDEM_TEST_REDIS, or a local one.
func redisAddr() string {
	if addr := os.Getenv("IDEM_TEST_REDIS"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// redisClient returns a client closed at cleanup; it fails the test when
// the server cannot be reached (tests never skip).
func redisClient(tb testing.TB) *redis.Client {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: redisAddr()})
	tb.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s (IDEM_TEST_REDIS) is unreachable: %v", redisAddr(), err)
	}
	return client
}

// redisPrefix returns a key prefix of the test's own; its keys are deleted
// at cleanup.
func redisPrefix(tb testing.TB) string {
	tb.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "idemtest:proxy:" + hex.EncodeToString(b[:]) + ":"
	client := redisClient(tb) // registered first, so closed after the sweep below
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	return prefix
}
