package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store/sqlitestore"
)

// lines is an io.Writer, safe for concurrent use, that keeps what was
// written and passes on each complete line.
type lines struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	next int
	ch   chan string
}

func newLines() *lines { return &lines{ch: make(chan string, 256)} }

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		rest := l.buf.Bytes()[l.next:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return len(p), nil
		}
		select {
		case l.ch <- string(rest[:i]):
		default:
		}
		l.next += i + 1
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// running is an `idem proxy` started in-process.
type running struct {
	proxy, admin string // base URLs
	stderr       *lines
	cancel       context.CancelFunc
	done         chan int
	code         atomic.Int32
}

// startProxy runs `idem proxy args...` and waits until it listens (it prints
// its addresses on stdout). It fails the test if the command exits first.
func startProxy(t *testing.T, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newLines(), newLines()
	r := &running{stderr: stderr, cancel: cancel, done: make(chan int, 1)}
	go func() { r.done <- Main(ctx, append([]string{"proxy"}, args...), stdout, stderr) }()
	t.Cleanup(func() { r.stop(t) })
	wantAdmin := false
	for _, a := range args {
		wantAdmin = wantAdmin || a == "--admin"
	}
	deadline := time.After(30 * time.Second)
	for r.proxy == "" || (wantAdmin && r.admin == "") {
		select {
		case line := <-stdout.ch:
			if u, ok := strings.CutPrefix(line, "proxy listening on "); ok {
				r.proxy = u
			} else if u, ok := strings.CutPrefix(line, "admin listening on "); ok {
				r.admin = u
			}
		case code := <-r.done:
			r.done <- code
			t.Fatalf("idem proxy exited with %d before listening:\n%s", code, stderr)
		case <-deadline:
			t.Fatalf("idem proxy did not listen within 30s:\n%s", stderr)
		}
	}
	return r
}

// stop cancels the command's context (as SIGTERM does) and returns its exit
// code.
func (r *running) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("idem proxy did not stop within 30s:\n%s", r.stderr)
		return -1
	}
}

// countingUpstream answers 201 with a fresh id and counts its calls.
func countingUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, rand.Text())
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

type answer struct {
	status   int
	body     string
	replayed bool
}

func call(t *testing.T, client *http.Client, method, url, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer test")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, body: string(b), replayed: res.Header.Get("Idempotent-Replayed") == "true"}
}

func testClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestProxyCommand(t *testing.T) {
	t.Parallel()
	up, calls := countingUpstream(t)
	path := filepath.Join(t.TempDir(), "idem.db")
	if code, out, stderr := run(t, "migrate", "--store", "sqlite:"+path); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, stderr)
	}
	p := startProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--store", "sqlite:"+path)
	client := testClient(t)

	first := call(t, client, "POST", p.proxy+"/charges", "cmd-1", `{"amount":1}`)
	again := call(t, client, "POST", p.proxy+"/charges", "cmd-1", `{"amount":1}`)
	if first.status != 201 || first.replayed || !again.replayed || again.body != first.body || calls.Load() != 1 {
		t.Fatalf("first %+v, again %+v, %d upstream calls", first, again, calls.Load())
	}

	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok"} {
		if a := call(t, client, "GET", p.admin+path, "", ""); a.status != 200 || !strings.Contains(a.body, want) {
			t.Errorf("%s: %+v", path, a)
		}
	}
	m := call(t, client, "GET", p.admin+"/metrics", "", "")
	for _, want := range []string{
		`idem_proxy_requests_total{outcome="executed"} 1`,
		`idem_proxy_requests_total{outcome="replayed"} 1`,
		`idem_proxy_upstream_errors_total{kind="unreachable"} 0`,
		`idem_proxy_upstream_duration_seconds_count 1`,
		`idem_proxy_in_flight_requests 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(m.body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d after cancel:\n%s", code, p.stderr)
	}
	log := p.stderr.String()
	for _, want := range []string{"idem proxy starting", "durable=true", "store=sqlite:" + path, "idem proxy stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestProxyRefusesSmuggling: the command serves the proxy so that it sees a
// request with both Content-Length and Transfer-Encoding: 400, the
// connection closed, nothing forwarded.
func TestProxyRefusesSmuggling(t *testing.T) {
	t.Parallel()
	up, calls := countingUpstream(t)
	p := startProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--store", "memory:")
	c, err := net.Dial("tcp", strings.TrimPrefix(p.proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	body := "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test\r\nContent-Length: %d\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "request-framing-ambiguous") {
		t.Fatalf("got %d %q, want 400 request-framing-ambiguous", res.StatusCode, b)
	}
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection is still open: %v", err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

// TestProxyGracefulShutdown: a request in flight when the stop comes is
// finished and answered before the command returns.
func TestProxyGracefulShutdown(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "slow")
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--store", "memory:")
	client := testClient(t)
	got := make(chan answer, 1)
	go func() { got <- call(t, client, "POST", p.proxy+"/x", "slow-1", "x") }()
	<-arrived
	p.cancel() // SIGTERM
	close(release)
	if a := <-got; a.status != http.StatusCreated || a.body != "slow" {
		t.Fatalf("in-flight request during shutdown: %+v", a)
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, p.stderr)
	}
}

// TestProxyShutdownTimeout: a request still waiting on the upstream when
// --shutdown-timeout ends is aborted (its outcome unknown) and the command
// still exits cleanly.
func TestProxyShutdownTimeout(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then net/http watches the connection
		close(arrived)
		<-r.Context().Done()
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--store", "memory:", "--shutdown-timeout", "100ms")
	client := testClient(t)
	got := make(chan answer, 1)
	go func() { got <- call(t, client, "POST", p.proxy+"/x", "stuck-1", "x") }()
	<-arrived
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, p.stderr)
	}
	if a := <-got; a.status != http.StatusBadGateway || !strings.Contains(a.body, "upstream-outcome-unknown") {
		t.Fatalf("aborted request: %+v", a)
	}
}

func TestProxyEnv(t *testing.T) { // not parallel: it sets the environment
	up, _ := countingUpstream(t)
	t.Setenv("IDEM_UPSTREAM", up.URL)
	t.Setenv("IDEM_LISTEN", "127.0.0.1:0")
	t.Setenv("IDEM_STORE", "memory:")
	t.Setenv("IDEM_MAX_BODY", "16")
	t.Setenv("IDEM_REQUIRE_KEY", "true")
	p := startProxy(t)
	client := testClient(t)
	if a := call(t, client, "POST", p.proxy+"/x", "", "x"); a.status != http.StatusBadRequest {
		t.Errorf("IDEM_REQUIRE_KEY: %+v, want 400", a)
	}
	if a := call(t, client, "POST", p.proxy+"/x", "env-1", strings.Repeat("x", 17)); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("IDEM_MAX_BODY: %+v, want 413", a)
	}
	// A flag wins over its variable.
	t.Setenv("IDEM_STORE", "mysql://nope")
	if code, _, stderr := run(t, "proxy", "--store", "memory:", "--listen", "256.0.0.1:1"); code != 1 || !strings.Contains(stderr, "--listen") {
		t.Errorf("flag over env: code %d %q", code, stderr)
	}
}

func TestProxySQLiteNotMigrated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	code, _, stderr := run(t, "proxy", "--upstream", "http://127.0.0.1:1", "--store", "sqlite:"+missing)
	if code != 1 || !strings.Contains(stderr, "idem migrate") || !strings.Contains(stderr, "--migrate") {
		t.Fatalf("missing file: code %d %q", code, stderr)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("the refused store's file was created")
	}
	empty := filepath.Join(dir, "empty.db")
	db, err := sqlitestore.Open(empty, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, _, stderr = run(t, "proxy", "--upstream", "http://127.0.0.1:1", "--store", "sqlite:"+empty)
	if code != 1 || !strings.Contains(stderr, "idem migrate") {
		t.Fatalf("unmigrated file: code %d %q", code, stderr)
	}

	p := startProxy(t, "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--store", "sqlite:"+missing, "--migrate")
	if code := p.stop(t); code != 0 || !strings.Contains(p.stderr.String(), "applied migration") {
		t.Fatalf("--migrate: code %d:\n%s", code, p.stderr)
	}
}

func TestProxyPostgres(t *testing.T) {
	t.Parallel()
	pool := testdb.Postgres(t)
	var schema string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	url := testdb.PostgresURL() + "&search_path=" + schema
	up, calls := countingUpstream(t)
	code, _, stderr := run(t, "proxy", "--upstream", up.URL, "--store", url)
	if code != 1 || !strings.Contains(stderr, "idem migrate") {
		t.Fatalf("unmigrated schema: code %d %q", code, stderr)
	}
	p := startProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--store", url, "--migrate")
	client := testClient(t)
	a := call(t, client, "POST", p.proxy+"/x", "pg-1", "x")
	b := call(t, client, "POST", p.proxy+"/x", "pg-1", "x")
	if a.status != 201 || !b.replayed || calls.Load() != 1 {
		t.Fatalf("%+v %+v after %d calls", a, b, calls.Load())
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.stderr)
	}
}

func TestProxyRedis(t *testing.T) {
	t.Parallel()
	client := testdb.Redis(t)
	prefix := testdb.RedisPrefix(t)
	cfg, err := client.ConfigGet(context.Background(), "appendfsync").Result()
	if err != nil {
		t.Fatalf("redis CONFIG GET: %v", err)
	}
	aof, _ := client.ConfigGet(context.Background(), "appendonly").Result()
	durable := aof["appendonly"] == "yes" && cfg["appendfsync"] == "always"
	up, calls := countingUpstream(t)
	url := "redis://" + testdb.RedisAddr() + "/0"
	if !durable {
		code, _, stderr := run(t, "proxy", "--upstream", up.URL, "--store", url, "--redis-prefix", prefix)
		if code != 1 || !strings.Contains(stderr, "--allow-non-durable") {
			t.Fatalf("non-durable redis without the flag: code %d %q", code, stderr)
		}
	}
	p := startProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--store", url, "--redis-prefix", prefix, "--allow-non-durable")
	hc := testClient(t)
	a := call(t, hc, "POST", p.proxy+"/x", "redis-1", "x")
	bb := call(t, hc, "POST", p.proxy+"/x", "redis-1", "x")
	if a.status != 201 || !bb.replayed || calls.Load() != 1 {
		t.Fatalf("%+v %+v after %d calls", a, bb, calls.Load())
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.stderr)
	}
	if !durable && !strings.Contains(p.stderr.String(), "RUNNING WITHOUT DURABILITY") {
		t.Fatalf("no loud warning about durability:\n%s", p.stderr)
	}
}

func TestProxyUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"proxy"},
		{"proxy", "--upstream", "ftp://x"},
		{"proxy", "--upstream", "http://"},
		{"proxy", "--upstream", "http://x", "--methods", "GET"},
		{"proxy", "--upstream", "http://x", "--methods", "PO ST"},
		{"proxy", "--upstream", "http://x", "--max-body", "lots"},
		{"proxy", "--upstream", "http://x", "--max-body", "0"},
		{"proxy", "--upstream", "http://x", "--lease", "0s"},
		{"proxy", "--upstream", "http://x", "--lease", "2h", "--retention", "1h"},
		{"proxy", "--upstream", "http://x", "--store", "mysql://x"},
		{"proxy", "--upstream", "http://x", "--log-level", "loud"},
		{"proxy", "--upstream", "http://x", "extra"},
	} {
		if code, _, stderr := run(t, args...); code != 2 || stderr == "" {
			t.Errorf("%v: code %d stderr %q, want a usage error", args, code, stderr)
		}
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		str  string
	}{
		{"1048576", 1 << 20, "1MiB"},
		{"1MiB", 1 << 20, "1MiB"},
		{"512KiB", 512 << 10, "512KiB"},
		{"512kib", 512 << 10, "512KiB"},
		{"2 GiB", 2 << 30, "2GiB"},
		{"1MB", 1000000, "1000000"},
		{"64k", 64 << 10, "64KiB"},
		{"100B", 100, "100"},
		{"1500", 1500, "1500"},
	} {
		var b byteSize
		if err := b.Set(tc.in); err != nil || int64(b) != tc.want || b.String() != tc.str {
			t.Errorf("%q: %d %q %v, want %d %q", tc.in, b, b.String(), err, tc.want, tc.str)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "0", "1.5MiB", "1TiB", "99999999999GiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("%q accepted as %d", in, b)
		}
	}
}
