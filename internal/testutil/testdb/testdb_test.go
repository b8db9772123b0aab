package testdb_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testutil/testdb"
)

func TestPostgresIsolatesAndCleansUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var schemas [2]string
	t.Run("Use", func(t *testing.T) {
		a, b := testdb.Postgres(t), testdb.Postgres(t)
		for i, pool := range []interface {
			QueryRow(context.Context, string, ...any) pgx.Row
		}{a, b} {
			if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schemas[i]); err != nil {
				t.Fatal(err)
			}
		}
		if schemas[0] == schemas[1] || schemas[0] == "" {
			t.Fatalf("schemas %q and %q: want two fresh ones", schemas[0], schemas[1])
		}
		if _, err := a.Exec(ctx, `CREATE TABLE t (x int)`); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Exec(ctx, `CREATE TABLE t (x int)`); err != nil {
			t.Fatalf("same table name in the other schema: %v", err)
		}
	})
	conn, err := pgx.Connect(ctx, testdb.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)`, schemas[:]).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d of the test's schemas were not dropped", left)
	}
}

func TestRedisPrefixIsolatesAndCleansUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var prefixes [2]string
	t.Run("Use", func(t *testing.T) {
		client := testdb.Redis(t)
		for i := range prefixes {
			prefixes[i] = testdb.RedisPrefix(t)
			if err := client.Set(ctx, prefixes[i]+"k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if prefixes[0] == prefixes[1] {
			t.Fatalf("prefix %q twice: want two fresh ones", prefixes[0])
		}
	})
	client := testdb.Redis(t)
	for _, p := range prefixes {
		if n, err := client.Exists(ctx, p+"k").Result(); err != nil || n != 0 {
			t.Fatalf("%sk after the test: exists %d, %v; want deleted", p, n, err)
		}
	}
}
