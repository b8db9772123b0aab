package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// upgradeRequest asks to switch to the test protocol.
const upgradeRequest = "GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\n"

// tunnelUpstream makes up switch protocols on every request and then echo
// what it reads. The returned channel gets the echo's end: nil when the
// proxy closed its side of the tunnel.
func tunnelUpstream(up *upstream) <-chan error {
	ended := make(chan error, 1)
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			ended <- err
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\n")
		if err := brw.Flush(); err != nil {
			ended <- err
			return
		}
		_, err = io.Copy(c, brw)
		ended <- err
	})
	return ended
}

// echo sends a line through the tunnel and checks that it comes back.
func (c *raw) echo(tb testing.TB, i int) {
	tb.Helper()
	line := fmt.Sprintf("ping %d\n", i)
	if _, err := io.WriteString(c, line); err != nil {
		tb.Fatalf("write %d: %v", i, err)
	}
	got, err := c.br.ReadString('\n')
	if err != nil || got != line {
		tb.Fatalf("echo %d: %q, %v", i, got, err)
	}
}

// waitEnded waits until the upstream's side of the tunnel has ended.
func waitEnded(tb testing.TB, ended <-chan error) {
	tb.Helper()
	select {
	case err := <-ended:
		if err != nil {
			tb.Fatalf("the upstream's side of the tunnel: %v", err)
		}
	case <-time.After(10 * time.Second):
		tb.Fatal("the upstream's side of the tunnel is still open after 10 s")
	}
}

// TestUpgrade: a request to switch protocols on a method that does not take
// part gets the upstream's 101 and a tunnel both ways, which outlives
// UpstreamTimeout and ends when either side closes it, or at Close.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	// Long enough for the 101 to arrive on a loaded machine, short
	// enough to outlast twice.
	const timeout = 300 * time.Millisecond

	t.Run("ClientCloses", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", func(c *Config) { c.UpstreamTimeout = timeout })
		ended := tunnelUpstream(up)
		c := f.dial(t)
		c.exchange(t, upgradeRequest).expect(t, http.StatusSwitchingProtocols, "")
		if got := up.last().header.Get("Upgrade"); got != "x-test" {
			t.Fatalf("the upstream got Upgrade %q", got)
		}
		// Back and forth for twice UpstreamTimeout: the tunnel is not cut
		// by it.
		start := time.Now()
		for i := 0; time.Since(start) < 2*timeout; i++ {
			c.echo(t, i)
		}
		c.Close()
		waitEnded(t, ended)
	})

	t.Run("GuardedNotOffered", func(t *testing.T) {
		t.Parallel()
		// A tunnel cannot be stored: a request that holds a claim reaches
		// the upstream without the offer to switch.
		f, up, _, _ := setup(t, "Memory", nil)
		h := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"x-test"}}
		f.send(t, req{key: "u-1", body: "x", header: h}).expect(t, http.StatusCreated, "")
		if got := up.last().header; got.Get("Upgrade") != "" || got.Get("Connection") != "" {
			t.Fatalf("the upstream was offered to switch: %v", got)
		}
		if r := f.send(t, req{key: "u-1", body: "x", header: h}); !r.replayed() {
			t.Fatalf("retry: %d %q, want a replay", r.status, r.body)
		}
	})

	t.Run("ProxyCloses", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", nil)
		ended := tunnelUpstream(up)
		c := f.dial(t)
		c.exchange(t, upgradeRequest).expect(t, http.StatusSwitchingProtocols, "")
		c.echo(t, 0)
		if err := f.p.Close(); err != nil {
			t.Fatal(err)
		}
		c.expectClosed(t)
		waitEnded(t, ended)
	})
}
