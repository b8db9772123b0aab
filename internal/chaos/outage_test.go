package chaos

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/loadtest"
)

// The outage scenario: the store fails for a while, again and again, while
// keyed requests are at a slow upstream that does NOT dedup on the
// forwarded key, so every request that reaches it is an effect. An upstream
// answer that arrives during an outage cannot be recorded; the proxy must
// keep the key held and record it once the store is back, so that the
// client's retries (503, 409: same key, until terminal) get the replay
// instead of running the request again. No proxy is killed here: a proxy
// that dies holding an unrecorded answer legitimately lets the key run
// again once the lease ends.

// outageSize is one version of the outage test.
type outageSize struct {
	// duration is the main phase; keys are sent at keysPerSecond over it.
	duration      time.Duration
	keysPerSecond int
	// outage is how long store writes fail each time; gap the time between
	// the end of one outage and the start of the next.
	outage, gap time.Duration
	// lease is the proxies' --lease: longer than a store write can stall
	// (stall) by outageLeaseMargin, and shorter than the clients' retries,
	// so that without the fix the retry after the lease runs the key again.
	lease time.Duration
}

// outageLeaseMargin is what a key's lease has left when the store is back:
// time for the proxies to reconnect and record the outcome. An outage that
// outlasts the lease lets another process take the key over (the store's
// lease is all that holds a key across processes), which no proxy can
// prevent; with a lease barely longer than the outage (2 s for 1.5 s) the
// proxies' reconnection after the outage (about 0.4 s on PostgreSQL) already
// loses that race for some keys.
const outageLeaseMargin = 3500 * time.Millisecond

func newOutageSize(duration time.Duration, keysPerSecond int, outage, gap, stall time.Duration) outageSize {
	return outageSize{duration: duration, keysPerSecond: keysPerSecond, outage: outage, gap: gap,
		lease: stall + outageLeaseMargin}
}

const (
	outageDups    = 3
	outageClients = 48
	// outageUpstreamDelay keeps several keyed requests at the upstream at
	// any moment, so that each outage starts in the middle of some.
	outageUpstreamDelay = 300 * time.Millisecond
	// outageRetryFor is how long a client retries one request: well beyond
	// the lease, so that a key the proxy let go of runs again.
	outageRetryFor = time.Minute
	// outageFirst is when the first outage starts.
	outageFirst = 1500 * time.Millisecond
)

func currentOutageSize(sqlite bool) outageSize {
	const outage = 1500 * time.Millisecond
	// On SQLite a write that starts during the outage fails only after the
	// busy timeout, and one that starts later waits for the lock: writes
	// stall for the busy timeout plus the outage.
	switch {
	case *long && sqlite:
		return newOutageSize(60*time.Second, 15, outage, 2500*time.Millisecond, sqliteBusyTimeout+outage)
	case *long:
		return newOutageSize(60*time.Second, 25, outage, 2500*time.Millisecond, outage)
	case sqlite:
		// Each SQLite outage stalls every write for the busy timeout, and
		// the clients catch up after it: two outages and fewer keys.
		return newOutageSize(26*time.Second, 15, outage, 1500*time.Millisecond, sqliteBusyTimeout+outage)
	default:
		return newOutageSize(12*time.Second, 25, outage, 2500*time.Millisecond, outage)
	}
}

// TestOutageSQLite: another connection holds the database's write lock
// (BEGIN EXCLUSIVE) for the busy timeout and 1.5 s more: the proxies'
// writes that start in those 1.5 s fail.
func TestOutageSQLite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "idem.db")
	st := "sqlite:" + path
	if out, err := exec.Command(idemBin, "migrate", "--store", st).CombinedOutput(); err != nil {
		t.Fatalf("idem migrate: %v\n%s", err, out)
	}
	runOutages(t, st, openSQLiteLock(t, path), currentOutageSize(true))
}

// TestOutagePostgres: the proxies reach PostgreSQL through a TCP proxy that
// cuts every connection and refuses new ones for 1.5 s.
func TestOutagePostgres(t *testing.T) {
	u := postgresSchemaURL(t)
	fault := startTCPFault(t, u.Host)
	u.Host = fault.addr()
	runOutages(t, u.String(), fault, currentOutageSize(false))
}

// TestOutageRedis: the test's own Redis (append-only file, fsync always) is
// SIGKILLed, and restarted 1.5 s later on the same port from its file.
func TestOutageRedis(t *testing.T) {
	r := startRedis(t)
	runOutages(t, "redis://"+r.addr+"/0", r, currentOutageSize(false))
}

