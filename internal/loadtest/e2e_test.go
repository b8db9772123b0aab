package loadtest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// runAndCheck runs cfg against target and checks the history against the
// ledger's effects, fetched over HTTP.
func runAndCheck(t *testing.T, l *Ledger, cfg RunConfig, ccfg CheckConfig) (*RunReport, checked) {
	t.Helper()
	if cfg.Targets == nil {
		cfg.Targets = []string{l.URL() + "/charge"}
	}
	cfg.History = filepath.Join(t.TempDir(), "history.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rrep, err := Run(ctx, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	ccfg.History, ccfg.Effects = cfg.History, l.URL()
	crep, err := Check(ctx, &ccfg)
	if err != nil {
		t.Fatal(err)
	}
	return rrep, checked{crep, cfg.History}
}

type checked struct {
	*CheckReport
	history string
}

func runText(r *RunReport) string {
	var b strings.Builder
	r.WriteText(&b)
	return b.String()
}

// TestEndToEndIdempotentTarget: the deduplicating ledger is a correct
// idempotent target, so every check passes, with duplicates racing,
// conflicts and principals sharing keys.
func TestEndToEndIdempotentTarget(t *testing.T) {
	t.Parallel()
	l := ledgerSetup(t, LedgerConfig{Dedup: true, Delay: time.Millisecond,
		Log: filepath.Join(t.TempDir(), "effects.jsonl")})
	// Two targets (as if two proxy processes): requests alternate.
	cfg := RunConfig{Keys: 120, Dups: 4, Clients: 12, Principals: 3, ConflictShare: 0.15, RetryUntilTerminal: true,
		Targets: []string{l.URL() + "/a", l.URL() + "/b"}}
	rrep, crep := runAndCheck(t, l, cfg, CheckConfig{})
	t.Logf("run:\n%s", runText(rrep))
	if !crep.OK() {
		t.Fatalf("a correct target failed the check:\n%s", reportText(crep.CheckReport))
	}
	if rrep.Requests != 120*4 || rrep.Outcomes["201"] == 0 || rrep.Outcomes["replayed"] == 0 || rrep.Outcomes["422"] == 0 {
		t.Fatalf("the run did not exercise executions, replays and conflicts: %+v", rrep.Outcomes)
	}
	if crep.Effects != 120 || crep.Scopes != 120 || crep.LinChecked != 120 || crep.Absorbed == 0 {
		t.Fatalf("effects %d, scopes %d, checked %d, absorbed %d; want 120, 120, 120, >0",
			crep.Effects, crep.Scopes, crep.LinChecked, crep.Absorbed)
	}
	paths := map[string]int{}
	for _, e := range l.Effects() {
		paths[e.Path]++
	}
	if len(paths) != 2 || paths["/a"] == 0 || paths["/b"] == 0 {
		t.Fatalf("requests by path %v: both targets should be used", paths)
	}
	// The fsynced log says the same as the live ledger.
	crep2, err := Check(context.Background(), &CheckConfig{History: crep.history, Effects: l.cfg.Log})
	if err != nil {
		t.Fatal(err)
	}
	if !crep2.OK() || crep2.Effects != 120 || crep2.Absorbed != crep.Absorbed {
		t.Fatalf("check against the log file:\n%s", reportText(crep2))
	}
}

// TestEndToEndNonIdempotentTarget: the same workload against a ledger that
// does not dedup; the checker must see the duplicated effects.
func TestEndToEndNonIdempotentTarget(t *testing.T) {
	t.Parallel()
	l := ledgerSetup(t, LedgerConfig{})
	cfg := RunConfig{Keys: 40, Dups: 3, Clients: 8, Principals: 2, RetryUntilTerminal: true}
	_, crep := runAndCheck(t, l, cfg, CheckConfig{})
	if crep.OK() || crep.Counts[CheckDuplicateEffect] != 40 {
		t.Fatalf("want a duplicate-effect violation for each of the 40 scopes:\n%s", reportText(crep.CheckReport))
	}
	if !crep.Has(CheckLinearizability) {
		t.Fatalf("porcupine did not flag the re-executions:\n%s", reportText(crep.CheckReport))
	}
	var b strings.Builder
	crep.WriteText(&b, 3)
	if !strings.Contains(b.String(), "[duplicate-effect]") || !strings.Contains(b.String(), "... and") {
		t.Fatalf("report does not name the first few violations:\n%s", b.String())
	}
}

// TestEndToEndDrain: an upstream failing half of the time, one request per
// key: the drain retries until every key is terminal, so the check passes;
// without the drain it does not.
func TestEndToEndDrain(t *testing.T) {
	t.Parallel()
	cfg := RunConfig{Keys: 40, Dups: 1, Clients: 8, MaxRetryAfter: 20 * time.Millisecond}

	t.Run("WithDrain", func(t *testing.T) {
		t.Parallel()
		l := ledgerSetup(t, LedgerConfig{FailRate: 0.5})
		c := cfg
		c.RetryUntilTerminal = true
		rrep, crep := runAndCheck(t, l, c, CheckConfig{})
		if !crep.OK() || crep.Effects != 40 {
			t.Fatalf("after the drain:\n%s", reportText(crep.CheckReport))
		}
		if rrep.DrainPending == 0 || rrep.DrainUnresolved != 0 {
			t.Fatalf("drain: %+v", rrep)
		}
	})
	t.Run("WithoutDrain", func(t *testing.T) {
		t.Parallel()
		l := ledgerSetup(t, LedgerConfig{FailRate: 0.5})
		_, crep := runAndCheck(t, l, cfg, CheckConfig{})
		if !crep.Has(CheckNonTerminal) {
			t.Fatalf("failed keys not reported:\n%s", reportText(crep.CheckReport))
		}
	})
}

// TestEndToEndRetryFor: with RetryFor each client retries a failed
// request at once, so every key is terminal after the main phase with no
// drain; the retries are main-phase operations.
func TestEndToEndRetryFor(t *testing.T) {
	t.Parallel()
	l := ledgerSetup(t, LedgerConfig{FailRate: 0.5})
	cfg := RunConfig{Keys: 40, Dups: 1, Clients: 8, MaxRetryAfter: 20 * time.Millisecond, RetryFor: 10 * time.Second}
	rrep, crep := runAndCheck(t, l, cfg, CheckConfig{})
	if !crep.OK() || crep.Effects != 40 {
		t.Fatalf("after the main phase:\n%s", reportText(crep.CheckReport))
	}
	if rrep.Retries == 0 || rrep.Requests != 40+rrep.Retries || rrep.Outcomes["500"] != rrep.Retries ||
		rrep.DrainPending != 0 || rrep.DrainRequests != 0 {
		t.Fatalf("retries %d, requests %d, outcomes %v, drain %d/%d; want every 500 retried in the main phase",
			rrep.Retries, rrep.Requests, rrep.Outcomes, rrep.DrainPending, rrep.DrainRequests)
	}
	if !strings.Contains(runText(rrep), "retries") {
		t.Fatalf("report does not mention the retries:\n%s", runText(rrep))
	}
	recs, err := ReadHistory(crep.history)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Phase != PhaseMain {
			t.Fatalf("record %+v is not in the main phase", r)
		}
	}
}

