package pgstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testutil/crashchild"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store/pgstore"
)

// crashChildEnv names the schema a crash child works in; set, the test
// binary runs as the child of TestGroupCommitCrash.
const crashChildEnv = "IDEM_PGSTORE_CRASH_CHILD"

// TestGroupCommitCrash kills a process with SIGKILL while a group of
// writes is in flight (its pipeline sent, its results unread), then checks
// the database against what the process acknowledged before it died:
// every acknowledged claim and completion is there, no key was granted
// twice, and the group in flight took effect whole or not at all.
func TestGroupCommitCrash(t *testing.T) {
	if schema := os.Getenv(crashChildEnv); schema != "" {
		crashChild(t, schema)
		return
	}
	pool := migratedPool(t)
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		acked, inflight := crashchild.Run(t, "^TestGroupCommitCrash$", crashChildEnv+"="+schema)
		if len(inflight) < 2 {
			t.Fatalf("round %d: the child died with %d writes in flight, want a group", round, len(inflight))
		}
		// The pipeline was sent: PostgreSQL may have committed it before the
		// connection dropped, but only whole.
		applied := crashchild.Check(t, newStore(t, pool, nil), acked, inflight)
		if applied != 0 && applied != len(inflight) {
			t.Fatalf("the group in flight (%d writes) took effect for %d of them: a group is one transaction", len(inflight), applied)
		}
		t.Logf("round %d: %d acknowledgements kept; the group in flight (%d writes) took effect: %v", round, len(acked), len(inflight), applied > 0)
	}
}

// crashChild claims and completes new keys from 16 goroutines on the
// schema, acknowledging each, and kills itself with SIGKILL once more than
// 50 groups have committed and a group of more than one write is in flight.
func crashChild(t *testing.T, schema string) {
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	child := crashchild.NewChild()
	pgstore.OnGroupSent(func(keys []string) {
		if c, _ := pgstore.GroupStats(s); c > 50 && len(keys) > 1 {
			child.Die(keys)
		}
	})
	t.Fatalf("the child stopped without being killed: %v", child.Load(context.Background(), s, 16))
}
