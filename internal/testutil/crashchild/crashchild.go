// Package crashchild runs a test binary again as a child process that
// kills itself with SIGKILL, and collects what it acknowledged before it
// died: the harness of the stores' group-commit crash tests.
package crashchild

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
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

// Die prints the InFlight line of keys through print (the child's output,
// already locked against other acknowledgements) and kills the process.
func Die(print func(line string), keys []string) {
	print(InFlight + strings.Join(keys, ","))
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not handled: the process ends here
}