// TestRunRecordsTransportOutcomes: a refused dial is fail (never sent), a
// timeout after sending is info (maybe executed).
func TestRunRecordsTransportOutcomes(t *testing.T) {
	t.Parallel()

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		hist := filepath.Join(t.TempDir(), "h.jsonl")
		rep, err := Run(context.Background(), &RunConfig{Targets: []string{"http://" + addr + "/x"}, History: hist, Keys: 4, Dups: 2})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Outcomes[TypeFail] != 8 {
			t.Fatalf("outcomes %v, want 8 fail", rep.Outcomes)
		}
		recs, err := ReadHistory(hist)
		if err != nil || len(recs) != 16 {
			t.Fatalf("history: %d records, %v", len(recs), err)
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		// The timeout must end requests that were sent: long enough that
		// a dial on a loaded machine (CI runs every package at once, under
		// the race detector) ends within it, since a dial that times out
		// is rightly a fail; and the ledger holds each request longer.
		l := ledgerSetup(t, LedgerConfig{Delay: 3 * time.Second})
		hist := filepath.Join(t.TempDir(), "h.jsonl")
		rep, err := Run(context.Background(), &RunConfig{Targets: []string{l.URL()}, History: hist, Keys: 2, Dups: 1,
			RequestTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Outcomes[TypeInfo] != 2 {
			t.Fatalf("outcomes %v, want 2 info", rep.Outcomes)
		}
		recs, err := ReadHistory(hist)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Type != TypeInvoke && (r.Type != TypeInfo || r.Error == "") {
				t.Fatalf("record %+v, want info with an error", r)
			}
		}
	})
}

