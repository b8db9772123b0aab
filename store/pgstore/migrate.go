package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem/internal/migrate"
	"github.com/idemhq/idem/store"
)

// ErrNotMigrated is returned (wrapped) by New when the schema lacks any of
// the store's migrations. Run Migrate, or `idem migrate`, then New again.
var ErrNotMigrated = errors.New("idem/pgstore: schema is not migrated: run pgstore.Migrate (or `idem migrate`) first")

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate applies the store's pending migrations to the schema first in
// pool's search_path and returns what it applied, in order. It holds a
// PostgreSQL advisory lock while it runs, so several processes may call it
// at once and each migration is applied once. The store never calls it by
// itself.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]store.Migration, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close() // does not close pool
	res, err := migrate.Up(ctx, db, migrate.Postgres, migrations(), nil)
	if err != nil {
		return res, fmt.Errorf("idem/pgstore: %w", err)
	}
	return res, nil
}

// migrations returns the embedded migration files at the root of an FS, as
// the migrator expects them.
func migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // "migrations" is a valid path: unreachable
	}
	return sub
}

// checkMigrated returns an error wrapping ErrNotMigrated unless every
// migration is applied, and changes nothing. The migrator's own check would
// create its version table when it is missing, so a schema that was never
// migrated is recognised first, by looking for that table where the
// migrator would put it.
func checkMigrated(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	err := pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = $1)`,
		migrate.TableName,
	).Scan(&exists)
	if err != nil {
		return fmt.Errorf("idem/pgstore: check migrations: %w", err)
	}
	if !exists {
		return fmt.Errorf("%w (no %s table in the current schema)", ErrNotMigrated, migrate.TableName)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close() // does not close pool
	pending, err := migrate.Pending(ctx, db, migrate.Postgres, migrations())
	if err != nil {
		return fmt.Errorf("idem/pgstore: check migrations: %w", err)
	}
	if pending {
		return fmt.Errorf("%w (some migrations are pending)", ErrNotMigrated)
	}
	return nil
}
