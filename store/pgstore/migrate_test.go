package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem/internal/migrate"
	"github.com/idemhq/idem/internal/testutil/migratetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// TestMigrateDownAndUp takes every migration down and up again; New
// refuses the schema while one is down.
func TestMigrateDownAndUp(t *testing.T) {
	t.Parallel()
	pool := migratedPool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	migratetest.DownUp(t, migratetest.Schema{
		DB:          db,
		Dialect:     migrate.Postgres,
		Migrations:  pgstore.Migrations(),
		Migrate:     func(ctx context.Context) ([]store.Migration, error) { return pgstore.Migrate(ctx, pool) },
		New:         func() error { _, err := pgstore.New(pool, nil); return err },
		NotMigrated: func(err error) bool { return errors.Is(err, pgstore.ErrNotMigrated) },
	})
}
