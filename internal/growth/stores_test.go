package growth_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/redisstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The subjects: each opens a private store of one kind, migrated, and
// knows how to write prefilled records in that store's own format (its
// migrations and scripts are the reference: store/*/migrations,
// store/redisstore/lua/common.lua).

// zero is the time prefilled record i expires i ms after: expiryOffset
// from now, in whole milliseconds so that every store holds it exactly
// (Redis' PEXPIREAT is in milliseconds).
func zero() time.Time { return time.Now().UTC().Truncate(time.Millisecond).Add(expiryOffset) }

// sqliteBatch is how many records one prefill transaction writes: enough
// to make the fsync per commit negligible, few enough that the pages one
// transaction touches in the key index (one per record, at worst) keep the
// write-ahead log small.
const sqliteBatch = 10_000

// sqliteFillCache is the page cache of the prefill's own connection, in
// KiB (PRAGMA cache_size takes a negative size in KiB): the key index of
// ten million records is about 600 MB, and inserting random keys into it
// through SQLite's default 2 MB cache rereads a page for nearly every row.
const sqliteFillCache = 512 << 10

func openSQLite(t *testing.T) *subject {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "growth.db")
	db, err := sqlitestore.Open(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := &subject{st: st, zero: zero(), footprintName: "disk (file + WAL)",
		setting: "WAL, synchronous=FULL, group commit, 8 connections"}

	s.fill = func(t *testing.T, from, to int, zero time.Time) {
		// A handle of its own, one connection with a large cache, closed
		// (and its cache freed) before anything is measured.
		fdb, err := sqlitestore.Open(file, &sqlitestore.OpenConfig{MaxOpenConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer fdb.Close()
		if _, err := fdb.ExecContext(ctx, "PRAGMA cache_size = -"+strconv.Itoa(sqliteFillCache)); err != nil {
			t.Fatal(err)
		}
		inBatches(t, from, to, sqliteBatch, func(lo, hi int) error { return sqliteFill(ctx, fdb, zero, lo, hi) })
		// The log the bulk load left behind is the load's, not the
		// records': empty it, so that the footprint counts the log that
		// ordinary operation keeps.
		if _, err := fdb.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			t.Fatal(err)
		}
	}
	s.count = func(t *testing.T) int { return scanInt(t, db.QueryRowContext(ctx, countSQL)) }
	s.footprint = func(t *testing.T) int64 { return fileSize(t, file) + fileSize(t, file+"-wal") }
	s.explain = func(t *testing.T) {
		for _, c := range []struct {
			name string
			args []any
		}{
			{"read.sql", []any{sql.Named("key", []byte(prefilledKey(1)))}},
			{"sweep.sql", []any{sql.Named("now", time.Now().UnixMicro()), sql.Named("limit", sweepBatch)}},
		} {
			name := c.name
			rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+storeSQL(t, "sqlitestore", name), c.args...)
			if err != nil {
				t.Fatalf("explain %s: %v", name, err)
			}
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
			t.Logf("SQLite plan of sqlitestore/sql/%s: %s", name, strings.Join(plan, "; "))
		}
	}
	return s
}