func runOutages(t *testing.T, storeURL string, o storeOutage, sz outageSize) {
	// The ledger's log, the history and the proxies' logs stay for a look
	// when the test fails.
	dir, err := os.MkdirTemp("", "idem-"+t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			os.RemoveAll(dir)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), sz.duration+5*time.Minute)
	defer cancel()

	ledgerLog := filepath.Join(dir, "ledger.jsonl")
	ledger, err := loadtest.StartLedger(&loadtest.LedgerConfig{
		Listen: "127.0.0.1:0", Log: ledgerLog, Delay: outageUpstreamDelay, // no Dedup: every request is an effect
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()

	args := []string{"proxy", "--upstream", ledger.URL(), "--store", storeURL,
		"--lease", sz.lease.String(), "--upstream-timeout", "5s", "--log-level", "info"}
	procs := make([]*proxyProc, 4)
	targets := make([]string, len(procs))
	logs := make([]string, len(procs))
	for i := range procs {
		logs[i] = filepath.Join(dir, fmt.Sprintf("proxy%d.log", i))
		procs[i] = &proxyProc{t: t, args: args, addr: freeAddr(t), log: logs[i]}
		procs[i].start()
		targets[i] = "http://" + procs[i].addr
	}
	stopped := false
	stopProxies := func() {
		if !stopped {
			stopped = true
			for _, p := range procs {
				p.stop()
			}
		}
	}
	defer stopProxies()

	// The outages, during the main phase: the sleeps are the schedule.
	start := time.Now()
	var windows []window
	var outageErr error
	var outages sync.WaitGroup
	outages.Go(func() {
		next := start.Add(outageFirst)
		for next.Before(start.Add(sz.duration - sz.outage)) {
			time.Sleep(time.Until(next))
			w, err := o.cause(sz.outage)
			if err != nil {
				outageErr = err
				return
			}
			windows = append(windows, w)
			next = time.Now().Add(sz.gap)
		}
	})

	keys := int(sz.duration.Seconds()) * sz.keysPerSecond
	history := filepath.Join(dir, "history.jsonl")
	rep, err := loadtest.Run(ctx, &loadtest.RunConfig{
		Targets:       targets,
		Keys:          keys,
		Dups:          outageDups,
		Clients:       outageClients,
		ConflictShare: 0.05,
		Principals:    3,
		History:       history,
		Duration:      sz.duration,
		// A SQLite write waits out the busy timeout before the proxy
		// answers: the clients wait longer.
		RequestTimeout: 3 * sqliteBusyTimeout,
		// Clients retry 503 and 409 with the same key until terminal.
		RetryFor:           outageRetryFor,
		MaxRetryAfter:      500 * time.Millisecond,
		RetryUntilTerminal: true,
		DrainTimeout:       2 * time.Minute,
	})
	outages.Wait()
	if outageErr != nil {
		t.Fatalf("outage: %v", outageErr)
	}
	if err != nil {
		t.Fatalf("bench run: %v", err)
	}
	stopProxies()
	var runText strings.Builder
	rep.WriteText(&runText)
	t.Logf("store %s\n%s", redact(storeURL), runText.String())
	t.Logf("proxy logs:\n%s", summarizeLogs(logs))

	check, err := loadtest.Check(ctx, &loadtest.CheckConfig{History: history, Effects: ledgerLog})
	if err != nil {
		t.Fatalf("bench check: %v", err)
	}
	var checkText strings.Builder
	check.WriteText(&checkText, 20)
	t.Logf("check:\n%s", checkText.String())

	effects, err := loadtest.ReadEffectsFile(ledgerLog)
	if err != nil {
		t.Fatal(err)
	}
	hist, err := loadtest.ReadHistory(history)
	if err != nil {
		t.Fatal(err)
	}
	caught, extra := effectsDuring(effects, windows)
	unavailable := 0
	for _, r := range hist {
		if r.Type == loadtest.TypeOK && r.Status == 503 && strings.HasSuffix(r.ProblemType, "/store-unavailable") {
			unavailable++
		}
	}
	var ws []string
	for _, w := range windows {
		ws = append(ws, fmt.Sprintf("%.1f-%.1fs", w.from.Sub(start).Seconds(), w.to.Sub(start).Seconds()))
	}
	t.Logf("%d outages (store writes failing at %s); %d keys, %d requests (%d retries, %d in the drain); "+
		"%d answers 503 store-unavailable; %d effects, %d of them made while the store was failing; "+
		"%d keys ran more than once (%d extra effects)",
		len(windows), strings.Join(ws, ", "), keys, rep.Requests+rep.DrainRequests, rep.Retries, rep.DrainRequests,
		unavailable, check.Effects, caught, check.Counts[loadtest.CheckDuplicateEffect], extra)

	if !check.OK() {
		t.Fatalf("outage invariants broken (proxy logs in %s)", dir)
	}
	if len(windows) == 0 {
		t.Fatal("no outage happened")
	}
	if caught == 0 {
		t.Fatal("no upstream call ended while the store was failing: the test proved nothing")
	}
	if rep.DrainUnresolved != 0 {
		t.Fatalf("%d keys not terminal after the drain", rep.DrainUnresolved)
	}
}

// effectsDuring counts the effects the ledger made inside a window (their
// answers reached the proxy while the store was failing), and the effects
// beyond the first of each scope.
func effectsDuring(effects []loadtest.Effect, windows []window) (caught, extra int) {
	seen := map[[2]string]bool{}
	for _, e := range effects {
		if e.Kind != loadtest.KindEffect {
			continue
		}
		k := [2]string{e.Principal, e.Key}
		if seen[k] {
			extra++
		}
		seen[k] = true
		if slices.ContainsFunc(windows, func(w window) bool { return !e.Time.Before(w.from) && !e.Time.After(w.to) }) {
			caught++
		}
	}
	return caught, extra
}

var (
	logMsg = regexp.MustCompile(`level=(\S+) msg=("(?:[^"\\]|\\.)*"|\S+)`)
	// logDate is the date of a line from the standard logger (go-redis's).
	logDate = regexp.MustCompile(`\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(\.\d+)? `)
)

// summarizeLogs counts the proxies' log lines by level and message.
func summarizeLogs(paths []string) string {
	counts := map[string]int{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			counts["(unreadable: "+err.Error()+")"]++
			continue
		}
		for line := range strings.Lines(string(b)) {
			if m := logMsg.FindStringSubmatch(line); m != nil {
				counts[m[1]+" "+m[2]]++
			} else if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "proxy listening on ") {
				counts[logDate.ReplaceAllString(line, "")]++
			}
		}
	}
	type row struct {
		msg string
		n   int
	}
	var rows []row
	for m, n := range counts {
		rows = append(rows, row{m, n})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.msg, b.msg)) })
	var out strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&out, "  %6d  %s\n", r.n, r.msg)
	}
	if out.Len() == 0 {
		return "  (empty)\n"
	}
	return out.String()
}
