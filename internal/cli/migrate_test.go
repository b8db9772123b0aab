package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMigrateSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	code, out, stderr := run(t, "migrate", "--store", "sqlite:"+path)
	if code != 0 || !strings.Contains(out, "applied 1") {
		t.Fatalf("first migrate: code %d out %q err %q", code, out, stderr)
	}
	code, out, _ = run(t, "migrate", "--store", "sqlite:"+path)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: code %d out %q", code, out)
	}
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.New(db, nil); err != nil {
		t.Fatalf("store refuses the migrated file: %v", err)
	}
}

func TestMigratePostgres(t *testing.T) {
	t.Parallel()
	pool := testdb.Postgres(t)
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	// Unasked, the store refuses to run on the empty schema.
	if _, err := pgstore.New(pool, nil); err == nil {
		t.Fatal("pgstore started on an unmigrated schema")
	}
	url := testdb.PostgresURL() + "&search_path=" + schema
	code, out, stderr := run(t, "migrate", "--store", url)
	if code != 0 || !strings.Contains(out, "applied 1") {
		t.Fatalf("migrate: code %d out %q err %q", code, out, stderr)
	}
	fresh, err := pgxpool.NewWithConfig(context.Background(), pool.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := pgstore.New(fresh, nil); err != nil {
		t.Fatalf("store refuses the migrated schema: %v", err)
	}
}

func TestMigrateBadStore(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate", "--store", "mysql://x"},
		{"migrate", "--store", "sqlite:"},
		{"migrate", "--nope"},
	} {
		if code, _, stderr := run(t, args...); code != 2 || stderr == "" {
			t.Errorf("%v: code %d stderr %q, want usage error", args, code, stderr)
		}
	}
	if code, out, _ := run(t, "migrate", "--store", "memory:"); code != 0 || !strings.Contains(out, "nothing to migrate") {
		t.Errorf("memory: code %d out %q", code, out)
	}
}
