package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// migrationCount is how many migrations the store has: 001_idem_keys,
// 002_idem_inbox, 003_idem_outbox, 004_idem_executions, 005_idem_steps, 006_idem_apps and 007_idem_deadlines.
const migrationCount = 11

func TestNewRefusesUnmigratedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Postgres(t)

	_, err := pgstore.New(pool, nil)
	if !errors.Is(err, pgstore.ErrNotMigrated) {
		t.Fatalf("New on an empty schema: got %v, want ErrNotMigrated", err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("New created %d tables; it must never change the database", tables)
	}

	res, err := pgstore.Migrate(ctx, pool)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if len(res) != migrationCount {
		t.Fatalf("Migrate applied %+v, want versions 1 to %d", res, migrationCount)
	}
	for i, r := range res {
		if r.Version != int64(i+1) {
			t.Fatalf("Migrate applied %+v, want versions 1 to %d in order", res, migrationCount)
		}
	}
	res, err = pgstore.Migrate(ctx, pool)
	if err != nil || len(res) != 0 {
		t.Fatalf("second Migrate: %+v, %v; want nothing applied", res, err)
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatalf("New after Migrate: %v", err)
	}
	if got, want := s.Capabilities(), (store.Capabilities{Durable: true, Transactions: true, Shared: true}); got != want {
		t.Fatalf("Capabilities = %+v, want %+v (the test server runs with fsync and synchronous_commit on)", got, want)
	}
}

func TestNewRefusesPendingMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migratedPool(t)
	// The newest migration pending, as on a schema migrated by an older
	// release. (goose reports a missing migration below the newest applied
	// one as out of order instead.)
	if _, err := pool.Exec(ctx, `DELETE FROM idem_migrations WHERE version_id = $1`, migrationCount); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.New(pool, nil); !errors.Is(err, pgstore.ErrNotMigrated) {
		t.Fatalf("New with migration %d pending: got %v, want ErrNotMigrated", migrationCount, err)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	pool := testdb.Postgres(t)
	const n = 4
	applied := make(chan int, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			res, err := pgstore.Migrate(context.Background(), pool)
			applied <- len(res)
			errs <- err
		}()
	}
	total := 0
	for range n {
		total += <-applied
		if err := <-errs; err != nil {
			t.Errorf("Migrate: %v", err)
		}
	}
	if total != migrationCount {
		t.Fatalf("%d concurrent Migrate calls applied %d migrations in all, want %d", n, total, migrationCount)
	}
}

func TestClaimLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)

	p := params("order-1", "fp-a")
	first := mustClaim(t, s, p)
	if !first.Claimed || first.Record.Epoch != 1 || first.Record.State != store.StateProcessing {
		t.Fatalf("first claim: %+v", first)
	}
	if !first.Now.Equal(start) {
		t.Fatalf("Now = %v, want the store clock %v", first.Now, start)
	}
	if want := start.Add(p.Lease); !first.Record.LeaseUntil.Equal(want) {
		t.Fatalf("LeaseUntil = %v, want %v", first.Record.LeaseUntil, want)
	}
	if want := start.Add(p.Retention); !first.Record.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", first.Record.ExpiresAt, want)
	}
	if first.Record.Owner != p.Owner || !bytes.Equal(first.Record.Fingerprint, p.Fingerprint) {
		t.Fatalf("owner or fingerprint not kept: %+v", first.Record)
	}

	// In flight: same fingerprint, live lease.
	dup := mustClaim(t, s, params("order-1", "fp-a"))
	if dup.Claimed || dup.Record.Owner != p.Owner || dup.Record.Epoch != 1 {
		t.Fatalf("duplicate in flight: %+v", dup)
	}
	// Conflict: other fingerprint.
	if other := mustClaim(t, s, params("order-1", "fp-b")); other.Claimed || other.Record.Owner != p.Owner {
		t.Fatalf("other fingerprint: %+v", other)
	}

	// The lease ends: the same fingerprint takes over with epoch 2, the old
	// holder is fenced.
	if err := s.MarkUnknown(ctx, fenceOf(first)); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(p.Lease)
	p2 := params("order-1", "fp-a")
	second := mustClaim(t, s, p2)
	if !second.Claimed || second.Record.Epoch != 2 || second.Record.Unknown || second.Record.Owner != p2.Owner {
		t.Fatalf("takeover: %+v", second)
	}
	for name, err := range map[string]error{
		"Complete":    s.Complete(ctx, store.CompleteParams{Fence: fenceOf(first), Retention: time.Hour}),
		"Release":     s.Release(ctx, fenceOf(first)),
		"MarkUnknown": s.MarkUnknown(ctx, fenceOf(first)),
	} {
		if !errors.Is(err, store.ErrFenced) {
			t.Errorf("old holder's %s: got %v, want ErrFenced", name, err)
		}
	}
	if _, err := s.Extend(ctx, fenceOf(first), time.Minute); !errors.Is(err, store.ErrFenced) {
		t.Errorf("old holder's Extend: got %v, want ErrFenced", err)
	}
	wrongOwner := fenceOf(second)
	wrongOwner.Owner = token()
	if err := s.Release(ctx, wrongOwner); !errors.Is(err, store.ErrFenced) {
		t.Errorf("Release with the right epoch and another owner: got %v, want ErrFenced", err)
	}

	// Complete, then every claim replays.
	b.clock.Advance(time.Second)
	resp := []byte(`{"id":"ch_1"}`)
	if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(second), Response: resp, Retention: time.Hour}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	replay := mustClaim(t, s, params("order-1", "fp-a"))
	if replay.Claimed || replay.Record.State != store.StateDone || !bytes.Equal(replay.Record.Response, resp) ||
		!replay.Record.LeaseUntil.IsZero() || replay.Record.Epoch != 2 {
		t.Fatalf("replay: %+v", replay)
	}
	if want := b.clock.Now().Add(time.Hour); !replay.Record.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt after Complete = %v, want %v", replay.Record.ExpiresAt, want)
	}
	if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(second), Retention: time.Hour}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("second Complete: got %v, want ErrFenced", err)
	}

	// Past retention the key is new again and the epoch goes on.
	b.clock.Advance(time.Hour)
	if _, err := s.Get(ctx, "order-1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after expiry: got %v, want ErrNotFound", err)
	}
	third := mustClaim(t, s, params("order-1", "fp-c"))
	if !third.Claimed || third.Record.Epoch != 3 || third.Record.Response != nil || third.Record.Unknown {
		t.Fatalf("claim after expiry: %+v", third)
	}
}

func TestReleaseLetsAnyFingerprintClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	first := mustClaim(t, s, params("k", "fp-a"))
	if err := s.MarkUnknown(ctx, fenceOf(first)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, fenceOf(first)); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil || rec.State != store.StateReleased || !rec.LeaseUntil.IsZero() || rec.Unknown {
		t.Fatalf("after Release: %+v, %v", rec, err)
	}
	next := mustClaim(t, s, params("k", "fp-b"))
	if !next.Claimed || next.Record.Epoch != 2 || string(next.Record.Fingerprint) != "fp-b" {
		t.Fatalf("claim after release: %+v", next)
	}
}

func TestExtendRaisesExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	p := params("k", "fp")
	p.Lease, p.Retention = time.Minute, 2*time.Minute
	res := mustClaim(t, s, p)

	b.clock.Advance(30 * time.Second)
	until, err := s.Extend(ctx, fenceOf(res), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := b.clock.Now().Add(10 * time.Minute)
	if !until.Equal(want) {
		t.Fatalf("Extend returned %v, want %v", until, want)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil || !rec.LeaseUntil.Equal(want) || !rec.ExpiresAt.Equal(want) {
		t.Fatalf("after Extend: %+v, %v; want lease and expiry %v", rec, err, want)
	}
	// A shorter extension never lowers ExpiresAt.
	if _, err := s.Extend(ctx, fenceOf(res), time.Second); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Get(ctx, "k"); !rec.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt lowered to %v", rec.ExpiresAt)
	}
}

func TestOpaqueBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	// bytea, not text: NUL, backslashes and invalid UTF-8 survive, and keys
	// that differ in one byte are different keys.
	keys := []string{"a\x00b", `\x41`, "\xff\xfe", "a\x00c", "é", "e\u0301"}
	for _, k := range keys {
		p := params(k, "\x00fp\xff")
		p.Owner = "\x00\xff\\x"
		res := mustClaim(t, s, p)
		if !res.Claimed || res.Record.Key != k {
			t.Fatalf("claim %q: %+v", k, res)
		}
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res), Response: []byte("\x00\xff"), Retention: time.Hour}); err != nil {
			t.Fatalf("complete %q: %v", k, err)
		}
	}
	for _, k := range keys {
		rec, err := s.Get(ctx, k)
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		if rec.Owner != "\x00\xff\\x" || string(rec.Fingerprint) != "\x00fp\xff" || string(rec.Response) != "\x00\xff" {
			t.Fatalf("Get(%q) = %+v", k, rec)
		}
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a prefix: got %v, want ErrNotFound", err)
	}
}

func TestEmptyAndNilPayloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := setup(t)
	p := params("k", "")
	p.Fingerprint = nil
	res := mustClaim(t, s, p)
	if !res.Claimed {
		t.Fatalf("claim with a nil fingerprint: %+v", res)
	}
	if again := mustClaim(t, s, params("k", "")); again.Claimed || again.Record.Owner != p.Owner {
		t.Fatalf("nil and empty fingerprints must compare equal: %+v", again)
	}
	if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res), Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(ctx, "k")
	if err != nil || rec.State != store.StateDone || len(rec.Response) != 0 {
		t.Fatalf("Get: %+v, %v", rec, err)
	}
}

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)

	// expired done, expired released, live done, processing with a lease
	// longer than its retention (never swept while the lease lives).
	done := mustClaim(t, s, params("done", "fp"))
	if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(done), Retention: time.Minute}); err != nil {
		t.Fatal(err)
	}
	relp := params("released", "fp")
	relp.Retention = time.Hour
	rel := mustClaim(t, s, relp)
	if err := s.Release(ctx, fenceOf(rel)); err != nil {
		t.Fatal(err)
	}
	live := mustClaim(t, s, params("live", "fp"))
	if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(live), Retention: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	held := params("held", "fp")
	held.Lease, held.Retention = 10*time.Hour, time.Hour // retention shorter than lease
	mustClaim(t, s, held)

	if n, err := s.Sweep(ctx, 100); err != nil || n != 0 {
		t.Fatalf("Sweep before expiry: %d, %v", n, err)
	}
	// start+9h: done, released and held are past ExpiresAt, held's lease
	// lives on.
	b.clock.Advance(9 * time.Hour)
	if n, err := s.Sweep(ctx, 1); err != nil || n != 1 {
		t.Fatalf("Sweep(1): %d, %v", n, err)
	}
	if n, err := s.Sweep(ctx, 100); err != nil || n != 1 {
		t.Fatalf("Sweep(100): %d, %v; want the second expired record only", n, err)
	}
	if n, err := s.Sweep(ctx, 0); err != nil || n != 0 {
		t.Fatalf("Sweep(0): %d, %v", n, err)
	}
	var left []string
	rows, err := b.pool.Query(ctx, `SELECT convert_from(key, 'UTF8') FROM idem_keys ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != "held" || left[1] != "live" {
		t.Fatalf("left after sweep: %q, want held and live", left)
	}
	b.clock.Advance(time.Hour) // held's lease ends
	if n, err := s.Sweep(ctx, 100); err != nil || n != 1 {
		t.Fatalf("Sweep after the lease: %d, %v", n, err)
	}
}

func TestServerClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, migratedPool(t), nil)
	before := time.Now()
	res := mustClaim(t, s, params("k", "fp"))
	after := time.Now()
	// Allow for a server clock a little off ours.
	if res.Now.Before(before.Add(-time.Minute)) || res.Now.After(after.Add(time.Minute)) {
		t.Fatalf("server clock read %v, local clock %v..%v", res.Now, before, after)
	}
	if d := res.Record.LeaseUntil.Sub(res.Now); d != 30*time.Second {
		t.Fatalf("LeaseUntil - Now = %v, want the lease, 30s", d)
	}
	until, err := s.Extend(ctx, fenceOf(res), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := until.Sub(res.Now); d < time.Hour || d > time.Hour+time.Minute {
		t.Fatalf("Extend to %v, %v after the claim", until, d)
	}
	if _, err := s.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
}

// A replay (or an in-flight duplicate) is answered by a read: no row lock,
// no new row version, no WAL.
func TestClaimReplayOnlyReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	res := mustClaim(t, s, params("k", "fp"))
	if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res), Response: []byte("ok"), Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	version := func() (ctid, xmax string) {
		t.Helper()
		if err := b.pool.QueryRow(ctx, `SELECT ctid::text, xmax::text FROM idem_keys WHERE key = 'k'`).Scan(&ctid, &xmax); err != nil {
			t.Fatal(err)
		}
		return ctid, xmax
	}
	ctid, xmax := version()
	for _, fp := range []string{"fp", "other"} {
		if r := mustClaim(t, s, params("k", fp)); r.Claimed {
			t.Fatalf("claim of a done key: %+v", r)
		}
	}
	if c, x := version(); c != ctid || x != xmax {
		t.Fatalf("replay changed the row: ctid %s -> %s, xmax %s -> %s", ctid, c, xmax, x)
	}
}

func TestInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	if _, err := b.pool.Exec(ctx, `CREATE TABLE business (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		t.Helper()
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM business`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	completeIn := func(res store.ClaimResult, fail error) error {
		return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO business VALUES ($1)`, res.Record.Key); err != nil {
				return err
			}
			if err := s.CompleteTx(ctx, tx, store.CompleteParams{Fence: fenceOf(res), Response: []byte("ok"), Retention: time.Hour}); err != nil {
				return err
			}
			return fail
		})
	}

	t.Run("Commit", func(t *testing.T) {
		res := mustClaim(t, s, params("commit", "fp"))
		if err := completeIn(res, nil); err != nil {
			t.Fatal(err)
		}
		if rec, err := s.Get(ctx, "commit"); err != nil || rec.State != store.StateDone {
			t.Fatalf("after commit: %+v, %v", rec, err)
		}
	})
	t.Run("RollbackOnError", func(t *testing.T) {
		boom := errors.New("boom")
		res := mustClaim(t, s, params("error", "fp"))
		if err := completeIn(res, boom); err != boom {
			t.Fatalf("InTx returned %v, want fn's error as is", err)
		}
		if rec, err := s.Get(ctx, "error"); err != nil || rec.State != store.StateProcessing {
			t.Fatalf("completion not rolled back: %+v, %v", rec, err)
		}
	})
	t.Run("RollbackOnPanic", func(t *testing.T) {
		res := mustClaim(t, s, params("panic", "fp"))
		func() {
			defer func() {
				if recover() != "boom" {
					t.Fatal("InTx did not pass fn's panic on")
				}
			}()
			_ = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				if err := s.CompleteTx(ctx, tx, store.CompleteParams{Fence: fenceOf(res), Retention: time.Hour}); err != nil {
					return err
				}
				panic("boom")
			})
		}()
		if rec, err := s.Get(ctx, "panic"); err != nil || rec.State != store.StateProcessing {
			t.Fatalf("completion not rolled back: %+v, %v", rec, err)
		}
	})
	t.Run("Fenced", func(t *testing.T) {
		res := mustClaim(t, s, params("fenced", "fp"))
		stale := res
		stale.Record.Epoch++
		if err := completeIn(stale, nil); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("CompleteTx with a stale fence: got %v, want ErrFenced", err)
		}
	})
	t.Run("FencedThenAStatement", func(t *testing.T) {
		// A stale completion queued before another statement fails that
		// statement, as ErrFenced, and nothing commits.
		res := mustClaim(t, s, params("fenced-next", "fp"))
		stale := res
		stale.Record.Epoch++
		var stmtErr error
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO business VALUES ($1)`, "fenced-next"); err != nil {
				return err
			}
			if err := s.CompleteTx(ctx, tx, store.CompleteParams{Fence: fenceOf(stale), Response: []byte("ok"), Retention: time.Hour}); err != nil {
				return err
			}
			_, stmtErr = tx.Exec(ctx, `SELECT $1::int`, 1)
			return stmtErr
		})
		if !errors.Is(stmtErr, store.ErrFenced) || !errors.Is(err, store.ErrFenced) {
			t.Fatalf("the statement after a stale completion: %v (InTx: %v), want ErrFenced", stmtErr, err)
		}
	})
	t.Run("FencedInPgxOwnTransaction", func(t *testing.T) {
		// Outside the store's transactions nothing is queued: the stale
		// completion fails at once, and the held one commits.
		res := mustClaim(t, s, params("fenced-pgx", "fp"))
		stale := res
		stale.Record.Epoch++
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return s.CompleteTx(ctx, tx, store.CompleteParams{Fence: fenceOf(stale), Response: []byte("ok"), Retention: time.Hour})
		})
		if !errors.Is(err, store.ErrFenced) {
			t.Fatalf("CompleteTx with a stale fence in pgx's transaction: got %v, want ErrFenced", err)
		}
		if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return s.CompleteTx(ctx, tx, store.CompleteParams{Fence: fenceOf(res), Response: []byte("ok"), Retention: time.Hour})
		}); err != nil {
			t.Fatal(err)
		}
		if rec, err := s.Get(ctx, "fenced-pgx"); err != nil || rec.State != store.StateDone {
			t.Fatalf("after commit: %+v, %v", rec, err)
		}
	})
	t.Run("FailedStatement", func(t *testing.T) {
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, _ = tx.Exec(ctx, `INSERT INTO business VALUES ('commit')`) // duplicate: the tx fails
			return nil
		})
		if !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("commit after a failed statement: got %v, want ErrTxCommitRollback", err)
		}
	})
	if n := count(); n != 1 {
		t.Fatalf("%d business rows committed, want 1", n)
	}
}
