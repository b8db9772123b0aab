package serve_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
)

// BenchmarkWorkflows compares workflows on PostgreSQL with the same work
// through a hand-written queue on the same database, in one run. Trigger:
// a trigger of a new order (idem: the identity taken by its constraint, the
// run, its events and first step, through the HTTP handler; the queue: a
// run row unique per order and a job row, in one transaction). Gateway:
// b.N runs queued, then their one GATEWAY step each (a POST with the
// order's key to a local target) run to the end (idem: RunWorkflows, 16 at
// once; the queue: 16 workers claiming with FOR UPDATE SKIP LOCKED, calling
// and marking done). Compare the ratios, not the absolute figures.
func BenchmarkWorkflows(b *testing.B) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer target.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	def := `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id"}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "` + target.URL + `/charges",
    "headers": {"Idempotency-Key": "= 'charge-' & payload.order.id"}, "body": {"amount": "= payload.order.amount"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "done"}]}`
	var seq atomic.Int64
	order := func() string { return fmt.Sprintf(`{"order": {"id": "o-%d", "amount": 5}}`, seq.Add(1)) }

	idem := func(b *testing.B) (*serve.Server[pgx.Tx], *pgxpool.Pool, func() error) {
		pool, s := migratedPostgres(b)
		ctx := context.Background()
		if err := s.CreateApp(ctx, store.App{Name: "shop", TokenHashes: [][]byte{serve.HashToken("tok")}, Scheme: "idem", CreatedAt: time.Now()}); err != nil {
			b.Fatal(err)
		}
		srv, err := serve.New(s, &serve.Config{GatewayClient: client})
		if err != nil {
			b.Fatal(err)
		}
		call := func(method, path, body string) (int, error) {
			req := httptest.NewRequest(method, path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer tok")
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code >= 300 {
				return rec.Code, fmt.Errorf("%s %s: %d %s", method, path, rec.Code, rec.Body.String())
			}
			return rec.Code, nil
		}
		if _, err := call("PUT", "/v1/workflows/checkout", def); err != nil {
			b.Fatal(err)
		}
		trigger := func() error {
			_, err := call("POST", "/v1/workflows/checkout/trigger", order())
			return err
		}
		return srv, pool, trigger
	}
	b.Run("Idem", func(b *testing.B) {
		b.Run("Trigger", func(b *testing.B) {
			_, _, trigger := idem(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := trigger(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("Gateway", func(b *testing.B) {
			srv, pool, trigger := idem(b)
			for range b.N {
				if err := trigger(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.RunWorkflows(ctx) }()
			waitFor(b, pool, `SELECT count(*) FROM idem_executions WHERE status = 4`, b.N)
			b.StopTimer()
			cancel()
			<-done
		})
	})
	b.Run("Queue", func(b *testing.B) {
		queue := func(b *testing.B) (*pgxpool.Pool, func() error) {
			pool, _ := migratedPostgres(b)
			ctx := context.Background()
			for _, q := range []string{
				`CREATE TABLE bench_runs (id bigserial PRIMARY KEY, order_id text UNIQUE NOT NULL, payload jsonb NOT NULL, status smallint NOT NULL, created_at timestamptz NOT NULL)`,
				`CREATE TABLE bench_jobs (id bigserial PRIMARY KEY, run_id bigint NOT NULL, key text NOT NULL, status smallint NOT NULL, attempts int NOT NULL DEFAULT 0, locked_until timestamptz)`,
				`CREATE INDEX ON bench_jobs (id) WHERE status = 1`,
			} {
				if _, err := pool.Exec(ctx, q); err != nil {
					b.Fatal(err)
				}
			}
			trigger := func() error {
				body := order()
				id := strings.Split(body, `"`)[5]
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var run int64
					err := tx.QueryRow(ctx, `INSERT INTO bench_runs (order_id, payload, status, created_at) VALUES ($1, $2, 1, now())
						ON CONFLICT (order_id) DO NOTHING RETURNING id`, id, body).Scan(&run)
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `INSERT INTO bench_jobs (run_id, key, status) VALUES ($1, $2, 1)`, run, "charge-"+id)
					return err
				})
			}
			return pool, trigger
		}
		b.Run("Trigger", func(b *testing.B) {
			_, trigger := queue(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := trigger(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("Gateway", func(b *testing.B) {
			pool, trigger := queue(b)
			for range b.N {
				if err := trigger(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			ctx := context.Background()
			var wg sync.WaitGroup
			var left atomic.Int64
			left.Store(int64(b.N))
			for range 16 {
				wg.Go(func() {
					for left.Load() > 0 {
						var job, run int64
						var key string
						err := pool.QueryRow(ctx, `UPDATE bench_jobs SET status = 2, attempts = attempts + 1, locked_until = now() + interval '30 s'
							WHERE id = (SELECT id FROM bench_jobs WHERE status = 1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
							RETURNING id, run_id, key`).Scan(&job, &run, &key)
						if err == pgx.ErrNoRows {
							time.Sleep(time.Millisecond)
							continue
						}
						if err != nil {
							b.Error(err)
							return
						}
						req, _ := http.NewRequest("POST", target.URL+"/charges", strings.NewReader(`{"amount":5}`))
						req.Header.Set("Idempotency-Key", key)
						res, err := client.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
							if _, err := tx.Exec(ctx, `UPDATE bench_jobs SET status = 3 WHERE id = $1 AND status = 2`, job); err != nil {
								return err
							}
							_, err := tx.Exec(ctx, `UPDATE bench_runs SET status = 4 WHERE id = $1`, run)
							return err
						})
						if err != nil {
							b.Error(err)
							return
						}
						left.Add(-1)
					}
				})
			}
			wg.Wait()
		})
	})
}

// waitFor waits until query counts want rows.
func waitFor(b *testing.B, pool *pgxpool.Pool, query string, want int) {
	b.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
			b.Fatal(err)
		}
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d after 10 minutes", n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
