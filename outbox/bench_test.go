package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The outbox benchmarks measure intents per second, enqueued in business
// transactions of 100 and then delivered to a local target, through idem
// ("idem": Relay.EnqueueTx, then Relay.Drain with Batch 32 and
// Concurrency 8) and through a hand-written outbox ("baseline": a jobs
// table, the same transactions, then a loop that selects 32 undone rows,
// posts them 8 at a time and marks each done in its own statement; no
// lease, no fencing, no stable key, no retry policy). Both ends run in one
// invocation:
//
//	go test -run '^$' -bench Outbox -benchtime 3000x -count 3 ./outbox

const benchBatchTx = 100

type benchTarget struct{ srv *httptest.Server }

func newBenchTarget(b *testing.B) *benchTarget {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	b.Cleanup(srv.Close)
	return &benchTarget{srv: srv}
}

func benchBody(i int) []byte { return []byte(fmt.Sprintf(`{"order":{"id":"o-%d"},"amount":100}`, i)) }

// benchIdem enqueues b.N intents and drains them through a Relay.
func benchIdem[TX any](b *testing.B, s interface {
	InTx(ctx context.Context, fn func(ctx context.Context, tx TX) error) error
}, r *outbox.Relay[TX], business func(ctx context.Context, tx TX, i int) error) {
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i += benchBatchTx {
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			for j := i; j < min(i+benchBatchTx, b.N); j++ {
				if err := business(ctx, tx, j); err != nil {
					return err
				}
				if _, err := r.EnqueueTx(ctx, tx, charge(fmt.Sprintf("o-%d", j))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := r.Drain(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "intents/s")
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "drained/s")
}

// baselineLoop is the hand-written relay: select a batch, post it 8 at a
// time, mark each row done.
func baselineLoop(b *testing.B, url string, next func() ([]int64, [][]byte, error), done func(id int64) error) {
	client := &http.Client{}
	for {
		ids, bodies, err := next()
		if err != nil {
			b.Fatal(err)
		}
		if len(ids) == 0 {
			return
		}
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for k := range ids {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				resp, err := client.Post(url+"/charges", "application/json", bytes.NewReader(bodies[k]))
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if err := done(ids[k]); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

func BenchmarkOutbox(b *testing.B) {
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
			if _, err := db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY);
				CREATE TABLE jobs (id INTEGER PRIMARY KEY, body BLOB NOT NULL, done INTEGER NOT NULL DEFAULT 0);
				CREATE INDEX jobs_undone ON jobs (id) WHERE done = 0`); err != nil {
				b.Fatal(err)
			}
			s, err := sqlitestore.New(db, nil)
			if err != nil {
				b.Fatal(err)
			}
			return db, s
		}
		order := func(ctx context.Context, tx *sql.Tx, i int) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, i)
			return err
		}
		b.Run("idem", func(b *testing.B) {
			_, s := open(b)
			tg := newBenchTarget(b)
			r, err := outbox.New(s, &outbox.Config{Targets: []outbox.Target{{Name: "pay", URL: tg.srv.URL, Key: orderKey("charge-")}},
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			benchIdem[*sql.Tx](b, s, r, order)
		})
		b.Run("baseline", func(b *testing.B) {
			db, s := open(b)
			tg := newBenchTarget(b)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i += benchBatchTx {
				err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					for j := i; j < min(i+benchBatchTx, b.N); j++ {
						if err := order(ctx, tx, j); err != nil {
							return err
						}
						if _, err := tx.ExecContext(ctx, `INSERT INTO jobs (body) VALUES (?)`, benchBody(j)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			baselineLoop(b, tg.srv.URL, func() ([]int64, [][]byte, error) {
				rows, err := db.QueryContext(ctx, `SELECT id, body FROM jobs WHERE done = 0 ORDER BY id LIMIT 32`)
				if err != nil {
					return nil, nil, err
				}
				defer rows.Close()
				var ids []int64
				var bodies [][]byte
				for rows.Next() {
					var id int64
					var body []byte
					if err := rows.Scan(&id, &body); err != nil {
						return nil, nil, err
					}
					ids, bodies = append(ids, id), append(bodies, body)
				}
				return ids, bodies, rows.Err()
			}, func(id int64) error {
				_, err := db.ExecContext(ctx, `UPDATE jobs SET done = 1 WHERE id = ?`, id)
				return err
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "intents/s")
		})
	})
	b.Run("postgres", func(b *testing.B) {
		open := func(b *testing.B) *pgstore.Store {
			pool := testdb.Postgres(b)
			ctx := context.Background()
			if _, err := pgstore.Migrate(ctx, pool); err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY);
				CREATE TABLE jobs (id bigserial PRIMARY KEY, body bytea NOT NULL, done boolean NOT NULL DEFAULT false);
				CREATE INDEX jobs_undone ON jobs (id) WHERE NOT done`); err != nil {
				b.Fatal(err)
			}
			s, err := pgstore.New(pool, nil)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		order := func(ctx context.Context, tx pgx.Tx, i int) error {
			_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, i)
			return err
		}
		b.Run("idem", func(b *testing.B) {
			s := open(b)
			tg := newBenchTarget(b)
			r, err := outbox.New(s, &outbox.Config{Targets: []outbox.Target{{Name: "pay", URL: tg.srv.URL, Key: orderKey("charge-")}},
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			benchIdem[pgx.Tx](b, s, r, order)
		})
		b.Run("idem-wide", func(b *testing.B) {
			s := open(b)
			tg := newBenchTarget(b)
			r, err := outbox.New(s, &outbox.Config{Targets: []outbox.Target{{Name: "pay", URL: tg.srv.URL, Key: orderKey("charge-")}},
				Batch: 256, Concurrency: 32, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			benchIdem[pgx.Tx](b, s, r, order)
		})
		b.Run("baseline", func(b *testing.B) {
			s := open(b)
			tg := newBenchTarget(b)
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i += benchBatchTx {
				err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					for j := i; j < min(i+benchBatchTx, b.N); j++ {
						if err := order(ctx, tx, j); err != nil {
							return err
						}
						if _, err := tx.Exec(ctx, `INSERT INTO jobs (body) VALUES ($1)`, benchBody(j)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			baselineLoop(b, tg.srv.URL, func() ([]int64, [][]byte, error) {
				var ids []int64
				var bodies [][]byte
				err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					rows, err := tx.Query(ctx, `SELECT id, body FROM jobs WHERE NOT done ORDER BY id LIMIT 32`)
					if err != nil {
						return err
					}
					defer rows.Close()
					for rows.Next() {
						var id int64
						var body []byte
						if err := rows.Scan(&id, &body); err != nil {
							return err
						}
						ids, bodies = append(ids, id), append(bodies, body)
					}
					return rows.Err()
				})
				return ids, bodies, err
			}, func(id int64) error {
				return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `UPDATE jobs SET done = true WHERE id = $1`, id)
					return err
				})
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "intents/s")
		})
	})
}
