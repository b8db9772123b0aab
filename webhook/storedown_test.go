package webhook_test

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/webhook"
)

// The store down means fail closed: 503 with Retry-After, nothing
// acknowledged, and the redelivery, once the store is back, runs once.

func signedFixture[TX any](t *testing.T, p *inbox.Processor[TX]) *fixture {
	t.Helper()
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, &signature.Config{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(p, &webhook.Config{Verifier: v, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := signature.NewSigner(signature.SchemeIdem, []string{secret}, nil)
	return &fixture{h: h, signer: signer}
}

func wantUnavailable(t *testing.T, f *fixture, ev event.Event) {
	t.Helper()
	w := f.send(t, ev, event.ModeBinary, t0, nil)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || problemType(t, w) != webhook.SlugStoreUnavailable {
		t.Fatalf("store down: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

func TestStoreDownSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	open := func() (*sql.DB, *inbox.Processor[*sql.Tx]) {
		db, err := sqlitestore.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sqlitestore.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS paid (id TEXT, seq INTEGER)`); err != nil {
			t.Fatal(err)
		}
		s, err := sqlitestore.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := inbox.New(s, func(ctx context.Context, tx *sql.Tx, ev event.Event) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO paid VALUES (?, ?)`, ev.Subject, ev.Sequence)
			return err
		}, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return db, p
	}
	db, p := open()
	f := signedFixture(t, p)
	db.Close() // the database goes away under the running handler
	wantUnavailable(t, f, orderEvent("o-1", 1, 10))

	db, p = open()
	defer db.Close()
	f = signedFixture(t, p)
	if r := decode(t, f.send(t, orderEvent("o-1", 1, 10), event.ModeBinary, t0, nil)); r.Outcome != "processed" {
		t.Fatalf("redelivery after the store came back: %+v", r)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM paid`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("paid rows %d, %v", n, err)
	}
}

func TestStoreDownPostgres(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE paid (id text, seq bigint)`); err != nil {
		t.Fatal(err)
	}
	apply := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO paid VALUES ($1, $2)`, ev.Subject, ev.Sequence)
		return err
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := inbox.New(s, apply, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	f := signedFixture(t, p)
	if r := decode(t, f.send(t, orderEvent("o-1", 1, 10), event.ModeBinary, t0, nil)); r.Outcome != "processed" {
		t.Fatalf("first event: %+v", r)
	}
	// The server ends every connection of this schema's pool (what a
	// restart does to clients), and the pool is then closed: no answer.
	cfg := pool.Config().ConnConfig
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND usename = $1 AND application_name = $2`, cfg.User, cfg.RuntimeParams["application_name"]); err != nil {
		t.Fatal(err)
	}
	down, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	pdown, _ := inbox.New(down, apply, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
	fdown := signedFixture(t, pdown)
	pool.Reset()
	closed := testdb.Postgres(t)
	cs, err := pgstore.New(mustMigrated(t, closed), nil)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	pc, _ := inbox.New(cs, apply, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
	wantUnavailable(t, signedFixture(t, pc), orderEvent("o-2", 1, 10))

	// After the restart the surviving pool reconnects; the redelivery of an
	// acknowledged event is a duplicate, a new one runs once.
	if r := decode(t, fdown.send(t, orderEvent("o-1", 1, 10), event.ModeBinary, t0, nil)); r.Outcome != "duplicate" {
		t.Fatalf("redelivery after the restart: %+v", r)
	}
	if r := decode(t, fdown.send(t, orderEvent("o-1", 2, 10), event.ModeBinary, t0, nil)); r.Outcome != "processed" {
		t.Fatalf("next event after the restart: %+v", r)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM paid`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("paid rows %d, %v", n, err)
	}
}

func mustMigrated(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	if _, err := pgstore.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
