package serve_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store/pgstore"
)

// BenchmarkExecutions compares the engine on PostgreSQL with a
// hand-written job table claimed with FOR UPDATE SKIP LOCKED doing the
// same work, on the same database, in one run: Create writes a job
// (engine: the task, its execution, two events and its step); Work claims
// one and completes it (engine: fenced, with its events). Parallel, so
// that claims contend. Compare the ratios, not the absolute figures.
func BenchmarkExecutions(b *testing.B) {
	ctx := context.Background()
	b.Run("Engine", func(b *testing.B) {
		_, s, en, create := benchEngine(b)
		b.Run("Create", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := create(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("Work", func(b *testing.B) {
			for range b.N {
				if err := create(); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				owner := rand.Text() // a worker's token
				for pb.Next() {
					var c execution.Claimed
					var ok bool
					if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
						var err error
						c, ok, err = en.ClaimTx(ctx, tx, []string{"export"}, owner, 0)
						return err
					}); err != nil || !ok {
						b.Errorf("claim: %v %v", ok, err)
						return
					}
					if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
						_, err := en.CompleteTx(ctx, tx, c.Step.App, c.Step.ID, c.Step.Epoch, json.RawMessage(`{"ok":true}`))
						return err
					}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("Worker", func(b *testing.B) {
			// As River's Work below: b.N steps queued, then the in-process
			// worker (8 at once, batched claims and group-committed
			// completions) runs them all, on a schema of its own.
			pool, _, en, create := benchEngine(b)
			for range b.N {
				if err := create(); err != nil {
					b.Fatal(err)
				}
			}
			drain(b, en)
			b.StopTimer()
			var left int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM idem_steps WHERE status <> 4`).Scan(&left); err != nil || left != 0 {
				b.Fatalf("%d steps not completed (%v)", left, err)
			}
		})
	})
	b.Run("SkipLockedTable", func(b *testing.B) {
		pool := testdb.Postgres(b)
		if _, err := pool.Exec(ctx, `CREATE TABLE jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL,
			state smallint NOT NULL DEFAULT 1, attempts int NOT NULL DEFAULT 0, payload jsonb NOT NULL, output jsonb,
			created_at timestamptz NOT NULL DEFAULT now());
			CREATE INDEX jobs_ready ON jobs (kind, id) WHERE state = 1`); err != nil {
			b.Fatal(err)
		}
		create := func(pool *pgxpool.Pool) error {
			_, err := pool.Exec(ctx, `INSERT INTO jobs (kind, payload) VALUES ('export', '{"order":"o-1"}')`)
			return err
		}
		b.Run("Create", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := create(pool); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("Work", func(b *testing.B) {
			for range b.N {
				if err := create(pool); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					var id int64
					if err := pool.QueryRow(ctx, `UPDATE jobs SET state = 2, attempts = attempts + 1
						WHERE id = (SELECT id FROM jobs WHERE kind = 'export' AND state = 1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
						RETURNING id`).Scan(&id); err != nil {
						b.Error(err)
						return
					}
					if _, err := pool.Exec(ctx, `UPDATE jobs SET state = 3, output = '{"ok":true}' WHERE id = $1 AND state = 2`, id); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	})
}

// drain runs an in-process worker of en (8 at once, batched claims and
// group-committed completions) until it has worked b.N steps of type
// "export", timing only that.
func drain[TX any](b *testing.B, en *execution.Engine[TX]) {
	b.Helper()
	var done sync.WaitGroup
	done.Add(b.N)
	w, err := en.NewWorker(map[string]execution.Handler[TX]{
		"export": func(context.Context, execution.Job) (execution.Result[TX], error) {
			done.Done()
			return execution.Result[TX]{Output: json.RawMessage(`{"ok":true}`)}, nil
		},
	}, &execution.WorkerConfig{Concurrency: 8, Poll: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.ResetTimer()
	run := make(chan error, 1)
	go func() { run <- w.Run(ctx) }()
	done.Wait()
	cancel()
	<-run
}

// benchEngine returns an engine on a fresh PostgreSQL schema, and a
// function that creates a task of type "export".
func benchEngine(b *testing.B) (*pgxpool.Pool, *pgstore.Store, *execution.Engine[pgx.Tx], func() error) {
	ctx := context.Background()
	pool, s := migratedPostgres(b)
	en, err := execution.New[pgx.Tx](s, &execution.Config{Types: map[string]execution.TypeConfig{"export": {}}})
	if err != nil {
		b.Fatal(err)
	}
	create := func() error {
		return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, _, err := en.CreateTx(ctx, tx, "app", execution.NewTask{Type: "export", Input: json.RawMessage(`{"order":"o-1"}`)})
			return err
		})
	}
	return pool, s, en, create
}

// exportArgs is River's job for the same work.
type exportArgs struct {
	Order string `json:"order"`
}

func (exportArgs) Kind() string { return "export" }

type exportWorker struct {
	river.WorkerDefaults[exportArgs]
	done *sync.WaitGroup
}

func (w *exportWorker) Work(context.Context, *river.Job[exportArgs]) error {
	w.done.Done()
	return nil
}

// BenchmarkRiver does the same with River on the same PostgreSQL: Create
// inserts a job; Work inserts b.N jobs, then times River's client working
// them all (its own fetch loop, 8 workers, batched completions).
func BenchmarkRiver(b *testing.B) {
	ctx := context.Background()
	pool := testdb.Postgres(b)
	driver := riverpgxv5.New(pool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatal(err)
	}
	b.Run("Create", func(b *testing.B) {
		client, err := river.NewClient(driver, &river.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := client.Insert(ctx, exportArgs{Order: "o-1"}, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("Work", func(b *testing.B) {
		if _, err := pool.Exec(ctx, `DELETE FROM river_job`); err != nil {
			b.Fatal(err)
		}
		var done sync.WaitGroup
		workers := river.NewWorkers()
		river.AddWorker(workers, &exportWorker{done: &done})
		client, err := river.NewClient(driver, &river.Config{Workers: workers,
			Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 8}}, FetchCooldown: time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		params := make([]river.InsertManyParams, b.N)
		for i := range params {
			params[i] = river.InsertManyParams{Args: exportArgs{Order: "o-1"}}
		}
		for start := 0; start < len(params); start += 1000 {
			if _, err := client.InsertMany(ctx, params[start:min(start+1000, len(params))]); err != nil {
				b.Fatal(err)
			}
		}
		done.Add(b.N)
		b.ResetTimer()
		if err := client.Start(ctx); err != nil {
			b.Fatal(err)
		}
		done.Wait()
		b.StopTimer()
		if err := client.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	})
}
