package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/idemhq/idem/internal/migrate"
	"github.com/idemhq/idem/store"
)

// migrations holds the schema, one numbered goose file per change.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrationsFS returns the migrations with the files at its root, as the
// migrator expects.
func migrationsFS() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // only on an invalid literal path
	}
	return sub
}

// Migrate applies this package's pending migrations to db and returns what
// it applied (nothing when the schema is current). The store's tables live
// next to the caller's own, so that business writes and completions share a
// transaction; Migrate touches only idem's tables and the idem_migrations
// bookkeeping table. Run it from one process at a time (at deploy, or
// through `idem migrate`): New refuses to start on a schema with pending
// migrations rather than migrating behind the operator's back.
func Migrate(ctx context.Context, db *sql.DB) ([]store.Migration, error) {
	res, err := migrate.Up(ctx, db, migrate.SQLite, migrationsFS(), slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return res, nil
}
