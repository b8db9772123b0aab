package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// The services' addresses, read from the same variables as idem's tests.
const (
	postgresEnv     = "IDEM_TEST_POSTGRES"
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	redisEnv        = "IDEM_TEST_REDIS"
	defaultRedis    = "127.0.0.1:6379"
)

// poolSize is every PostgreSQL pool's size, idem's and the peers' alike.
const poolSize = 16

// env holds the services every row uses and what must be removed at the
// end: PostgreSQL schemas, Redis key prefixes and a temporary directory,
// all of this run's own.
type env struct {
	pgURL    string
	redis    *redis.Client
	dir      string
	cleanups []func()
	// httpChecks are the HTTP setups' checks, run once for both HTTP rows.
	httpChecks map[string]httpCheck
}

// openEnv checks that PostgreSQL and Redis answer. An unreachable service
// is an error: the rows would measure nothing.
func openEnv(ctx context.Context) (*env, error) {
	e := &env{pgURL: getenv(postgresEnv, defaultPostgres)}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL unreachable at %s (set %s): %w", e.pgURL, postgresEnv, err)
	}
	_ = conn.Close(ctx)
	addr := getenv(redisEnv, defaultRedis)
	e.redis = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128})
	if err := e.redis.Ping(ctx).Err(); err != nil {
		_ = e.redis.Close()
		return nil, fmt.Errorf("redis unreachable at %s (set %s): %w", addr, redisEnv, err)
	}
	if e.dir, err = os.MkdirTemp("", "idem-bench-"); err != nil {
		_ = e.redis.Close()
		return nil, err
	}
	return e, nil
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// mark returns a point in the cleanups, for release.
func (e *env) mark() int { return len(e.cleanups) }

// release runs the cleanups registered since mark, last registered
// first: a setup gives its pools back before the next one opens its own,
// so that the run stays well under PostgreSQL's max_connections.
func (e *env) release(mark int) {
	for i := len(e.cleanups) - 1; i >= mark; i-- {
		e.cleanups[i]()
	}
	e.cleanups = e.cleanups[:mark]
}

// close runs every cleanup, last registered first.
func (e *env) close() {
	e.release(0)
	_ = e.redis.Close()
	_ = os.RemoveAll(e.dir)
}

// schema creates an empty PostgreSQL schema of this run's own and returns
// a pool whose connections use it as their search_path; the pool is closed
// and the schema dropped by close.
func (e *env) schema(ctx context.Context) (*pgxpool.Pool, error) {
	name := "idem_bench_" + strings.ToLower(rand.Text()[:12])
	if err := e.admin(ctx, "CREATE SCHEMA "+name); err != nil {
		return nil, err
	}
	e.cleanups = append(e.cleanups, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.admin(ctx, "DROP SCHEMA "+name+" CASCADE")
	})
	cfg, err := pgxpool.ParseConfig(e.pgURL)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.cleanups = append(e.cleanups, pool.Close) // before the schema is dropped
	return pool, nil
}

// pool opens another pool like p (another process's view of the same
// schema), closed by close.
func (e *env) pool(ctx context.Context, p *pgxpool.Pool) (*pgxpool.Pool, error) {
	q, err := pgxpool.NewWithConfig(ctx, p.Config())
	if err != nil {
		return nil, err
	}
	e.cleanups = append(e.cleanups, q.Close)
	return q, nil
}

// admin runs one statement on a connection of its own, outside any schema.
func (e *env) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// prefix returns a Redis key prefix of this run's own; close deletes every
// key under it.
func (e *env) prefix() string {
	p := "idem-bench:" + rand.Text()[:12] + ":"
	e.cleanups = append(e.cleanups, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		iter := e.redis.Scan(ctx, 0, p+"*", 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 1000 {
				_ = e.redis.Unlink(ctx, batch...).Err()
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			_ = e.redis.Unlink(ctx, batch...).Err()
		}
	})
	return p
}

// redisDurable reports whether the Redis server fsyncs every write (AOF
// with appendfsync always), as idem's Redis store requires unless told
// otherwise.
func (e *env) redisDurable(ctx context.Context) (bool, error) {
	aof, err := e.redis.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		return false, err
	}
	fsync, err := e.redis.ConfigGet(ctx, "appendfsync").Result()
	if err != nil {
		return false, err
	}
	return aof["appendonly"] == "yes" && fsync["appendfsync"] == "always", nil
}

// errUnexpected marks an answer a row did not expect; it stops the row.
var errUnexpected = errors.New("unexpected answer")
