package httpidem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
)

// openFunc opens an isolated transactional store whose clock reads now,
// with a ledger table in the same database.
type openFunc[TX any] func(t testing.TB, now func() time.Time) (store.TxStore[TX], storetest.Ledger[TX])

func openSQLite(t testing.TB, now func() time.Time) (store.TxStore[*sql.Tx], storetest.Ledger[*sql.Tx]) {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := sqlitestore.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, &sqlitestore.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := db.Exec(`CREATE TABLE ledger (id TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return s, sqliteLedger{db}
}

type sqliteLedger struct{ db *sql.DB }

func (l sqliteLedger) Charge(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO ledger (id, amount) VALUES (?, 100)`, id)
	return err
}

func (l sqliteLedger) Charges(ctx context.Context, id string) (int, error) {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT count(*) FROM ledger WHERE id = ?`, id).Scan(&n)
	return n, err
}

func openPostgres(t testing.TB, now func() time.Time) (store.TxStore[pgx.Tx], storetest.Ledger[pgx.Tx]) {
	t.Helper()
	pool := testdb.Postgres(t)
	ctx := context.Background()
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, &pgstore.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (id text NOT NULL, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return s, pgLedger{pool: pool}
}

type pgLedger struct {
	pool interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (l pgLedger) Charge(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `INSERT INTO ledger (id, amount) VALUES ($1, 100)`, id)
	return err
}

func (l pgLedger) Charges(ctx context.Context, id string) (int, error) {
	var n int
	err := l.pool.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE id = $1`, id).Scan(&n)
	return n, err
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	exerciseStore(t, openFunc[*sql.Tx](openSQLite))
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	exerciseStore(t, openFunc[pgx.Tx](openPostgres))
}

// storeEnv is one isolated store with both kinds of middleware over it.
type storeEnv[TX any] struct {
	store  store.TxStore[TX]
	ledger storetest.Ledger[TX]
	clock  *testclock.Clock
	plain  *httpidem.Middleware // New over the guard
	tx     *httpidem.Middleware // NewTx over the same guard
}