// TestRunStopsOnCancel: a cancelled run returns promptly with a complete,
// readable history (each in-flight request recorded as info).
func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var inDelay atomic.Int32
	l := ledgerSetup(t, LedgerConfig{Delay: time.Hour, onDelay: func() {
		if inDelay.Add(1) == 4 { // every client is waiting for an answer
			cancel()
		}
	}})
	hist := filepath.Join(t.TempDir(), "h.jsonl")
	start := time.Now()
	_, err := Run(ctx, &RunConfig{Targets: []string{l.URL()}, History: hist, Keys: 10, Dups: 2, Clients: 4, RetryUntilTerminal: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Run took %v after cancel", d)
	}
	recs, err := ReadHistory(hist)
	if err != nil || len(recs) != 8 {
		t.Fatalf("history %d records, %v; want 4 invokes and 4 info", len(recs), err)
	}
	crep := CheckRecords(recs, nil, &CheckConfig{AllowNonTerminal: true})
	if !crep.OK() || crep.Operations[TypeInfo] != 4 {
		t.Fatalf("check of the cut history:\n%s", reportText(crep))
	}
}

func TestRunConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []RunConfig{
		{History: "h"},
		{Targets: []string{"ftp://x"}, History: "h"},
		{Targets: []string{"http://x"}},
		{Targets: []string{"http://x", "x"}, History: "h"},
		{Targets: []string{"http://x"}, History: "h", Keys: -1},
		{Targets: []string{"http://x"}, History: "h", ConflictShare: 1.5},
		{Targets: []string{"http://x"}, History: "h", KeyPrefix: "a b"},
		{Targets: []string{"http://x"}, History: "h", RetryFor: -time.Second},
	}
	for _, c := range bad {
		if _, err := Run(context.Background(), &c); err == nil {
			t.Errorf("Run(%+v) accepted", c)
		}
	}
}

// TestRunNeverResendsUnseen: a server that reads a request on a reused
// connection and hangs up without answering. net/http would resend such a
// request (it carries Idempotency-Key) and hide the first delivery; Run
// must record it as info instead, each operation one delivery.
func TestRunNeverResendsUnseen(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var received atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					received.Add(1)
					if n == 1 {
						return // read the second request, then hang up
					}
					_, _ = io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				}
			})
		}
	})
	defer func() { ln.Close(); wg.Wait() }()

	rep, err := Run(context.Background(), &RunConfig{Targets: []string{"http://" + ln.Addr().String()},
		History: filepath.Join(t.TempDir(), "h.jsonl"), Keys: 2, Dups: 1, Clients: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := received.Load(); n != 2 || rep.Outcomes["201"] != 1 || rep.Outcomes[TypeInfo] != 1 {
		t.Fatalf("server received %d requests, outcomes %v; want 2, one 201 and one info", n, rep.Outcomes)
	}
}
