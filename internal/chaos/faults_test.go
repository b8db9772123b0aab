package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/store/sqlitestore"
)

// A storeOutage makes a real store fail from outside the proxies' processes.
// cause starts an outage, keeps it for about d and ends it; it returns the
// window during which a store write that started failed (so an upstream
// answer arriving in it could not be recorded), or why the outage could not
// be caused or ended. It runs outside the test's goroutine.
type storeOutage interface {
	cause(d time.Duration) (window, error)
}

// window is a span during which store writes failed.
type window struct{ from, to time.Time }

// tcpFault is a TCP proxy in front of a server (PostgreSQL here). While down
// it has cut every connection it carried (with a reset, as a dead peer or a
// dropped route does) and resets each new one as soon as it is accepted, so
// clients see their queries fail and their reconnects refused.
type tcpFault struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{} // both sides of every live pair
	wg    sync.WaitGroup
}

func startTCPFault(t *testing.T, target string) *tcpFault {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &tcpFault{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.accept)
	t.Cleanup(f.close)
	return f
}

func (f *tcpFault) addr() string { return f.ln.Addr().String() }

func (f *tcpFault) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		down := f.down
		f.mu.Unlock()
		if down {
			reset(c)
			continue
		}
		f.wg.Go(func() { f.pipe(c) })
	}
}

func (f *tcpFault) pipe(c net.Conn) {
	s, err := net.DialTimeout("tcp", f.target, 5*time.Second)
	if err != nil {
		reset(c)
		return
	}
	f.mu.Lock()
	if f.down { // went down while dialling
		f.mu.Unlock()
		reset(c)
		reset(s)
		return
	}
	f.conns[c], f.conns[s] = struct{}{}, struct{}{}
	f.mu.Unlock()
	var both sync.WaitGroup
	copyThenClose := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Either side ending ends the pair (a closed conn errors the other copy).
		dst.Close()
		src.Close()
	}
	both.Go(func() { copyThenClose(s, c) })
	both.Go(func() { copyThenClose(c, s) })
	both.Wait()
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, s)
	f.mu.Unlock()
}

// cut resets every connection and refuses new ones until restore.
func (f *tcpFault) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = true
	for c := range f.conns {
		reset(c)
	}
}

func (f *tcpFault) restore() {
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
}

func (f *tcpFault) cause(d time.Duration) (window, error) {
	f.cut()
	from := time.Now()
	time.Sleep(d) // the outage itself
	f.restore()
	return window{from, time.Now()}, nil
}

func (f *tcpFault) close() {
	f.ln.Close()
	f.cut()
	f.wg.Wait()
}

// reset closes c with an RST rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// redisServer is a redis-server of the test's own, on a free port, with an
// append-only file fsynced on every write in a temporary directory (what
// the proxies require of a Redis store), so that it can be killed and
// restarted without losing an acknowledged write.
type redisServer struct {
	bin  string
	dir  string
	addr string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("the Redis outage test needs redis-server on PATH: %v", err)
	}
	r := &redisServer{bin: bin, dir: t.TempDir(), addr: freeAddr(t)}
	t.Cleanup(r.kill)
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *redisServer) start() error {
	host, port, _ := net.SplitHostPort(r.addr)
	log, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(r.bin, "--bind", host, "--port", port, "--dir", r.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	r.cmd, r.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(r.done) }()
	// Ready once it answers PING (not LOADING: the AOF is read first).
	client := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-r.done:
			return fmt.Errorf("redis-server on %s exited at start (log in %s)", r.addr, r.dir)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready: %w (log in %s)", r.addr, err, r.dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill SIGKILLs the server, if running, and reaps it.
func (r *redisServer) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}

// cause kills Redis, waits d and starts it again on the same port from its
// append-only file; the window lasts until it answers again.
func (r *redisServer) cause(d time.Duration) (window, error) {
	from := time.Now()
	r.kill()
	time.Sleep(d) // the outage itself
	err := r.start()
	return window{from, time.Now()}, err
}

// sqliteLock takes SQLite's write lock on the proxies' database file from
// a connection of the test process (BEGIN EXCLUSIVE) and holds it. A
// proxy's write waits for it for the busy timeout, then fails; so a lock
// held for busy timeout + d makes every write that starts during its first
// d fail, and the later ones only wait.
type sqliteLock struct {
	db *sql.DB
}

// sqliteBusyTimeout is sqlitestore's default busy timeout, which the proxy
// uses (its --store flag takes only a path).
const sqliteBusyTimeout = 10 * time.Second

func openSQLiteLock(t *testing.T, path string) *sqliteLock {
	t.Helper()
	db, err := sqlitestore.Open(path, &sqlitestore.OpenConfig{BusyTimeout: sqliteBusyTimeout, MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &sqliteLock{db: db}
}

func (l *sqliteLock) cause(d time.Duration) (window, error) {
	ctx := context.Background()
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return window{}, err
	}
	defer conn.Close()
	// Waits (busy timeout) for a proxy's write in progress, if any.
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		return window{}, fmt.Errorf("sqlite: BEGIN EXCLUSIVE: %w", err)
	}
	from := time.Now()
	time.Sleep(sqliteBusyTimeout + d) // the outage itself
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		return window{}, fmt.Errorf("sqlite: ROLLBACK: %w", err)
	}
	return window{from, from.Add(d)}, nil
}

var (
	_ storeOutage = (*tcpFault)(nil)
	_ storeOutage = (*redisServer)(nil)
	_ storeOutage = (*sqliteLock)(nil)
)