func newStoreEnv[TX any](t *testing.T, open openFunc[TX], cfg *httpidem.Config) *storeEnv[TX] {
	t.Helper()
	clock := testclock.New(t0)
	s, l := open(t, clock.Now)
	g, err := key.NewTx(s, &key.Config{Lease: 30 * time.Second, Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	plain := newMiddleware(t, g.Guard, cfg, nil)
	tx, err := httpidem.NewTx(g, withDefaults(cfg, nil))
	if err != nil {
		t.Fatal(err)
	}
	return &storeEnv[TX]{store: s, ledger: l, clock: clock, plain: plain, tx: tx}
}

// chargeHandler writes one ledger row in the middleware's transaction, then
// answers with status and body.
func chargeHandler[TX any](t *testing.T, l storetest.Ledger[TX], status int, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := httpidem.TxFrom[TX](r.Context())
		if !ok {
			t.Errorf("no transaction in the handler's context")
			w.WriteHeader(500)
			return
		}
		if err := l.Charge(r.Context(), tx, "order-1"); err != nil {
			t.Errorf("charge: %v", err)
			w.WriteHeader(500)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

func wantCharges[TX any](t *testing.T, l storetest.Ledger[TX], want int) {
	t.Helper()
	n, err := l.Charges(context.Background(), "order-1")
	if err != nil || n != want {
		t.Fatalf("ledger has %d rows (%v), want %d", n, err, want)
	}
}

// exerciseStore runs the key scenarios on a real store.
func exerciseStore[TX any](t *testing.T, open openFunc[TX]) {
	t.Run("ExecuteReplayConflict", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		c := &counter{}
		h := mux(e.plain, c)
		first := serve(h, req("POST", "/charges", "k", `{"amount":1}`))
		if first.Code != http.StatusCreated {
			t.Fatalf("first %d %s", first.Code, first.Body)
		}
		wantReplayOf(t, first, serve(h, req("POST", "/charges", "k", `{"amount":1}`)))
		wantProblem(t, serve(h, req("POST", "/charges", "k", `{"amount":2}`)), 422, httpidem.SlugKeyReused)
		wantCalls(t, c, 1)
	})

	t.Run("BadInputLeavesNoRecord", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, &httpidem.Config{MaxBody: 16, Fingerprint: httpidem.FingerprintJSON})
		c := &counter{}
		h := mux(e.plain, c)
		wantProblem(t, serve(h, req("POST", "/charges", strings.Repeat("k", 256), "{}")), 400, httpidem.SlugKeyInvalid)
		wantProblem(t, serve(h, req("POST", "/charges", "k", strings.Repeat(" ", 17))), 413, httpidem.SlugBodyTooLarge)
		wantProblem(t, serve(h, req("POST", "/charges", "k", `{"a":1,"a":1}`)), 400, httpidem.SlugBodyInvalidJSON)
		wantCalls(t, c, 0)
		wantNoRecord(t, e.store, scope("k"))
		wantNoRecord(t, e.store, scope(strings.Repeat("k", 256)[:255]))
	})

	t.Run("ServerErrorReleases", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		calls := 0
		h := mux(e.plain, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.WriteHeader([]int{503, 429, 201}[calls-1])
		}))
		for _, want := range []int{503, 429, 201, 201} {
			if rec := serve(h, req("POST", "/charges", "k", "")); rec.Code != want {
				t.Fatalf("%d, want %d", rec.Code, want)
			}
		}
		if calls != 3 {
			t.Fatalf("calls %d", calls)
		}
	})

	t.Run("MarkUnknownUntilLeaseEnds", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		calls := 0
		h := mux(e.plain, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			if calls == 1 {
				httpidem.MarkUnknown(r, errors.New("upstream reset"))
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		if rec := serve(h, req("POST", "/charges", "k", "")); rec.Code != http.StatusBadGateway {
			t.Fatalf("first %d", rec.Code)
		}
		e.clock.Advance(12 * time.Second)
		rec := serve(h, req("POST", "/charges", "k", ""))
		wantProblem(t, rec, http.StatusConflict, httpidem.SlugOutcomeUnknown)
		wantRetryAfter(t, rec, "18")
		e.clock.Advance(18 * time.Second)
		if rec := serve(h, req("POST", "/charges", "k", "")); rec.Code != http.StatusCreated || calls != 2 {
			t.Fatalf("after the lease: %d, %d calls", rec.Code, calls)
		}
	})

	t.Run("ResponseNotStored", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, &httpidem.Config{MaxResponse: 100})
		c := 0
		h := mux(e.plain, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c++
			_, _ = w.Write(bytes.Repeat([]byte("y"), 1000))
		}))
		if rec := serve(h, req("POST", "/charges", "k", "")); rec.Code != 200 || rec.Body.Len() != 1000 {
			t.Fatalf("first %d, %d bytes", rec.Code, rec.Body.Len())
		}
		wantProblem(t, serve(h, req("POST", "/charges", "k", "")), http.StatusConflict, httpidem.SlugResponseNotStored)
		if c != 1 {
			t.Fatalf("calls %d", c)
		}
	})

	// G1 on a transactional store: 64 identical requests released together
	// by a barrier write exactly one ledger row; every answer is the one
	// response (executed once, replayed) or a 409 in flight.
	t.Run("TxConcurrentDuplicates", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		h := mux(e.tx, chargeHandler(t, e.ledger, http.StatusCreated, "charged"))
		const n = 64
		var (
			start = make(chan struct{})
			wg    sync.WaitGroup
			recs  [n]*httptest.ResponseRecorder
		)
		for i := range n {
			wg.Go(func() {
				r := req("POST", "/charges", "order-1", `{"amount":100}`)
				<-start
				recs[i] = serve(h, r)
			})
		}
		close(start)
		wg.Wait()
		wantCharges(t, e.ledger, 1)
		executed, replayed, inFlight := 0, 0, 0
		for _, rec := range recs {
			switch {
			case rec.Code == http.StatusCreated && rec.Body.String() == "charged" && rec.Header().Get(httpidem.HeaderReplayed) == "":
				executed++
			case rec.Code == http.StatusCreated && rec.Body.String() == "charged" && rec.Header().Get(httpidem.HeaderReplayed) == "true":
				replayed++
			case rec.Code == http.StatusConflict && strings.Contains(rec.Body.String(), httpidem.SlugRequestInFlight):
				inFlight++
			default:
				t.Errorf("unexpected answer %d %q", rec.Code, rec.Body)
			}
		}
		if executed != 1 || executed+replayed+inFlight != n {
			t.Fatalf("executed %d, replayed %d, in flight %d", executed, replayed, inFlight)
		}
		t.Logf("executed %d, replayed %d, in flight %d", executed, replayed, inFlight)
		// Retries after the storm replay; still one row.
		last := serve(h, req("POST", "/charges", "order-1", `{"amount":100}`))
		if last.Code != http.StatusCreated || last.Header().Get(httpidem.HeaderReplayed) != "true" {
			t.Fatalf("retry: %d", last.Code)
		}
		wantCharges(t, e.ledger, 1)
	})

	// A status that is not stored rolls the handler's writes back with the
	// released claim; the retry commits both.
	t.Run("TxServerErrorRollsBack", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		rec := serve(mux(e.tx, chargeHandler(t, e.ledger, http.StatusInternalServerError, "oops")), req("POST", "/charges", "k", ""))
		if rec.Code != 500 || rec.Body.String() != "oops" {
			t.Fatalf("first %d %q", rec.Code, rec.Body)
		}
		wantCharges(t, e.ledger, 0)
		if r := record(t, e.store, scope("k")); r.State != store.StateReleased {
			t.Fatalf("record %v", r.State)
		}
		h := mux(e.tx, chargeHandler(t, e.ledger, http.StatusCreated, "ok"))
		first := serve(h, req("POST", "/charges", "k", ""))
		wantReplayOf(t, first, serve(h, req("POST", "/charges", "k", "")))
		wantCharges(t, e.ledger, 1)
	})

	t.Run("TxPanicRollsBack", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		h := mux(e.tx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := httpidem.TxFrom[TX](r.Context())
			if err := e.ledger.Charge(r.Context(), tx, "order-1"); err != nil {
				t.Errorf("charge: %v", err)
			}
			panic(http.ErrAbortHandler)
		}))
		func() {
			defer func() {
				if p := recover(); p != http.ErrAbortHandler {
					t.Errorf("recovered %v", p)
				}
			}()
			serve(h, req("POST", "/charges", "k", ""))
		}()
		wantCharges(t, e.ledger, 0)
		if r := record(t, e.store, scope("k")); r.State != store.StateReleased {
			t.Fatalf("record %v", r.State)
		}
	})

	// MarkUnknown in a transaction: the local writes roll back (they must
	// not commit without a stored response) and the claim is kept.
	t.Run("TxMarkUnknown", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		h := mux(e.tx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := httpidem.TxFrom[TX](r.Context())
			_ = e.ledger.Charge(r.Context(), tx, "order-1")
			httpidem.MarkUnknown(r, errors.New("provider timeout"))
			w.WriteHeader(http.StatusGatewayTimeout)
		}))
		if rec := serve(h, req("POST", "/charges", "k", "")); rec.Code != http.StatusGatewayTimeout {
			t.Fatalf("first %d", rec.Code)
		}
		wantCharges(t, e.ledger, 0)
		wantProblem(t, serve(h, req("POST", "/charges", "k", "")), http.StatusConflict, httpidem.SlugOutcomeUnknown)
	})

	// A response that outgrows MaxResponse commits the transaction (with
	// the marker) before its first byte is sent.
	t.Run("TxResponseNotStored", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, &httpidem.Config{MaxResponse: 10})
		h := mux(e.tx, chargeHandler(t, e.ledger, http.StatusCreated, strings.Repeat("z", 100)))
		first := httptest.NewRecorder()
		h.ServeHTTP(&durableCheck{ResponseWriter: first, t: t, s: e.store, sc: scope("k")}, req("POST", "/charges", "k", ""))
		if first.Code != http.StatusCreated || first.Body.Len() != 100 {
			t.Fatalf("first %d, %d bytes", first.Code, first.Body.Len())
		}
		wantCharges(t, e.ledger, 1)
		wantProblem(t, serve(h, req("POST", "/charges", "k", "")), http.StatusConflict, httpidem.SlugResponseNotStored)
		wantCharges(t, e.ledger, 1)
	})

	// A transaction that cannot begin: nothing ran, 503, and the claim was
	// released, so the retry runs the handler now, once. A COMMIT that
	// never reached the database: the same, with the handler's write
	// rolled back.
	for name, op := range map[string]fault.Op{"TxBeginFails": fault.BeginTx, "TxCommitNotSent": fault.CommitTx} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, l := open(t, testclock.New(t0).Now)
			fs := fault.WrapTx(s)
			g, err := key.NewTx[TX](fs, &key.Config{Lease: 30 * time.Second, Heartbeat: -1})
			if err != nil {
				t.Fatal(err)
			}
			m, err := httpidem.NewTx(g, withDefaults(nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			h := mux(m, chargeHandler(t, l, http.StatusCreated, "paid"))
			fs.SetPlan(fault.Once(fault.Before, op))
			wantProblem(t, serve(h, req("POST", "/charges", "k", "")), http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
			wantCharges(t, l, 0)
			if rec := serve(h, req("POST", "/charges", "k", "")); rec.Code != http.StatusCreated {
				t.Fatalf("retry: %d %s", rec.Code, rec.Body)
			}
			wantCharges(t, l, 1)
		})
	}

	// A handler behind NewTx asking for another transaction type gets none.
	t.Run("TxFromWrongType", func(t *testing.T) {
		t.Parallel()
		e := newStoreEnv(t, open, nil)
		h := mux(e.tx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := httpidem.TxFrom[*strings.Builder](r.Context()); ok {
				t.Errorf("TxFrom with the wrong type succeeded")
			}
			if _, ok := httpidem.TxFrom[TX](r.Context()); !ok {
				t.Errorf("TxFrom with the store's type failed")
			}
		}))
		serve(h, req("POST", "/charges", "k", ""))
	})
}
