package sqlitestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/internal/testutil/crashchild"
)

// crashChildEnv names the database file when the test binary runs as the
// child of TestGroupCommitCrash.
const crashChildEnv = "IDEM_SQLITESTORE_CRASH_CHILD_DB"

// TestGroupCommitCrash kills a process with SIGKILL while a group of
// writes is in flight (its writes run, its commit not yet made), three
// times, then checks the file against what the process acknowledged before
// it died: every acknowledged claim and completion is there, no key was
// granted twice, and nothing of the group in flight took effect.
func TestGroupCommitCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for round := range 3 {
		acked, inflight := crashchild.Run(t, "^$", crashChildEnv+"="+path)
		if len(inflight) < 2 {
			t.Fatalf("round %d: the child died with %d writes in flight, want a group", round, len(inflight))
		}
		checkAfterCrash(t, path, acked, inflight)
	}
}

// crashChildMain claims and completes new keys from 16 goroutines,
// acknowledging each, and kills itself with SIGKILL when more than 50
// groups have committed and a group of more than one write is about to
// commit.
func crashChildMain(path string) int {
	db, err := Open(path, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	s, err := New(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	child := crashchild.NewChild()
	groupCommitting = func(keys []string) {
		if s.group.commits.Load() > 50 && len(keys) > 1 {
			child.Die(keys)
		}
	}
	fmt.Fprintln(os.Stderr, "the child stopped without being killed:", child.Load(context.Background(), s, 16))
	return 3
}

// checkAfterCrash checks the file after a child died: the group in flight
// was killed before its commit, so none of its writes took effect.
func checkAfterCrash(t *testing.T, path string, acked, inflight []string) {
	t.Helper()
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if applied := crashchild.Check(t, s, acked, inflight); applied != 0 {
		t.Fatalf("%d writes of the group killed before its commit took effect", applied)
	}
	t.Logf("%d acknowledgements kept; the group in flight (%d writes) left nothing", len(acked), len(inflight))
}