// sqliteFill writes prefilled records [from, to) in one transaction, in
// the columns of migrations/001_idem_keys.sql: raw bytes for key,
// fingerprint and owner, times in microseconds, 0 for no lease.
func sqliteFill(ctx context.Context, db *sql.DB, zero time.Time, from, to int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO idem_keys
		(key, fingerprint, state, epoch, owner, unknown, lease_until, expires_at, response)
		VALUES (?, ?, 2, 1, ?, 0, 0, ?, ?)`)
	if err != nil {
		return err
	}
	for i := from; i < to; i++ {
		_, err := ins.ExecContext(ctx, []byte(prefilledKey(i)), fingerprint(i), owner(i),
			expiresAt(zero, i).UnixMicro(), response(i))
		if err != nil {
			return err
		}
	}
	return tx.Commit()
}

// inBatches writes records [from, to) with write, size at a time, and
// logs its progress at each million.
func inBatches(t *testing.T, from, to, size int, write func(lo, hi int) error) {
	for lo := from; lo < to; lo += size {
		hi := min(lo+size, to)
		if err := write(lo, hi); err != nil {
			t.Fatalf("prefill %d..%d: %v", lo, hi-1, err)
		}
		if hi/1_000_000 > lo/1_000_000 {
			t.Logf("records up to %s written", thousands(int64(hi)))
		}
	}
}

const countSQL = "SELECT count(*) FROM idem_keys"

// scanInt returns the one integer row holds.
func scanInt(t *testing.T, row interface{ Scan(...any) error }) int {
	var n int
	if err := row.Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func fileSize(t *testing.T, name string) int64 {
	fi, err := os.Stat(name)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// pgChunk is how many records one prefill statement writes, so that the
// log shows progress and no transaction grows without bound.
const pgChunk = 1_000_000

// pgFillSQL writes prefilled records $1 to $2 in the columns of
// migrations/001_idem_keys.sql, computing in SQL what key.Scope.StoreKey
// and key.FingerprintOf compute in Go: SHA-256 over netstrings (every part
// here is ASCII, so its length in characters is its length in bytes), the
// fingerprint after its version byte 1. $3 principal, $4 operation, $5
// method, $6 path, $7 the time record i expires i ms after.
const pgFillSQL = `
INSERT INTO idem_keys (epoch, expires_at, lease_until, state, unknown, key, fingerprint, owner, response)
SELECT 1, $7::timestamptz + i * interval '1 millisecond', NULL, 2, false,
       sha256(convert_to('idem.scope.v1'
                         || length($3::text) || ':' || $3::text || ','
                         || length($4::text) || ':' || $4::text || ','
                         || length(name) || ':' || name || ',', 'UTF8')),
       '\x01'::bytea || sha256(convert_to(length($5::text) || ':' || $5::text || ','
                                          || length($6::text) || ':' || $6::text || ','
                                          || length(body) || ':' || body || ',', 'UTF8')),
       substring(sha256(convert_to('owner-' || i, 'UTF8')) FROM 1 FOR 16),
       convert_to('{"id":"ch_' || i || '","amount":100,"status":"succeeded"}', 'UTF8')
FROM generate_series($1::bigint, $2::bigint) AS i,
     LATERAL (SELECT 'order-' || i AS name, '{"amount":100,"order":"o-' || i || '"}' AS body) AS r`

func openPostgres(t *testing.T) *subject {
	ctx := context.Background()
	pool := testdb.Postgres(t) // a schema of the test's own, dropped at the end
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &subject{st: st, zero: zero(), footprintName: "disk (table + indexes)",
		setting: fmt.Sprintf("server clock, %d pooled connections", pool.Config().MaxConns)}

	s.fill = func(t *testing.T, from, to int, zero time.Time) {
		inBatches(t, from, to, pgChunk, func(lo, hi int) error {
			_, err := pool.Exec(ctx, pgFillSQL, lo, hi-1, principal, operation, method, path, zero)
			return err
		})
		// What autovacuum would do to a table that grew this much, done
		// now rather than in the middle of a measurement.
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) idem_keys"); err != nil {
			t.Fatal(err)
		}
	}
	s.count = func(t *testing.T) int { return scanInt(t, pool.QueryRow(ctx, countSQL)) }
	s.footprint = func(t *testing.T) int64 {
		return int64(scanInt(t, pool.QueryRow(ctx, "SELECT pg_total_relation_size('idem_keys')")))
	}
	s.explain = func(t *testing.T) {
		// The store's own statements, as its pool runs them: prepared,
		// with the server's clock (a NULL now), in a transaction rolled
		// back (EXPLAIN ANALYZE runs the sweep's DELETE).
		simple := pgx.QueryExecModeSimpleProtocol
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			sweep := storeSQL(t, "pgstore", "sweep.sql")
			for i, c := range []struct {
				what, sql, args string
			}{
				{"pgstore/sql/claim.sql (a replay: its plain read answers)", storeSQL(t, "pgstore", "claim.sql"),
					"(decode('" + hexOf(prefilledKey(1)) + "', 'hex'), decode('" + hexOf(string(fingerprint(1))) + "', 'hex'), '\\x00', 30000000, 86400000000, NULL)"},
				{"pgstore/sql/sweep.sql", sweep, "(" + strconv.Itoa(sweepBatch) + ", NULL)"},
			} {
				name := "growth_" + strconv.Itoa(i)
				if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+c.sql, simple); err != nil {
					return fmt.Errorf("prepare %s: %w", c.what, err)
				}
				rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) EXECUTE "+name+c.args, simple)
				if err != nil {
					return fmt.Errorf("explain %s: %w", c.what, err)
				}
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return fmt.Errorf("explain %s: %w", c.what, err)
				}
				t.Logf("PostgreSQL plan of %s:\n%s", c.what, strings.Join(lines, "\n"))
				if _, err := tx.Exec(ctx, "DEALLOCATE "+name, simple); err != nil {
					return err
				}
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
	}
	return s
}

// errRollback ends a transaction that must not commit.
var errRollback = errors.New("roll back")

func hexOf(s string) string { return fmt.Sprintf("%x", s) }

// storeSQL reads one of a store's statements from its source, so that
// the plans shown are those of the statements the store runs.
func storeSQL(t *testing.T, store, name string) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "store", store, "sql", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// redisPipeline is how many records one pipelined round trip writes.
const redisPipeline = 10_000

func openRedis(t *testing.T) *subject {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Network: "unix", Addr: startRedis(t)})
	t.Cleanup(func() { client.Close() })
	st, err := redisstore.New(ctx, client, &redisstore.Config{AllowNonDurable: true})
	if err != nil {
		t.Fatal(err)
	}
	usedMemory := func(t *testing.T) int64 {
		info, err := client.InfoMap(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
		if err != nil {
			t.Fatalf("INFO memory used_memory: %v", err)
		}
		return n
	}
	empty := usedMemory(t)
	s := &subject{st: st, zero: zero(), footprintName: "memory (used_memory growth)",
		setting: fmt.Sprintf("a private redis-server without persistence, %d pooled connections", client.Options().PoolSize)}

	// The hash of lua/common.lua's save, field for field, and its expiry
	// (PEXPIREAT, as the scripts set it on the server's clock).
	s.fill = func(t *testing.T, from, to int, zero time.Time) {
		inBatches(t, from, to, redisPipeline, func(lo, hi int) error {
			pipe := client.Pipeline()
			for i := lo; i < hi; i++ {
				k, exp := redisstore.DefaultPrefix+prefilledKey(i), expiresAt(zero, i)
				pipe.HSet(ctx, k,
					"fingerprint", fingerprint(i),
					"state", "2",
					"epoch", "1",
					"owner", owner(i),
					"unknown", "0",
					"lease_until", "0",
					"expires_at", strconv.FormatInt(exp.UnixMicro(), 10),
					"response", response(i))
				pipe.PExpireAt(ctx, k, exp)
			}
			_, err := pipe.Exec(ctx)
			return err
		})
	}
	s.count = func(t *testing.T) int {
		n, err := client.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	s.footprint = func(t *testing.T) int64 { return usedMemory(t) - empty }
	return s
}

// startRedis starts a redis-server of the test's own on a Unix socket in a
// temporary directory, without persistence, stops it when t ends, and
// returns the socket's path. It fails the test when the server is not on
// the PATH or does not start.
func startRedis(t *testing.T) string {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("the Redis measurement runs a redis-server of its own, which must be on the PATH: %v", err)
	}
	dir := t.TempDir()
	socket := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", socket, "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	// Its log says when it accepts connections; read it to the end so
	// that the server never blocks on a full pipe.
	ready, exited := make(chan struct{}), make(chan struct{})
	var log strings.Builder
	go func() {
		defer close(exited)
		signal := ready
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if signal != nil && strings.Contains(strings.ToLower(sc.Text()), "ready to accept connections") {
				close(signal)
				signal = nil
			}
			if log.Len() < 1<<14 {
				log.WriteString(sc.Text() + "\n")
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = cmd.Wait()
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("redis-server exited at start:\n%s", log.String())
	case <-time.After(30 * time.Second):
		t.Fatal("redis-server did not start within 30 s")
	}
	return socket
}
