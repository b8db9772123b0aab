package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/problem"
)

// hangUp is an upstream handler that reads the request and closes the
// connection without answering: the request arrived, its answer is lost.
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func TestUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	up.stop() // the address now refuses connections
	q := req{key: "down-1", body: `{"amount":1}`}
	f.send(t, q).expect(t, http.StatusBadGateway, problem.SlugUpstreamUnreachable)
	f.send(t, q).expect(t, http.StatusBadGateway, problem.SlugUpstreamUnreachable) // released: tried again, not 409
	if n := f.outcomes("released"); n != 2 {
		t.Fatalf("released outcomes = %v, want 2", n)
	}

	up.restart()
	f.send(t, q).expect(t, http.StatusCreated, "")
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
	if r := f.send(t, q); !r.replayed() {
		t.Fatalf("after the upstream answered: %d %q, want a replay", r.status, r.body)
	}
	if n := f.upstreamErrors(UpstreamUnreachable); n != 2 {
		t.Fatalf("unreachable errors counted %v, want 2", n)
	}
}

func TestAnswerLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		tweak  func(*Config)
		handle func(release <-chan struct{}) func(http.ResponseWriter, *http.Request)
	}{
		{
			name: "ConnectionClosed", status: http.StatusBadGateway,
			handle: func(<-chan struct{}) func(http.ResponseWriter, *http.Request) { return hangUp },
		},
		{
			name: "Timeout", status: http.StatusGatewayTimeout,
			tweak: func(c *Config) { c.UpstreamTimeout = 100 * time.Millisecond },
			handle: func(release <-chan struct{}) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, r *http.Request) {
					select { // until the proxy gives up and closes the connection
					case <-r.Context().Done():
					case <-release:
					}
				}
			},
		},
		{
			name: "BodyCut", status: http.StatusBadGateway,
			handle: func(<-chan struct{}) func(http.ResponseWriter, *http.Request) {
				return func(w http.ResponseWriter, r *http.Request) {
					conn, buf, err := http.NewResponseController(w).Hijack()
					if err != nil {
						panic(err)
					}
					defer conn.Close()
					fmt.Fprint(buf, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":")
					buf.Flush()
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const lease = 10 * time.Second
			f, up, _, clock := setup(t, "Memory", func(c *Config) {
				// The hold after a lost answer is its own setting; here it
				// is the lease, and the upstream timeout no longer.
				c.Lease, c.UnknownHold, c.UpstreamTimeout = lease, lease, lease
				if tc.tweak != nil {
					tc.tweak(c)
				}
			})
			release := make(chan struct{})
			defer close(release)
			up.setHandler(tc.handle(release))
			q := req{key: "lost-1", body: `{"amount":7}`}

			f.send(t, q).expect(t, tc.status, problem.SlugUpstreamOutcomeUnknown)
			f.waitServed(t, 1)
			if n := f.outcomes("marked_unknown"); n != 1 {
				t.Fatalf("marked_unknown outcomes = %v, want 1", n)
			}

			// Until the lease ends, retries are told to wait, and not forwarded.
			clock.Advance(lease / 2)
			r := f.send(t, q).expect(t, http.StatusConflict, "outcome-unknown")
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > int(lease/time.Second) {
				t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
			}
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream called %d times while the outcome is unknown, want 1", n)
			}

			// After it, the next retry is forwarded again with the same key.
			clock.Advance(lease)
			up.handle.Store(nil)
			f.send(t, q).expect(t, http.StatusCreated, "")
			if n := up.calls.Load(); n != 2 {
				t.Fatalf("upstream called %d times, want 2", n)
			}
			if got := up.last().header.Get("Idempotency-Key"); got != "lost-1" {
				t.Fatalf("retry forwarded with key %q", got)
			}
			if r := f.send(t, q); !r.replayed() {
				t.Fatalf("after the retry answered: %d %q, want a replay", r.status, r.body)
			}
			if n := f.upstreamErrors(UpstreamUnknown); n != 1 {
				t.Fatalf("unknown errors counted %v, want 1", n)
			}
		})
	}
}

