package pgstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testutil/crashchild"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store"
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
		checkAfterCrash(t, pool, acked, inflight)
	}
}

// crashChild claims and completes new keys from 16 goroutines on the
// schema, printing each acknowledgement, and kills itself with SIGKILL
// once more than 50 groups have committed and a group of more than one
// write is in flight.
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
	var (
		mu  sync.Mutex
		out = bufio.NewWriter(os.Stdout)
	)
	// say writes a line to the parent before the write it acknowledges
	// returns to its caller, as a server answers a client.
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	pgstore.OnGroupSent(func(keys []string) {
		if c, _ := pgstore.GroupStats(s); c > 50 && len(keys) > 1 {
			mu.Lock() // no acknowledgement after this one
			crashchild.Die(func(line string) { fmt.Fprintln(out, line); _ = out.Flush() }, keys)
		}
	})
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	var n atomic.Int64
	var wg sync.WaitGroup
	ctx := context.Background()
	for range 16 {
		wg.Go(func() {
			for {
				k := prefix + strconv.FormatInt(n.Add(1), 10)
				res, err := s.Claim(ctx, params(k, "f"))
				if err != nil || !res.Claimed {
					t.Errorf("claim %s: %+v, %v", k, res, err)
					return
				}
				say("claimed %s %x", k, res.Record.Owner)
				err = s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res), Response: []byte("r-" + k), Retention: time.Hour})
				if err != nil {
					t.Errorf("complete %s: %v", k, err)
					return
				}
				say("done %s %x", k, res.Record.Owner)
			}
		})
	}
	wg.Wait()
	t.Fatal("the child ran out of work without being killed")
}

// checkAfterCrash checks the records against the child's acknowledgements
// and the group in flight.
func checkAfterCrash(t *testing.T, pool *pgxpool.Pool, acked, inflight []string) {
	t.Helper()
	ctx := context.Background()
	s := newStore(t, pool, nil)
	for _, line := range acked {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("child line %q", line)
		}
		rec, err := s.Get(ctx, f[1])
		if err != nil {
			t.Fatalf("%s was acknowledged (%s), and is lost: %v", f[1], f[0], err)
		}
		if rec.Epoch != 1 || fmt.Sprintf("%x", rec.Owner) != f[2] {
			t.Fatalf("%s: epoch %d owner %x, want epoch 1 owner %s: granted twice", f[1], rec.Epoch, rec.Owner, f[2])
		}
		if f[0] == "done" && (rec.State != store.StateDone || string(rec.Response) != "r-"+f[1]) {
			t.Fatalf("%s was acknowledged done, and is %+v", f[1], rec)
		}
	}
	// The group in flight: its writes took effect together or not at all.
	// Each write of it is the next step of its key after what was
	// acknowledged, so it took effect when the key moved past that.
	step := map[string]int{}
	for _, line := range acked {
		f := strings.Fields(line)
		if f[0] == "claimed" {
			step[f[1]] = max(step[f[1]], 1)
		} else {
			step[f[1]] = 2
		}
	}
	applied := 0
	for _, k := range inflight {
		rec, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if step[k] != 0 {
				t.Fatalf("%s was acknowledged, and is lost", k)
			}
		case err != nil:
			t.Fatal(err)
		case int(rec.State) > step[k]: // state 1 after a claim, 2 after a completion
			applied++
		}
	}
	if applied != 0 && applied != len(inflight) {
		t.Fatalf("the group in flight (%d writes) took effect for %d of them: a group is one transaction", len(inflight), applied)
	}
	t.Logf("%d acknowledgements kept; the group in flight (%d writes) took effect: %v", len(acked), len(inflight), applied > 0)
}
