package sqlitestore

import (
	"context"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/migrate"
	"github.com/idemhq/idem/internal/testutil/migratetest"
	"github.com/idemhq/idem/store"
)

// TestMigrateDownAndUp takes every migration down and up again; New
// refuses the file while one is down.
func TestMigrateDownAndUp(t *testing.T) {
	t.Parallel()
	db, _ := openMigrated(t, nil)
	migratetest.DownUp(t, migratetest.Schema{
		DB:         db,
		Dialect:    migrate.SQLite,
		Migrations: migrationsFS(),
		Migrate:    func(ctx context.Context) ([]store.Migration, error) { return Migrate(ctx, db) },
		New: func() error {
			s, err := New(db, nil)
			if err == nil {
				s.Close()
			}
			return err
		},
		NotMigrated: func(err error) bool { return strings.Contains(err.Error(), "run sqlitestore.Migrate") },
	})
}