// TestLargeBodyCut: a response larger than MaxResponse streams through;
// cut after that, the client sees the cut, and the key was completed
// without the body: never stored truncated, never run again.
func TestLargeBodyCut(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", func(c *Config) { c.MaxResponse = 16 })
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		fmt.Fprint(buf, "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n"+strings.Repeat("x", 40))
		buf.Flush()
	})
	q := req{key: "big-1", body: "x"}
	if r := f.send(t, q); r.err == nil {
		t.Fatalf("a cut body was delivered as complete: %d %q", r.status, r.body)
	}
	f.waitServed(t, 1)
	f.send(t, q).expect(t, http.StatusConflict, "response-not-stored")
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

// TestNoSilentResend: http.Transport re-sends a bodiless request with an
// Idempotency-Key by itself when a reused connection breaks after the
// request was written. The proxy must not let it: the upstream would run it
// twice while the proxy believes it ran once.
func TestNoSilentResend(t *testing.T) {
	t.Parallel()
	for _, body := range []string{"", `{"amount":3}`} {
		t.Run(fmt.Sprintf("Body%d", len(body)), func(t *testing.T) {
			t.Parallel()
			f, up, _, _ := setup(t, "Memory", nil)
			up.setHandler(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					hangUp(w, r)
				}
			})
			// A first request leaves an idle connection to the upstream for
			// the second to reuse.
			f.send(t, req{method: http.MethodGet}).expect(t, http.StatusOK, "")
			f.send(t, req{key: "resend-1", body: body}).expect(t, http.StatusBadGateway, problem.SlugUpstreamOutcomeUnknown)
			if n := up.calls.Load(); n != 2 {
				t.Fatalf("upstream called %d times, want 2 (one GET, one POST)", n)
			}
			if got := up.last(); string(got.body) != body || got.method != http.MethodPost {
				t.Fatalf("upstream got %s with %q", got.method, got.body)
			}
		})
	}
}

func TestUpstream5xx(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "busy")
	})
	q := req{key: "busy-1", body: "x"}
	for i := range 2 {
		r := f.send(t, q).expect(t, http.StatusServiceUnavailable, "")
		if string(r.body) != "busy" || r.replayed() {
			t.Fatalf("attempt %d: %q replayed=%v, want the upstream's own 503", i, r.body, r.replayed())
		}
	}
	up.handle.Store(nil)
	first := f.send(t, q).expect(t, http.StatusCreated, "")
	if n := up.calls.Load(); n != 3 {
		t.Fatalf("upstream called %d times, want 3", n)
	}
	if r := f.send(t, q); !r.replayed() || !sameReply(first, r) {
		t.Fatalf("%d %q, want a replay of the 201", r.status, r.body)
	}
}

// TestClientGivesUp: a client that disconnects does not end the upstream
// call; the answer is stored and its retry replays it.
func TestClientGivesUp(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	arrived, release := make(chan struct{}), make(chan struct{})
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, "done")
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
		close(release)
	}()
	q := req{key: "gone-1", body: "x"}
	f.drainServed()
	qc := q
	qc.ctx = ctx
	if r := f.send(t, qc); r.err == nil {
		t.Fatalf("the cancelled request got an answer: %d", r.status)
	}
	f.waitServed(t, 1)
	r := f.send(t, q).expect(t, http.StatusAccepted, "")
	if !r.replayed() || string(r.body) != "done" || up.calls.Load() != 1 {
		t.Fatalf("retry: %q replayed=%v after %d upstream calls; want a replay of the first answer", r.body, r.replayed(), up.calls.Load())
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	closedIdleErr := errors.New("http: server closed idle connection")
	for _, tc := range []struct {
		name    string
		err     error
		closed  bool
		timeout bool
	}{
		{"ClosedIdle", closedIdleErr, true, false},
		{"ClosedIdleWrapped", fmt.Errorf("round trip: %w", closedIdleErr), true, false},
		{"Reset", errors.New("read: connection reset by peer"), false, false},
		{"Deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false, true},
		{"NetTimeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, false, true},
	} {
		if got := closedIdle(tc.err); got != tc.closed {
			t.Errorf("%s: closedIdle = %v", tc.name, got)
		}
		if got := timeout(tc.err); got != tc.timeout {
			t.Errorf("%s: timeout = %v", tc.name, got)
		}
	}
}
