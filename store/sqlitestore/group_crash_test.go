package sqlitestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/crashchild"
	"github.com/idemhq/idem/store"
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
// printing each acknowledgement, and kills itself with SIGKILL when more
// than 50 groups have committed and a group of more than one write is
// about to commit.
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
	var (
		mu  sync.Mutex
		out = bufio.NewWriter(os.Stdout)
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	groupCommitting = func(keys []string) {
		if s.group.commits.Load() > 50 && len(keys) > 1 {
			mu.Lock() // no acknowledgement after this one
			crashchild.Die(func(line string) { fmt.Fprintln(out, line); _ = out.Flush() }, keys)
		}
	}
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	var n atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for range 16 {
		wg.Go(func() {
			for {
				k := prefix + strconv.FormatInt(n.Add(1), 10)
				owner := k + "-owner"
				res, err := s.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: []byte("f"), Owner: owner, Lease: time.Minute, Retention: time.Hour})
				if err != nil || !res.Claimed {
					fmt.Fprintln(os.Stderr, "claim", k, res, err)
					return
				}
				say("claimed %s", k)
				err = s.Complete(ctx, store.CompleteParams{Fence: store.Fence{Key: k, Epoch: res.Record.Epoch, Owner: owner},
					Response: []byte("r-" + k), Retention: time.Hour})
				if err != nil {
					fmt.Fprintln(os.Stderr, "complete", k, err)
					return
				}
				say("done %s", k)
			}
		})
	}
	wg.Wait()
	return 3 // out of work without being killed
}

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
	ctx := context.Background()
	step := map[string]store.State{}
	for _, line := range acked {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("child line %q", line)
		}
		rec, err := s.Get(ctx, f[1])
		if err != nil {
			t.Fatalf("%s was acknowledged (%s), and is lost: %v", f[1], f[0], err)
		}
		if rec.Epoch != 1 || rec.Owner != f[1]+"-owner" {
			t.Fatalf("%s: epoch %d owner %q: granted twice", f[1], rec.Epoch, rec.Owner)
		}
		want := store.StateProcessing
		if f[0] == "done" {
			want = store.StateDone
		}
		step[f[1]] = max(step[f[1]], want)
		if f[0] == "done" && (rec.State != store.StateDone || string(rec.Response) != "r-"+f[1]) {
			t.Fatalf("%s was acknowledged done, and is %+v", f[1], rec)
		}
	}
	// The group in flight was killed before its commit: none of its
	// writes took effect, so each key is as its acknowledgements left it.
	for _, k := range inflight {
		rec, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if step[k] != 0 {
				t.Fatalf("%s was acknowledged, and is lost", k)
			}
		case err != nil:
			t.Fatal(err)
		case rec.State != step[k]:
			t.Fatalf("%s is %v, acknowledged as %v: a write of the group killed before its commit took effect", k, rec.State, step[k])
		}
	}
	t.Logf("%d acknowledgements kept; the group in flight (%d writes) left nothing", len(acked), len(inflight))
}
