package main

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/redisstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// Every claim in this row holds for the key's default lease and lives for
// its default retention, as package key's defaults say.
const (
	lease     = 30 * time.Second
	retention = 24 * time.Hour
)

// response is what every claim stores: a small JSON answer.
var response = []byte(`{"id":"ch_1","amount":100,"currency":"EUR"}`)

// claimer is one way to record an operation under a new key: claim it,
// then store its response.
type claimer interface {
	// claimComplete claims k (a new key) and stores the response.
	claimComplete(ctx context.Context, k string) error
	// abandon claims k and never completes it, as a process that crashed.
	// retry claims it again after lease has passed; late completes it as
	// the first holder, after the retry. taken reports whether the retry
	// was granted; lateErr is what the late completion returned.
	abandon(ctx context.Context, k string, lease time.Duration) (taken bool, lateErr error, err error)
}

// storeSetup is idem's store or a hand-written table on one database.
type storeSetup struct {
	name string
	idem bool
	open func(ctx context.Context, e *env) (claimer, error)
}

// storeRow is one database: idem's store beside the table a team writes
// by hand, Stripe-style.
type storeRow struct {
	name   string
	setups []storeSetup
}

var storeRows = []storeRow{
	{"Claim+Complete, PostgreSQL", []storeSetup{
		{"idem pgstore", true, openPgstore},
		{"hand-written: INSERT ON CONFLICT DO NOTHING, then UPDATE, one connection", false, openPgHand},
	}},
	{"Claim+Complete, SQLite (WAL, synchronous=FULL)", []storeSetup{
		{"idem sqlitestore", true, openSQLitestore},
		{"hand-written: INSERT ON CONFLICT DO NOTHING, then UPDATE, one connection", false, openSQLiteHand},
	}},
	{"Claim+Complete, Redis", []storeSetup{
		{"idem redisstore", true, openRedisstore},
		{"hand-written: SET NX, then SET", false, openRedisHand},
	}},
}

// idemStore claims and completes through store.Store.
type idemStore struct{ s store.Store }

func (x idemStore) claim(ctx context.Context, k, owner string, lease time.Duration) (store.ClaimResult, error) {
	fp := sha256.Sum256([]byte(k))
	return x.s.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: fp[:], Owner: owner, Lease: lease, Retention: retention})
}

func (x idemStore) complete(ctx context.Context, f store.Fence) error {
	return x.s.Complete(ctx, store.CompleteParams{Fence: f, Response: response, Retention: retention})
}

func (x idemStore) claimComplete(ctx context.Context, k string) error {
	r, err := x.claim(ctx, k, k, lease)
	if err != nil {
		return err
	}
	if !r.Claimed {
		return fmt.Errorf("%w: new key %s not claimed", errUnexpected, k)
	}
	return x.complete(ctx, store.Fence{Key: k, Epoch: r.Record.Epoch, Owner: k})
}

func (x idemStore) abandon(ctx context.Context, k string, lease time.Duration) (bool, error, error) {
	first, err := x.claim(ctx, k, "first", lease)
	if err != nil || !first.Claimed {
		return false, nil, fmt.Errorf("first claim: %v %w", first.Claimed, err)
	}
	time.Sleep(lease + lease/2) // the lease runs out on the store's clock
	retry, err := x.claim(ctx, k, "retry", lease)
	if err != nil {
		return false, nil, err
	}
	late := x.complete(ctx, store.Fence{Key: k, Epoch: first.Record.Epoch, Owner: "first"})
	if late != nil && !errors.Is(late, store.ErrFenced) {
		return false, nil, late
	}
	return retry.Claimed, late, nil
}

func openPgstore(ctx context.Context, e *env) (claimer, error) {
	pool, err := e.schema(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	s, err := pgstore.New(pool, nil)
	return idemStore{s}, err
}

func openSQLitestore(ctx context.Context, e *env) (claimer, error) {
	db, err := e.sqlite("idem.db")
	if err != nil {
		return nil, err
	}
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		return nil, err
	}
	s, err := sqlitestore.New(db, nil)
	if err != nil {
		return nil, err
	}
	e.cleanups = append(e.cleanups, func() { _ = s.Close() })
	return idemStore{s}, nil
}

