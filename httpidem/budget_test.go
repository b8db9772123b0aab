package httpidem_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
)

// rawServer serves h on a real connection-oriented server, as net/http
// serves it in production (read deadlines work there, not in a recorder).
func rawServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// stalled opens a connection and sends a keyed POST that declares length
// bytes of body and sends only sent of them.
func stalled(t *testing.T, addr, k string, length, sent int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("POST /charges HTTP/1.1\r\nHost: x\r\n%s: alice\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\n\r\n",
		principalHeader, k, length)
	if _, err := io.WriteString(c, head+strings.Repeat("a", sent)); err != nil {
		t.Fatal(err)
	}
	return c
}

// answer reads one response from c (within a generous bound, so that a
// server that never answers fails the test instead of hanging it).
func answer(t *testing.T, c net.Conn) *http.Response {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(strings.NewReader(string(body)))
	return res
}

func wantSlug(t *testing.T, res *http.Response, status int, slug string) {
	t.Helper()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != status || !strings.Contains(string(body), `/`+slug+`"`) {
		t.Fatalf("got %d %s, want %d %s", res.StatusCode, body, status, slug)
	}
	if !res.Close {
		t.Fatalf("%s: the connection is kept open; the unread body would be taken for the next request", slug)
	}
}

// A client that declares a body and stops sending it gets 408 body-timeout
// once BodyTimeout has passed, its connection is closed, and nothing was
// claimed or run: it cannot hold a buffer open for ever.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{BodyTimeout: 200 * time.Millisecond})
	c := &counter{}
	addr := rawServer(t, mux(b.mw, c))
	conn := stalled(t, addr, "k", 1000, 999)
	wantSlug(t, answer(t, conn), http.StatusRequestTimeout, httpidem.SlugBodyTimeout)
	wantCalls(t, c, 0)
	wantNoRecord(t, b.store, scope("k"))
}

// The memory budget bounds buffered bodies: a body that does not fit is
// refused at once with 503 server-busy + Retry-After (by its declared
// length, before a byte is read; or, chunked, as it grows), while small
// requests go on being served; once the holder is done the budget is whole
// again and the refused request succeeds.
func TestMemoryBudget(t *testing.T) {
	t.Parallel()
	const maxBody = 256 << 10
	b := setup(t, &httpidem.Config{MaxBody: maxBody, MemoryBudget: maxBody, BodyTimeout: -1})
	c := &counter{}
	addr := rawServer(t, mux(b.mw, c))

	holder := stalled(t, addr, "big-1", 200<<10, 150<<10) // holds ~184 KiB of the 256
	waitInUse(t, b.mw, 150<<10)

	refused := stalled(t, addr, "big-2", 200<<10, 0)
	res := answer(t, refused)
	if res.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	wantSlug(t, res, http.StatusServiceUnavailable, httpidem.SlugServerBusy)

	chunked, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer chunked.Close()
	fmt.Fprintf(chunked, "POST /charges HTTP/1.1\r\nHost: x\r\n%s: alice\r\nIdempotency-Key: big-3\r\nTransfer-Encoding: chunked\r\n\r\n", principalHeader)
	chunk := strings.Repeat("c", 16<<10)
	go func() {
		for range 12 { // 192 KiB, more than is left; the server stops reading
			if _, err := fmt.Fprintf(chunked, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
	}()
	wantSlug(t, answer(t, chunked), http.StatusServiceUnavailable, httpidem.SlugServerBusy)

	small := serve(mux(b.mw, c), req("POST", "/charges", "small", `{"amount":100}`))
	if small.Code != http.StatusCreated {
		t.Fatalf("a small request during the pressure: %d %s", small.Code, small.Body)
	}
	if _, err := io.WriteString(holder, strings.Repeat("a", 50<<10)); err != nil {
		t.Fatal(err)
	}
	if res := answer(t, holder); res.StatusCode != http.StatusCreated {
		t.Fatalf("holder: %d", res.StatusCode)
	}
	waitInUse(t, b.mw, 0)
	retry := stalled(t, addr, "big-2", 200<<10, 200<<10)
	if res := answer(t, retry); res.StatusCode != http.StatusCreated {
		t.Fatalf("the refused request, retried: %d", res.StatusCode)
	}
	wantCalls(t, c, 3) // small, holder, retry
	wantNoRecord(t, b.store, scope("big-3"))
}

// waitInUse waits until the middleware's budget use reaches at least n
// (or, for n == 0, drops to 0).
func waitInUse(t *testing.T, m *httpidem.Middleware, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := m.InUse()
		if (n == 0 && u == 0) || (n > 0 && u >= n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget in use %d, want %d", u, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
