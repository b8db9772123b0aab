// Package migratetest checks a SQL store's migrations down and up again,
// the same way for every SQL store (sqlitestore, pgstore).
package migratetest

import (
	"context"
	"database/sql"
	"io/fs"
	"slices"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/idemhq/idem/internal/migrate"
	"github.com/idemhq/idem/store"
)

// Schema is one SQL store's migrations on a database that its Migrate has
// brought to the newest version.
type Schema struct {
	// DB is the migrated database (PostgreSQL: a handle whose search_path
	// is the test's own schema).
	DB      *sql.DB
	Dialect migrate.Dialect
	// Migrations are the store's migration files, at the root of the FS.
	Migrations fs.FS
	// Migrate is the store's own Migrate on DB.
	Migrate func(context.Context) ([]store.Migration, error)
	// New opens the store on DB (and closes it again) and returns New's
	// error: nil when it accepts the schema.
	New func() error
	// NotMigrated reports whether err is New's refusal of a schema with a
	// migration pending.
	NotMigrated func(err error) bool
}

// DownUp takes the newest k migrations down, for every k from one to all
// of them, newest first, as `goose down` would (a store never migrates
// down by itself). Each migration taken down must drop objects (tables,
// indexes, columns) of its own and no other; then New must refuse the schema, and
// the store's Migrate must apply exactly the missing migrations, in order,
// bringing every object back, after which New accepts the schema.
func DownUp(t *testing.T, s Schema) {
	t.Helper()
	ctx := context.Background()
	dialect := map[migrate.Dialect]goose.Dialect{migrate.SQLite: goose.DialectSQLite3, migrate.Postgres: goose.DialectPostgres}[s.Dialect]
	p, err := goose.NewProvider(dialect, s.DB, s.Migrations,
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(migrate.TableName))
	if err != nil {
		t.Fatal(err)
	}
	sources := p.ListSources()
	newest := sources[len(sources)-1].Version
	if v, err := p.GetDBVersion(ctx); err != nil || v != newest {
		t.Fatalf("version after Migrate = %d, %v; want %d", v, err, newest)
	}
	all := tables(t, s)
	if err := s.New(); err != nil {
		t.Fatalf("New on the migrated schema: %v", err)
	}
	for k := 1; k <= len(sources); k++ {
		before := all
		for _, src := range slices.Backward(sources[len(sources)-k:]) {
			r, err := p.Down(ctx)
			if err != nil || r.Source.Version != src.Version {
				t.Fatalf("down: %+v, %v; want version %d down", r, err, src.Version)
			}
			after := tables(t, s)
			if len(after) >= len(before) || slices.ContainsFunc(after, func(n string) bool { return !slices.Contains(before, n) }) {
				t.Fatalf("down of %d: objects %v, before %v; want some of its own dropped and no other", src.Version, after, before)
			}
			before = after
		}
		if err := s.New(); err == nil || !s.NotMigrated(err) {
			t.Fatalf("New with %d migrations down: %v; want the refusal of a schema not migrated", k, err)
		}
		res, err := s.Migrate(ctx)
		if err != nil || len(res) != k {
			t.Fatalf("Migrate with %d down: %+v, %v; want %d applied", k, res, err, k)
		}
		for i, r := range res {
			if want := sources[len(sources)-k+i].Version; r.Version != want {
				t.Fatalf("Migrate applied %+v; want versions from %d up, in order", res, sources[len(sources)-k].Version)
			}
		}
		if got := tables(t, s); !slices.Equal(got, all) {
			t.Fatalf("objects after migrating up again: %v, want %v", got, all)
		}
		if err := s.New(); err != nil {
			t.Fatalf("New after migrating up again: %v", err)
		}
	}
}

// tables lists the store's tables, indexes and columns in DB ("table
// name", "index name", "column table.name"), without the migrator's own and SQLite's internal ones.
func tables(t *testing.T, s Schema) []string {
	t.Helper()
	q := map[migrate.Dialect]string{
		migrate.SQLite: `SELECT type || ' ' || name FROM sqlite_master WHERE type IN ('table', 'index')
			AND name NOT LIKE 'sqlite\_%' ESCAPE '\' AND tbl_name <> ?1
			UNION ALL SELECT 'column ' || m.name || '.' || c.name FROM sqlite_master m, pragma_table_info(m.name) c
			WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\_%' ESCAPE '\' AND m.name <> ?1`,
		migrate.Postgres: `SELECT 'table ' || tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename <> $1
			UNION ALL SELECT 'index ' || indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename <> $1
			UNION ALL SELECT 'column ' || table_name || '.' || column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name <> $1`,
	}[s.Dialect]
	rows, err := s.DB.Query(q, migrate.TableName)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}
