// Package migrate applies a store's embedded, numbered .sql migrations with
// goose. It is the one migrator behind the stores' Migrate functions and the
// `idem migrate` command, so both always agree on what is applied.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/idemhq/idem/store"
)

// Dialect names the SQL flavour of a store's migrations.
type Dialect string

const (
	SQLite   Dialect = "sqlite3"
	Postgres Dialect = "postgres"
)

// TableName is the table in which applied migrations are recorded.
const TableName = "idem_migrations"

// Up applies every pending migration in fsys (files named NNN_name.sql with
// goose annotations) to db and returns what it applied, in order. On
// PostgreSQL it holds a session advisory lock, so concurrent callers apply
// each migration once.
func Up(ctx context.Context, db *sql.DB, d Dialect, fsys fs.FS, logger *slog.Logger) ([]store.Migration, error) {
	p, err := provider(ctx, db, d, fsys, logger)
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", d, err)
	}
	out := make([]store.Migration, 0, len(res))
	for _, r := range res {
		out = append(out, store.Migration{Version: r.Source.Version, Name: r.Source.Path})
	}
	return out, nil
}

// Pending reports whether db lacks any migration in fsys. Stores call it at
// construction so that they refuse to run on a schema that is not theirs,
// instead of migrating a shared database behind the operator's back.
//
// It writes nothing: on a database without the bookkeeping table (which
// goose would create) every migration is pending.
func Pending(ctx context.Context, db *sql.DB, d Dialect, fsys fs.FS) (bool, error) {
	exists, err := tableExists(ctx, db, d)
	if err != nil {
		return false, fmt.Errorf("migrate %s: %w", d, err)
	}
	p, err := provider(ctx, db, d, fsys, nil)
	if err != nil {
		return false, err
	}
	if !exists {
		return len(p.ListSources()) > 0, nil
	}
	return p.HasPending(ctx)
}

// tableExists reports whether the bookkeeping table is visible (on
// PostgreSQL: in the search_path).
func tableExists(ctx context.Context, db *sql.DB, d Dialect) (bool, error) {
	var found bool
	var err error
	switch d {
	case SQLite:
		err = db.QueryRowContext(ctx, `SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?`, TableName).Scan(&found)
	case Postgres:
		err = db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, TableName).Scan(&found)
	default:
		return false, fmt.Errorf("unknown dialect %q", d)
	}
	return found, err
}

func provider(ctx context.Context, db *sql.DB, d Dialect, fsys fs.FS, logger *slog.Logger) (*goose.Provider, error) {
	opts := []goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(TableName),
	}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	var dialect goose.Dialect
	switch d {
	case SQLite:
		dialect = goose.DialectSQLite3
	case Postgres:
		dialect = goose.DialectPostgres
		// One lock per schema, so that migrating one schema never waits for
		// another; retried every second rather than goose's five.
		var schema string
		if err := db.QueryRowContext(ctx, `SELECT coalesce(current_schema(), '')`).Scan(&schema); err != nil {
			return nil, fmt.Errorf("migrate %s: %w", d, err)
		}
		h := fnv.New64a()
		h.Write([]byte("idem migrate " + schema))
		locker, err := lock.NewPostgresSessionLocker(
			lock.WithLockID(int64(h.Sum64()>>1)),
			lock.WithLockTimeout(1, 300),
		)
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	default:
		return nil, fmt.Errorf("migrate: unknown dialect %q", d)
	}
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrate %s: %w", d, err)
	}
	return p, nil
}
