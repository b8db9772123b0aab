package serve_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
		pool := testdb.Postgres(b)
		if _, err := pgstore.Migrate(ctx, pool); err != nil {
			b.Fatal(err)
		}
		s, err := pgstore.New(pool, nil)
		if err != nil {
			b.Fatal(err)
		}
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
