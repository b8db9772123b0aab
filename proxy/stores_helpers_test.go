package proxy

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
	case "SQLite", "SQLiteNormal":
		// SQLiteNormal is the weaker synchronous=NORMAL, for benchmarks
		// only: the ceiling group commit is measured against.
		var ocfg *sqlitestore.OpenConfig
		cfg := &sqlitestore.Config{Now: now}
		if kind == "SQLiteNormal" {
			ocfg = &sqlitestore.OpenConfig{Synchronous: sqlitestore.SynchronousNormal, AllowWeakDurability: true}
			cfg.AllowWeakDurability = true
		}
		path := filepath.Join(tb.TempDir(), "idem.db")
		for i := range out {
			db, err := sqlitestore.Open(path, ocfg)
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { db.Close() })
			if i == 0 {
				if _, err := sqlitestore.Migrate(ctx, db); err != nil {
					tb.Fatal(err)
				}
			}
			s, err := sqlitestore.New(db, cfg)
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
		prefix := testdb.RedisPrefix(tb)
		for i := range out {
			client := testdb.Redis(tb)
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
