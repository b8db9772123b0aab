// Package testdb gives tests a database of their own on the real servers
// that CI runs. Each call isolates one test: in PostgreSQL a fresh schema,
// set as the pool's search_path and dropped when the test ends, so parallel
// tests never see each other's tables.
//
// It is imported by tests only. An unreachable server fails the test: store
// tests never skip.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresEnv names the environment variable holding the PostgreSQL URL
// the tests use.
const PostgresEnv = "IDEM_TEST_POSTGRES"

// DefaultPostgresURL is used when PostgresEnv is unset: a local server with
// trust authentication.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// maxConns is each test's pool size: enough for real contention in
// concurrency tests, small enough that parallel tests of several packages
// stay under the server's max_connections (100 by default).
const maxConns = 16

// PostgresURL returns the server URL for tests: PostgresEnv, or
// DefaultPostgresURL.
func PostgresURL() string {
	if u := os.Getenv(PostgresEnv); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// Postgres creates an empty schema named idem_test_<random> and returns a
// pool whose connections use it as their search_path and application_name,
// so unqualified names
// (and migrations run through the pool) land in it. The pool is closed and
// the schema dropped with everything in it when tb ends. Nothing is migrated.
func Postgres(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := PostgresURL()
	schema := "idem_test_" + randomHex(8)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin(tb, ctx, url, "CREATE SCHEMA "+schema)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin(tb, ctx, url, "DROP SCHEMA "+schema+" CASCADE")
	})

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("testdb: parse %s=%q: %v", PostgresEnv, url, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	// The schema's name is also the connections' application_name, so a
	// test that ends "every connection of its pool" (pg_terminate_backend
	// by application_name) ends only its own, never another package's
	// running beside it.
	cfg.ConnConfig.RuntimeParams["application_name"] = schema
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("testdb: open pool: %v", err)
	}
	tb.Cleanup(pool.Close) // runs before the schema is dropped
	if err := pool.Ping(ctx); err != nil {
		tb.Fatalf("testdb: ping %s: %v", url, err)
	}
	return pool
}

// admin runs one statement on its own connection, outside any test schema.
func admin(tb testing.TB, ctx context.Context, url, sql string) {
	tb.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("testdb: PostgreSQL unreachable at %s (set %s): %v", url, PostgresEnv, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		tb.Fatalf("testdb: %s: %v", sql, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
