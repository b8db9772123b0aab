package chaos

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/loadtest"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store/pgstore"
)

var long = flag.Bool("chaos.long", false, "run the long versions: chaos, 10,000 requests over 2,000 keys, a kill every 2 s for 60 s; outages, 60 s of them")

// idemBin is the idem binary the proxies run, built once by TestMain.
var idemBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "idem-chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	idemBin = filepath.Join(dir, "idem")
	out, err := exec.Command("go", "build", "-o", idemBin, "github.com/idemhq/idem/cmd/idem").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: building idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// size is one version of the test.
type size struct {
	keys, dups, clients int
	duration, killEvery time.Duration
}

func currentSize() size {
	if *long {
		return size{keys: 2000, dups: 5, clients: 32, duration: 60 * time.Second, killEvery: 2 * time.Second}
	}
	return size{keys: 150, dups: 4, clients: 12, duration: 5 * time.Second, killEvery: time.Second}
}

func TestChaosSQLite(t *testing.T) {
	dir := t.TempDir()
	st := "sqlite:" + filepath.Join(dir, "idem.db")
	if out, err := exec.Command(idemBin, "migrate", "--store", st).CombinedOutput(); err != nil {
		t.Fatalf("idem migrate: %v\n%s", err, out)
	}
	runChaos(t, st)
}

func TestChaosPostgres(t *testing.T) {
	runChaos(t, postgresSchemaURL(t).String())
}

// postgresSchemaURL migrates a schema of the test's own (testdb) and returns
// the server's URL with that schema as its search_path.
func postgresSchemaURL(t *testing.T) *url.URL {
	t.Helper()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return schemaURL(t, pool)
}

// schemaURL is the server's URL with pool's schema as its search_path.
func schemaURL(t *testing.T, pool *pgxpool.Pool) *url.URL {
	t.Helper()
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testdb.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u
}

func TestChaosRedis(t *testing.T) {
	prefix := testdb.RedisPrefix(t)
	// This machine's Redis keeps nothing on disk: the proxies must be told
	// so explicitly, as an operator would.
	runChaos(t, "redis://"+testdb.RedisAddr()+"/0", "--allow-non-durable", "--redis-prefix", prefix)
}

// runChaos runs one chaos round against the store and checks the result.
func runChaos(t *testing.T, storeURL string, extra ...string) {
	sz := currentSize()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), sz.duration+5*time.Minute)
	defer cancel()

	ledgerLog := filepath.Join(dir, "ledger.jsonl")
	ledger, err := loadtest.StartLedger(&loadtest.LedgerConfig{
		Listen: "127.0.0.1:0", Dedup: true, Log: ledgerLog,
		// A slow upstream keeps requests in flight inside the proxies, so that
		// kills land between "sent upstream" and "answer stored".
		Delay: 30 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()

	const lease = time.Second
	args := append([]string{"proxy", "--upstream", ledger.URL(), "--store", storeURL,
		"--lease", lease.String(), "--upstream-timeout", "2s", "--log-level", "warn"}, extra...)
	procs := make([]*proxyProc, 4)
	targets := make([]string, len(procs))
	for i := range procs {
		procs[i] = &proxyProc{t: t, args: args, addr: freeAddr(t), log: filepath.Join(dir, fmt.Sprintf("proxy%d.log", i))}
		procs[i].start()
		targets[i] = "http://" + procs[i].addr
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()

	// The killer: one proxy at a time, SIGKILL at random moments (mean
	// killEvery), restarted at once, for the main phase only.
	killCtx, stopKills := context.WithTimeout(ctx, sz.duration)
	var kills int
	var killer sync.WaitGroup
	killer.Go(func() {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		for {
			wait := sz.killEvery/2 + time.Duration(r.Int64N(int64(sz.killEvery)))
			select {
			case <-killCtx.Done():
				return
			case <-time.After(wait):
			}
			procs[r.IntN(len(procs))].kill()
			kills++
		}
	})

	history := filepath.Join(dir, "history.jsonl")
	rep, err := loadtest.Run(ctx, &loadtest.RunConfig{
		Targets:            targets,
		Keys:               sz.keys,
		Dups:               sz.dups,
		Clients:            sz.clients,
		ConflictShare:      0.1,
		Principals:         3,
		History:            history,
		RetryUntilTerminal: true,
		Duration:           sz.duration,
		DrainTimeout:       2*time.Minute + 10*lease,
	})
	stopKills()
	killer.Wait()
	if err != nil {
		t.Fatalf("bench run: %v", err)
	}
	var runText strings.Builder
	rep.WriteText(&runText)
	t.Logf("store %s, %d kills\n%s", redact(storeURL), kills, runText.String())

	peak := 0
	for _, p := range procs {
		peak = max(peak, p.peakRSS())
	}
	t.Logf("proxy peak resident memory: %.1f MiB", float64(peak)/(1<<20))
	if peak > 128<<20 {
		t.Errorf("a proxy reached %.1f MiB resident, over the 128 MiB budget", float64(peak)/(1<<20))
	}

	check, err := loadtest.Check(ctx, &loadtest.CheckConfig{History: history, Effects: ledgerLog, Proxied: true})
	if err != nil {
		t.Fatalf("bench check: %v", err)
	}
	var checkText strings.Builder
	check.WriteText(&checkText, 20)
	t.Logf("check:\n%s", checkText.String())
	if !check.OK() {
		t.Fatalf("chaos invariants broken (proxy logs in %s)", dir)
	}
	if kills == 0 {
		t.Fatal("no proxy was killed: the test proved nothing about crashes")
	}
	if rep.DrainUnresolved != 0 {
		t.Fatalf("%d keys not terminal after the drain", rep.DrainUnresolved)
	}
}

// proxyProc is one `idem proxy` process, restarted on the same address.
type proxyProc struct {
	t    *testing.T
	args []string
	addr string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	peak int // highest VmHWM seen, bytes
}

func (p *proxyProc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(idemBin, append(p.args, "--listen", p.addr)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	f.Close()
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	// Wait until it accepts connections (a signal, not a sleep: each dial
	// either connects or fails at once).
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("proxy on %s did not start: %v (log %s)", p.addr, err, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL, reaps the process and starts a new one.
func (p *proxyProc) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	p.sampleRSS(cmd)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	p.start()
}

func (p *proxyProc) stop() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	p.sampleRSS(cmd)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// sampleRSS records the process's peak resident set (VmHWM) so far.
func (p *proxyProc) sampleRSS(cmd *exec.Cmd) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err == nil {
				p.mu.Lock()
				p.peak = max(p.peak, kb<<10)
				p.mu.Unlock()
			}
		}
	}
}

func (p *proxyProc) peakRSS() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User(u.User.Username())
		return u.String()
	}
	return s
}
