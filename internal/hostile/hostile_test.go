package hostile

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/procstat"
)

var attackers = flag.Int("hostile.n", 300, "how many stalled bodies to hold against the proxy")

// idemBin is the idem binary under attack, built once by TestMain (without
// the race detector, so that its memory is what users see).
var idemBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "idem-hostile")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	idemBin = filepath.Join(dir, "idem")
	if out, err := exec.Command("go", "build", "-o", idemBin, "github.com/idemhq/idem/cmd/idem").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "hostile: building idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proxy starts `idem proxy` on SQLite in front of upstream and returns its
// address and process.
func proxy(t *testing.T, upstream string, args ...string) (string, *os.Process) {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{"proxy", "--upstream", upstream, "--store", "sqlite:" + filepath.Join(dir, "idem.db"),
		"--migrate", "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
	cmd := exec.Command(idemBin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "proxy listening on http://"); ok {
			go io.Copy(io.Discard, out)
			return addr, cmd.Process
		}
	}
	t.Fatalf("idem proxy did not start: %v", sc.Err())
	return "", nil
}

// latencies sends n keyed POSTs with small bodies one after the other, as
// an ordinary client, and returns their latencies; every one must succeed.
func latencies(t *testing.T, addr, prefix string, n int) []time.Duration {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	out := make([]time.Duration, 0, n)
	for i := range n {
		req, _ := http.NewRequest("POST", "http://"+addr+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Authorization", "Bearer ordinary")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", prefix, i))
		start := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("ordinary request %d: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		out = append(out, time.Since(start))
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("ordinary request %d: %d, want 201", i, res.StatusCode)
		}
	}
	slices.Sort(out)
	return out
}

func pct(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }

// Clients that declare a 1 MiB body, send all of it but the last byte and
// hold the connection, each with a made-up Authorization, must not exhaust
// the proxy's memory (once, 300 of them took 517 MB): the memory budget
// refuses bodies it cannot hold (503 server-busy; the refused reconnect
// after Retry-After) and the body deadline ends the stalled ones. An
// ordinary client goes on being served throughout.
func TestStalledBodies(t *testing.T) {
	var effects atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		effects.Add(1) // not idempotent: every request it reads is an effect
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charged":true}`)
	}))
	defer up.Close()
	addr, proc := proxy(t, up.URL)

	latencies(t, addr, "warm", 50) // connections, SQLite's cache: not part of the baseline
	before := latencies(t, addr, "before", 200)
	rssBefore, _ := procstat.PidRSSMiB(proc.Pid)

	const declared = 1 << 20
	junk := bytes.Repeat([]byte("x"), declared-1) // one buffer: the attackers must not cost more than the proxy
	stop := make(chan struct{})
	var (
		wg                sync.WaitGroup
		refused, attempts atomic.Int64
		connsMu           sync.Mutex
		conns             []net.Conn
	)
	for i := range *attackers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				connsMu.Lock()
				conns = append(conns, c)
				connsMu.Unlock()
				attempts.Add(1)
				fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer made-up-%d\r\n"+
					"Idempotency-Key: stall-%d-%d\r\nContent-Length: %d\r\n\r\n", i, i, n, declared)
				// A body the proxy will not hold is refused at once, by its
				// declared length: read that answer before sending it.
				br := bufio.NewReader(c)
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					c.SetReadDeadline(time.Time{})
					_, _ = c.Write(junk) // all but the last byte; then hold
					res, err = http.ReadResponse(br, nil)
				}
				c.Close()
				if err == nil && res.StatusCode == http.StatusServiceUnavailable {
					refused.Add(1)
				}
				select { // as Retry-After says
				case <-stop:
					return
				case <-time.After(time.Second):
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // the attack's schedule: let it build up
	during := latencies(t, addr, "during", 200)
	rssDuring, _ := procstat.PidRSSMiB(proc.Pid)
	close(stop)
	connsMu.Lock()
	for _, c := range conns {
		c.Close()
	}
	connsMu.Unlock()
	wg.Wait()
	peak, err := procstat.PidPeakRSSMiB(proc.Pid)
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("%d stalled 1 MiB bodies (%d attempts, %d refused with 503): proxy RSS %.1f MiB before, %.1f during, peak %.1f",
		*attackers, attempts.Load(), refused.Load(), rssBefore, rssDuring, peak)
	t.Logf("ordinary client p50 %v -> %v (x%.2f), p99 %v -> %v (x%.2f)",
		pct(before, .5), pct(during, .5), float64(pct(during, .5))/float64(pct(before, .5)),
		pct(before, .99), pct(during, .99), float64(pct(during, .99))/float64(pct(before, .99)))
	if peak >= 128 {
		t.Fatalf("the proxy's resident memory peaked at %.1f MiB under stalled bodies, want < 128", peak)
	}
	if refused.Load() == 0 {
		t.Fatal("no stalled body was refused: the budget did not act")
	}
	if n := effects.Load(); n != 450 {
		t.Fatalf("upstream saw %d effects, want the ordinary client's 450 (no stalled body is forwarded)", n)
	}
}
