// Package crashchild runs a test binary again as a child process that
// loads a store and kills itself with SIGKILL while a group of writes is
// in flight, then checks the store against what the child acknowledged
// before it died: the harness of the stores' group-commit crash tests.
//
// The child side is a Child: Load claims and completes new keys, printing
// an acknowledgement after each write returns and before the next begins,
// as a server answers its client; the store's test hook calls Die with the
// keys of the group in flight. The parent side is Run, then Check.
package crashchild

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// InFlight prefixes the line a child prints, just before it kills itself,
// with the keys of the writes in flight, comma-separated.
const InFlight = "inflight "

// Run runs the test binary again with run as its -test.run pattern and
// env added to its environment, reads its standard output until it dies,
// and returns every line it printed (its acknowledgements) and the keys of
// its InFlight line. It fails tb unless the child ended by SIGKILL.
func Run(tb testing.TB, run string, env ...string) (acked, inflight []string) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if k, ok := strings.CutPrefix(sc.Text(), InFlight); ok {
			inflight = strings.Split(k, ",")
			continue
		}
		acked = append(acked, sc.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		tb.Fatalf("child ended with %v, want SIGKILL\n%s", err, stderr.String())
	}
	return acked, inflight
}

// Child is the child process's side: it acknowledges writes on standard
// output and dies. Its zero value is not usable; use NewChild.
type Child struct {
	mu  sync.Mutex
	out *bufio.Writer
}

// NewChild returns a Child writing to standard output.
func NewChild() *Child { return &Child{out: bufio.NewWriter(os.Stdout)} }

func (c *Child) say(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintln(c.out, line)
	_ = c.out.Flush()
}

// Die prints the InFlight line of keys and kills the process. No
// acknowledgement is printed after it: a write that returns meanwhile was
// never answered.
func (c *Child) Die(keys []string) {
	c.mu.Lock() // held until the end: nothing is acknowledged after this
	fmt.Fprintln(c.out, InFlight+strings.Join(keys, ","))
	_ = c.out.Flush()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not handled: the process ends here
}

// Load claims and completes new keys on s from clients goroutines until
// the process dies, acknowledging each claim ("claimed KEY") and each
// completion ("done KEY") once it returned. Each key's owner is KEY+"-owner"
// and its response "r-"+KEY, which Check relies on. Load returns only when
// a write fails, with that failure.
func (c *Child) Load(ctx context.Context, s store.Store, clients int) error {
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	var n atomic.Int64
	errs := make(chan error, clients)
	for range clients {
		go func() {
			for {
				k := prefix + strconv.FormatInt(n.Add(1), 10)
				owner := k + "-owner"
				res, err := s.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: []byte("f"), Owner: owner, Lease: time.Minute, Retention: time.Hour})
				if err != nil || !res.Claimed {
					errs <- fmt.Errorf("claim %s: %+v, %w", k, res, err)
					return
				}
				c.say("claimed " + k)
				err = s.Complete(ctx, store.CompleteParams{Fence: store.Fence{Key: k, Epoch: res.Record.Epoch, Owner: owner},
					Response: []byte("r-" + k), Retention: time.Hour})
				if err != nil {
					errs <- fmt.Errorf("complete %s: %w", k, err)
					return
				}
				c.say("done " + k)
			}
		}()
	}
	return <-errs
}

// Check checks s, after the child that loaded it died, against the child's
// acknowledgements: every acknowledged claim and completion is there, and
// no key was granted twice. It returns how many writes of the group in
// flight took effect; the caller knows whether that must be none (killed
// before the commit) or none or all (killed with the commit on its way).
func Check(tb testing.TB, s store.Store, acked, inflight []string) (applied int) {
	tb.Helper()
	ctx := context.Background()
	step := map[string]store.State{}
	for _, line := range acked {
		f := strings.Fields(line)
		if len(f) != 2 || (f[0] != "claimed" && f[0] != "done") {
			tb.Fatalf("child line %q", line)
		}
		rec, err := s.Get(ctx, f[1])
		if err != nil {
			tb.Fatalf("%s was acknowledged (%s), and is lost: %v", f[1], f[0], err)
		}
		if rec.Epoch != 1 || rec.Owner != f[1]+"-owner" {
			tb.Fatalf("%s: epoch %d owner %q: granted twice", f[1], rec.Epoch, rec.Owner)
		}
		want := store.StateProcessing
		if f[0] == "done" {
			want = store.StateDone
			if rec.State != store.StateDone || string(rec.Response) != "r-"+f[1] {
				tb.Fatalf("%s was acknowledged done, and is %+v", f[1], rec)
			}
		}
		step[f[1]] = max(step[f[1]], want)
	}
	// Each write in flight is the next step of its key after what was
	// acknowledged, so it took effect when the key moved past that.
	for _, k := range inflight {
		rec, err := s.Get(ctx, k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			if step[k] != 0 {
				tb.Fatalf("%s was acknowledged, and is lost", k)
			}
		case err != nil:
			tb.Fatal(err)
		case rec.State > step[k]:
			applied++
		}
	}
	return applied
}
