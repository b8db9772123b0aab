package webhook_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/webhook"
)

// The handler benchmarks measure events per second through the whole
// endpoint (signature check, CloudEvent parsing, inbox row, order state,
// apply, commit) against a baseline handler that does the same business
// write without idem: read the body, decode the payload, and update the
// order's row in one transaction (on PostgreSQL a plain pgx transaction,
// as a user's handler would run it; "baseline-pipelined" runs the same
// write through pgstore's transaction, which idem's side uses). Both are
// served in-process (no network) from bodies built and signed the same
// way, so the ratio is idem's cost.
// "idem" orders each object's events (delta mode); "idem-dedup" only
// records each event (no order), the inbox alone. Run both sides in one
// invocation and compare them:
//
//	go test -run '^$' -bench Handler -count 6 ./webhook
//	go test -run '^$' -bench Handler -count 6 ./webhook -args -bench.clients=16

const benchObjects = 1000

type benchPayload struct {
	Add int `json:"add"`
}

// benchRequests builds signed delta events: event i is sequence i/objects+1
// of object i%objects, so every object's stream advances in order.
type benchRequests struct {
	n      atomic.Int64
	signer *signature.Signer
}

func (g *benchRequests) next(b *testing.B) *http.Request {
	i := g.n.Add(1) - 1
	obj := "o-" + strconv.FormatInt(i%benchObjects, 10)
	ev := event.Event{ID: "e-" + strconv.FormatInt(i, 10), Source: "https://shop.example/orders", Type: "order.paid",
		Subject: obj, Sequence: i/benchObjects + 1, DataContentType: "application/json", Data: []byte(`{"add":7}`)}
	hdr, body, err := event.ToHTTP(ev, event.ModeBinary)
	if err != nil {
		b.Fatal(err)
	}
	sig, err := g.signer.Sign(body, nil)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range sig {
		hdr[k] = v
	}
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header = hdr
	return r
}

// benchClients is how many events are in flight at once: 1 (one after
// another) or, with -bench.clients, more (each client sends one event
// after another).
var benchClients = flag.Int("bench.clients", 1, "events in flight at once in BenchmarkHandler")

func serveBench(b *testing.B, h http.Handler) {
	b.Helper()
	signer, err := signature.NewSigner(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		b.Fatal(err)
	}
	g := &benchRequests{signer: signer}
	b.ReportAllocs()
	b.ResetTimer()
	if *benchClients > 1 {
		// Events of one object in flight at once may come out of order:
		// a parked one is answered 200 all the same.
		b.SetParallelism((*benchClients + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, g.next(b))
				if w.Code != http.StatusOK {
					b.Errorf("status %d: %s", w.Code, w.Body)
					return
				}
			}
		})
	} else {
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, g.next(b))
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// baseline is the same business write without idem.
func baseline(write func(ctx context.Context, obj string, add int) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var p benchPayload
		if err == nil {
			err = json.Unmarshal(body, &p)
		}
		if err == nil {
			err = write(r.Context(), r.Header.Get("Ce-Subject"), p.Add)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

func benchVerifier(b *testing.B) *signature.Verifier {
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// benchPair runs the endpoint ("idem") and the baseline over fresh stores
// from open, both doing the business write with write. The baseline runs
// its transaction with bare when given (as a user's handler would, without
// idem), otherwise with the store's InTx.
func benchPair[TX any](b *testing.B, open func(*testing.B) store.InboxStore[TX], write func(ctx context.Context, tx TX, obj string, add int) error,
	bare func(b *testing.B) func(ctx context.Context, fn func(ctx context.Context, tx TX) error) error) {
	runIdem := func(b *testing.B, mode order.Mode, batch int) {
		apply := func(ctx context.Context, tx TX, ev event.Event) error {
			var p benchPayload
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				return inbox.Invalid(err)
			}
			return write(ctx, tx, ev.Subject, p.Add)
		}
		p, err := inbox.New(open(b), apply, &inbox.Config{Mode: mode, Batch: batch, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		h, err := webhook.New(p, &webhook.Config{Verifier: benchVerifier(b), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		serveBench(b, h)
	}
	// Ordered: each object's deltas applied in sequence (the inbox row,
	// the stream's state and the business write).
	b.Run("idem", func(b *testing.B) { runIdem(b, order.ModeDelta, 0) })
	// The same with the events in flight at once batched
	// (inbox.Config.Batch): one transaction for several.
	b.Run("idem-batched", func(b *testing.B) { runIdem(b, order.ModeDelta, 16) })
	// Dedup only: the inbox row and the business write.
	b.Run("idem-dedup", func(b *testing.B) { runIdem(b, 0, 0) })
	b.Run("idem-dedup-batched", func(b *testing.B) { runIdem(b, 0, 16) })
	serveWrite := func(b *testing.B, inTx func(ctx context.Context, fn func(ctx context.Context, tx TX) error) error) {
		serveBench(b, baseline(func(ctx context.Context, obj string, add int) error {
			return inTx(ctx, func(ctx context.Context, tx TX) error { return write(ctx, tx, obj, add) })
		}))
	}
	if bare == nil {
		b.Run("baseline", func(b *testing.B) { serveWrite(b, open(b).InTx) })
		return
	}
	b.Run("baseline", func(b *testing.B) { serveWrite(b, bare(b)) })
	// The same write through the store's own transaction, which idem
	// pipelines: what the baseline would cost if its author did too.
	b.Run("baseline-pipelined", func(b *testing.B) { serveWrite(b, open(b).InTx) })
}

func BenchmarkHandler(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		open := func(b *testing.B) (*sql.DB, *sqlitestore.Store) {
			db, err := sqlitestore.Open(filepath.Join(b.TempDir(), "bench.db"), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			if _, err := sqlitestore.Migrate(context.Background(), db); err != nil {
				b.Fatal(err)
			}
			if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, paid INTEGER NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			s, err := sqlitestore.New(db, nil)
			if err != nil {
				b.Fatal(err)
			}
			return db, s
		}
		upsert := `INSERT INTO orders (id, paid) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET paid = paid + excluded.paid`
		benchPair(b, func(b *testing.B) store.InboxStore[*sql.Tx] { _, s := open(b); return s },
			func(ctx context.Context, tx *sql.Tx, obj string, add int) error {
				_, err := tx.ExecContext(ctx, upsert, obj, add)
				return err
			}, nil)
	})
	b.Run("postgres", func(b *testing.B) {
		var pool *pgxpool.Pool
		open := func(b *testing.B) *pgstore.Store {
			pool = testdb.Postgres(b)
			ctx := context.Background()
			if _, err := pgstore.Migrate(ctx, pool); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, paid bigint NOT NULL)`); err != nil {
				b.Fatal(err)
			}
			s, err := pgstore.New(pool, nil)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		upsert := `INSERT INTO orders (id, paid) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET paid = orders.paid + excluded.paid`
		benchPair(b, func(b *testing.B) store.InboxStore[pgx.Tx] { return open(b) },
			func(ctx context.Context, tx pgx.Tx, obj string, add int) error {
				_, err := tx.Exec(ctx, upsert, obj, add)
				return err
			},
			// A plain pgx transaction: BEGIN, the write, COMMIT.
			func(b *testing.B) func(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
				open(b)
				return func(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
				}
			})
	})
}
