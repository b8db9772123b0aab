// Package testdb gives tests a database of their own on the real servers
// that CI runs. Each call isolates one test: in PostgreSQL a fresh schema,
// set as the pool's search_path and dropped when the test ends; in Redis a
// key prefix whose keys are deleted when the test ends; so parallel tests
// never see each other's data.
//
// The servers' addresses come from IDEM_TEST_POSTGRES and IDEM_TEST_REDIS,
// each read in one function here (PostgresURL, RedisAddr) and nowhere else.
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
	"github.com/redis/go-redis/v9"
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

// RedisEnv names the environment variable holding the address (host:port)
// of the Redis server the tests use.
const RedisEnv = "IDEM_TEST_REDIS"

// DefaultRedisAddr is used when RedisEnv is unset: a local server.
const DefaultRedisAddr = "127.0.0.1:6379"

// RedisAddr returns the server address for tests: RedisEnv, or
// DefaultRedisAddr.
func RedisAddr() string {
	if addr := os.Getenv(RedisEnv); addr != "" {
		return addr
	}
	return DefaultRedisAddr
}

// Redis returns a client to the test server, closed when tb ends. It fails
// the test when the server cannot be reached.
func Redis(tb testing.TB) *redis.Client {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: RedisAddr()})
	tb.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		tb.Fatalf("testdb: Redis unreachable at %s (set %s): %v", RedisAddr(), RedisEnv, err)
	}
	return client
}

// RedisPrefix returns a key prefix of the test's own, "idemtest:<random>:",
// and deletes every key under it when tb ends.
func RedisPrefix(tb testing.TB) string {
	tb.Helper()
	prefix := "idemtest:" + randomHex(8) + ":"
	client := Redis(tb) // its Close is registered first, so it runs after the sweep below
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		keys := make([]string, 0, 1000)
		del := func() {
			if len(keys) == 0 {
				return
			}
			if err := client.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("testdb: delete %s*: %v", prefix, err)
			}
			keys = keys[:0]
		}
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == cap(keys) {
				del()
			}
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("testdb: scan %s*: %v", prefix, err)
		}
		del()
	})
	return prefix
}
