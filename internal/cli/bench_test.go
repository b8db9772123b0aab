package cli

import (
	"bufio"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestBench drives the three bench subcommands in-process, as the idem
// binary would: a ledger with a log, a run against it, a check that passes;
// then a check that fails against a non-deduplicating ledger.
func TestBench(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	startLedger := func(t *testing.T, args ...string) (url string, stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		var stderr strings.Builder
		done := make(chan int, 1)
		go func() {
			done <- Main(ctx, append([]string{"bench", "ledger", "--listen", "127.0.0.1:0"}, args...), pw, &stderr)
			pw.Close()
		}()
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		url, ok := strings.CutPrefix(strings.TrimSpace(line), "ledger listening on ")
		if !ok {
			t.Fatalf("ledger said %q", line)
		}
		return url, func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("ledger: exit %d: %s", code, stderr.String())
			}
		}
	}
	exec := func(args ...string) (int, string) {
		var out strings.Builder
		code := Main(context.Background(), append([]string{"bench"}, args...), &out, &out)
		return code, out.String()
	}

	log := filepath.Join(dir, "effects.jsonl")
	url, stop := startLedger(t, "--dedup", "--log", log)
	hist := filepath.Join(dir, "good.jsonl")
	code, out := exec("run", "--target", url+"/charge", "--keys", "30", "--dups", "3", "--clients", "6",
		"--principals", "2", "--conflict-share", "0.1", "--history", hist, "--retry-until-terminal")
	if code != 0 || !strings.Contains(out, "req/s") || !strings.Contains(out, "p99") {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	stop() // the check reads the fsynced log of a ledger that is gone
	code, out = exec("check", "--history", hist, "--effects", log)
	if code != 0 || !strings.Contains(out, "PASS") {
		t.Fatalf("check of a correct target: exit %d\n%s", code, out)
	}

	url, stop = startLedger(t)
	defer stop()
	hist = filepath.Join(dir, "bad.jsonl")
	if code, out := exec("run", "--target", url, "--keys", "10", "--dups", "2", "--history", hist, "--json"); code != 0 ||
		!strings.Contains(out, `"Throughput"`) {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	code, out = exec("check", "--history", hist, "--effects", url, "--max-violations", "2")
	if code != 1 || !strings.Contains(out, "[duplicate-effect]") || !strings.Contains(out, "idem: check: ") {
		t.Fatalf("check of a non-idempotent target: exit %d\n%s", code, out)
	}
	// A flag error is a usage error (exit 2), as for every idem command.
	if code, out := exec("run", "--keys", "many"); code != 2 || !strings.Contains(out, "idem: invalid argument") {
		t.Fatalf("bad flag: exit %d\n%s", code, out)
	}
}