func openRedisstore(ctx context.Context, e *env) (claimer, error) {
	durable, err := e.redisDurable(ctx)
	if err != nil {
		return nil, err
	}
	s, err := redisstore.New(ctx, e.redis, &redisstore.Config{Prefix: e.prefix(), AllowNonDurable: !durable})
	return idemStore{s}, err
}

// sqlite opens a new SQLite file in the run's directory with idem's
// settings (sqlitestore.Open: WAL, synchronous=FULL, immediate
// transactions), closed by close.
func (e *env) sqlite(name string) (*sql.DB, error) {
	db, err := sqlitestore.Open(filepath.Join(e.dir, name), nil)
	if err != nil {
		return nil, err
	}
	e.cleanups = append(e.cleanups, func() { _ = db.Close() })
	return db, nil
}

// handTable is the table a team writes by hand: the key, the request's
// fingerprint, a status and the response. No lease, no fence.
const handTable = `CREATE TABLE hand_keys (key text PRIMARY KEY, fingerprint bytea NOT NULL, status smallint NOT NULL,
	response bytea, created_at timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP)`

// sqlHand is the hand-written table on database/sql (SQLite) or pgx
// (PostgreSQL): exec runs its two statements on one connection.
type sqlHand struct {
	exec func(ctx context.Context, stmts ...stmt) ([]int64, error)
}

// stmt is one statement and its arguments.
type stmt struct {
	sql  string
	args []any
}

func (h sqlHand) insert(k string) stmt {
	fp := sha256.Sum256([]byte(k))
	return stmt{`INSERT INTO hand_keys (key, fingerprint, status) VALUES ($1, $2, 1) ON CONFLICT (key) DO NOTHING`, []any{k, fp[:]}}
}

func (h sqlHand) claimComplete(ctx context.Context, k string) error {
	n, err := h.exec(ctx, h.insert(k),
		stmt{`UPDATE hand_keys SET status = 2, response = $2 WHERE key = $1`, []any{k, response}})
	if err != nil {
		return err
	}
	if n[0] != 1 {
		return fmt.Errorf("%w: new key %s not inserted", errUnexpected, k)
	}
	return nil
}

func (h sqlHand) abandon(ctx context.Context, k string, lease time.Duration) (bool, error, error) {
	if _, err := h.exec(ctx, h.insert(k)); err != nil {
		return false, nil, err
	}
	time.Sleep(lease + lease/2) // as long as idem's store is given
	n, err := h.exec(ctx, h.insert(k))
	if err != nil {
		return false, nil, err
	}
	// The first holder's late completion succeeds: nothing fences it.
	_, late := h.exec(ctx, stmt{`UPDATE hand_keys SET status = 2, response = $2 WHERE key = $1`, []any{k, response}})
	return n[0] == 1, late, nil
}

