package sqlitestore

import (
	"go.uber.org/goleak"

	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// childEnv names the database file when the test binary runs as a child
// process of TestMultiProcessClaims.
const childEnv = "IDEM_SQLITESTORE_CHILD_DB"

const (
	childGoroutines = 16
	childKeys       = 16
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(childMain(path))
	}
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChildMain(path))
	}
	goleak.VerifyTestMain(m)
}

// claimLine is one claim answer reported by a child.
type claimLine struct {
	Key     string
	Owner   string // the claim's own owner token
	Claimed bool
	Winner  string // Record.Owner
	Epoch   int64
	Err     string
}

// childMain claims every key from childGoroutines goroutines once stdin
// closes (the parent's start signal) and prints each answer as JSON.
func childMain(path string) int {
	db, err := Open(path, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	s, err := New(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.Close()
	io.Copy(io.Discard, os.Stdin) // barrier: the parent closes stdin when all children run

	var (
		mu  sync.Mutex
		out = json.NewEncoder(os.Stdout)
		wg  sync.WaitGroup
		pid = os.Getpid()
	)
	for g := range childGoroutines {
		wg.Go(func() {
			for k := range childKeys {
				owner := fmt.Sprintf("%d-%d", pid, g)
				res, err := s.Claim(context.Background(), store.ClaimParams{
					Key: fmt.Sprint("key", k), Fingerprint: []byte("fp"), Owner: owner,
					Lease: time.Hour, Retention: time.Hour,
				})
				line := claimLine{Key: fmt.Sprint("key", k), Owner: owner, Claimed: res.Claimed, Winner: res.Record.Owner, Epoch: res.Record.Epoch}
				if err != nil {
					line.Err = err.Error()
				}
				mu.Lock()
				out.Encode(line)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return 0
}

// TestMultiProcessClaims runs four processes with 16 goroutines each, all
// claiming the same keys in one file: every key is granted exactly once,
// and every other answer names the winner.
func TestMultiProcessClaims(t *testing.T) {
	t.Parallel()
	_, path := openMigrated(t, nil)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	const procs = 4
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		lines []claimLine
		done  chan error
	}
	children := make([]*child, procs)
	for i := range children {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
		children[i] = c
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var l claimLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					c.done <- fmt.Errorf("bad line %q: %w", sc.Text(), err)
					return
				}
				c.lines = append(c.lines, l)
			}
			c.done <- sc.Err()
		}()
	}
	for _, c := range children {
		c.stdin.Close()
	}

	winners := map[string]string{}
	var all []claimLine
	for i, c := range children {
		if err := <-c.done; err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		if got, want := len(c.lines), childGoroutines*childKeys; got != want {
			t.Fatalf("child %d reported %d answers, want %d", i, got, want)
		}
		all = append(all, c.lines...)
	}
	for _, l := range all {
		if l.Err != "" {
			t.Fatalf("claim of %s by %s failed: %s", l.Key, l.Owner, l.Err)
		}
		if l.Claimed {
			if w, ok := winners[l.Key]; ok {
				t.Fatalf("%s granted twice: to %s and %s", l.Key, w, l.Owner)
			}
			winners[l.Key] = l.Owner
		}
	}
	if len(winners) != childKeys {
		t.Fatalf("%d keys granted, want %d", len(winners), childKeys)
	}
	for _, l := range all {
		if l.Winner != winners[l.Key] || l.Epoch != 1 {
			t.Fatalf("%s: %s saw owner %s epoch %d, want winner %s at epoch 1", l.Key, l.Owner, l.Winner, l.Epoch, winners[l.Key])
		}
	}
}