// inOrder runs stmts one after the other with exec, each in its own
// transaction, and returns the rows each affected.
func inOrder(ctx context.Context, stmts []stmt, exec func(context.Context, stmt) (int64, error)) ([]int64, error) {
	out := make([]int64, len(stmts))
	for i, s := range stmts {
		n, err := exec(ctx, s)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

func openPgHand(ctx context.Context, e *env) (claimer, error) {
	pool, err := e.schema(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, handTable); err != nil {
		return nil, err
	}
	return sqlHand{exec: func(ctx context.Context, stmts ...stmt) ([]int64, error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Release()
		return inOrder(ctx, stmts, func(ctx context.Context, s stmt) (int64, error) {
			tag, err := conn.Exec(ctx, s.sql, s.args...)
			return tag.RowsAffected(), err
		})
	}}, nil
}

func openSQLiteHand(ctx context.Context, e *env) (claimer, error) {
	db, err := e.sqlite("hand.db")
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, handTable); err != nil {
		return nil, err
	}
	return sqlHand{exec: func(ctx context.Context, stmts ...stmt) ([]int64, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return inOrder(ctx, stmts, func(ctx context.Context, s stmt) (int64, error) {
			res, err := conn.ExecContext(ctx, s.sql, s.args...)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		})
	}}, nil
}

// redisHand is SET NX of a "processing" marker, then SET of the response,
// both with the retention as their expiry.
type redisHand struct {
	e      *env
	prefix string
}

func openRedisHand(_ context.Context, e *env) (claimer, error) {
	return redisHand{e: e, prefix: e.prefix()}, nil
}

func (h redisHand) claimComplete(ctx context.Context, k string) error {
	ok, err := h.e.redis.SetNX(ctx, h.prefix+k, "processing", retention).Result()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: new key %s not set", errUnexpected, k)
	}
	return h.e.redis.Set(ctx, h.prefix+k, response, retention).Err()
}

func (h redisHand) abandon(ctx context.Context, k string, lease time.Duration) (bool, error, error) {
	if err := h.e.redis.SetNX(ctx, h.prefix+k, "processing", retention).Err(); err != nil {
		return false, nil, err
	}
	time.Sleep(lease + lease/2)
	ok, err := h.e.redis.SetNX(ctx, h.prefix+k, "processing", retention).Result()
	if err != nil {
		return false, nil, err
	}
	return ok, h.e.redis.Set(ctx, h.prefix+k, response, retention).Err(), nil
}

// storeCheck is what the abandoned-claim check observed.
type storeCheck struct {
	taken   bool  // the retry after the lease was granted
	lateErr error // what the first holder's late completion got
}

// ok is true when the abandoned key was taken over and the first holder's
// late completion fenced.
func (c storeCheck) ok() bool { return c.taken && errors.Is(c.lateErr, store.ErrFenced) }

func (c storeCheck) String() string {
	retry := "refused: the key stays stuck (until the row is deleted by hand, or the TTL)"
	if c.taken {
		retry = "taken over"
	}
	late := "accepted"
	switch {
	case errors.Is(c.lateErr, store.ErrFenced):
		late = "fenced"
	case c.lateErr != nil:
		late = c.lateErr.Error()
	}
	return fmt.Sprintf("claim abandoned (a crash), retried after %s: %s; the first holder's late completion: %s", 3*checkLease/2, retry, late)
}

// checkLease is the abandoned claim's lease (the hand-written tables
// have none: their retry comes as late).
const checkLease = 200 * time.Millisecond

// runStores measures each store's Claim+Complete of new keys beside the
// hand-written table on the same database, and runs the abandoned-claim
// check on each.
func runStores(ctx context.Context, e *env, opts options) ([]line, error) {
	var out []line
	for _, row := range storeRows {
		for _, s := range row.setups {
			lines, err := runStore(ctx, e, opts, row.name, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			out = append(out, lines...)
		}
	}
	return out, nil
}

// runStore measures one setup of a row, and closes what it opened.
func runStore(ctx context.Context, e *env, opts options, row string, s storeSetup) ([]line, error) {
	defer e.release(e.mark())
	c, err := s.open(ctx, e)
	if err != nil {
		return nil, err
	}
	ks := newKeys()
	var check storeCheck
	if check.taken, check.lateErr, err = c.abandon(ctx, ks.next(), checkLease); err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	var out []line
	for _, n := range opts.clients {
		opts.logger.Info("measuring", "row", row, "peer", s.name, "clients", n)
		r, err := measure(ctx, n, opts.warmup, opts.duration, func(ctx context.Context, _ int) error {
			return c.claimComplete(ctx, ks.next())
		})
		if err != nil {
			return nil, fmt.Errorf("%d clients: %w", n, err)
		}
		out = append(out, line{row: row, peer: s.name, idem: s.idem, clients: n, result: r, unit: "ops/s", guarantees: check.String(), kept: check.ok()})
	}
	return out, nil
}
