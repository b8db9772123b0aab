package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRows runs every row group briefly, with the guarantee checks, on the
// real PostgreSQL and Redis (it fails when either is unreachable): every
// row must get work done, idem must keep every guarantee its checks look
// for, and the bare handlers, which keep none, must be seen failing them,
// so that the checks are known to catch what they look for.
func TestRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := options{clients: []int{4}, duration: 200 * time.Millisecond, rows: regexp.MustCompile(""), logger: testLogger(t)}
	lines, err := runGroups(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	rows, peers := map[string]bool{}, map[string]bool{}
	for _, l := range lines {
		rows[l.row] = true
		peers[l.row] = peers[l.row] || !l.idem
		if l.result.ops == 0 || l.result.rate() <= 0 {
			t.Errorf("%s, %s: no operation completed", l.row, l.peer)
		}
		if l.result.p50 <= 0 || l.result.p99 < l.result.p50 {
			t.Errorf("%s, %s: latencies p50 %v p99 %v", l.row, l.peer, l.result.p50, l.result.p99)
		}
		if strings.HasPrefix(l.peer, "idem") && !l.kept {
			t.Errorf("%s, %s: idem failed its guarantee checks: %s", l.row, l.peer, l.guarantees)
		}
		if strings.Contains(l.peer, "bare handler") && l.kept {
			t.Errorf("%s, %s: a bare handler passed the guarantee checks: %s", l.row, l.peer, l.guarantees)
		}
	}
	for _, want := range []string{"HTTP replay, Redis", "HTTP new key, Redis", rowCreate, rowCreate + inProcessRow, rowDuplicate,
		"Claim+Complete, PostgreSQL", "Claim+Complete, SQLite (WAL, synchronous=FULL)", "Claim+Complete, Redis"} {
		if !rows[want] {
			t.Errorf("no row %q", want)
		}
	}
	// Every row has a peer that idem's figure divides.
	for row := range rows {
		if !peers[row] {
			t.Errorf("row %q has no peer", row)
		}
	}
	var table bytes.Buffer
	printTable(&table, opts, lines)
	if n := strings.Count(table.String(), "\n| "); n != len(lines)+1 {
		t.Errorf("the table has %d rows for %d lines:\n%s", n, len(lines), table.String())
	}
	t.Log("\n" + table.String())
}

// TestFlags checks the command's flags: a bad value is an error, not a
// run.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-clients", "0"},
		{"-clients", "4,x"},
		{"-duration", "0s"},
		{"-warmup", "-1s"},
		{"-rows", "("},
		{"-rows", "nothing-matches-this", "-duration", "1ms"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
}

// TestMeasureWarmsUpUnmeasured checks that measure runs the operation
// during the warm-up and counts only what ran after it.
func TestMeasureWarmsUpUnmeasured(t *testing.T) {
	var calls atomic.Int64
	op := func(context.Context, int) error { calls.Add(1); time.Sleep(time.Millisecond); return nil }
	r, err := measure(context.Background(), 2, 100*time.Millisecond, 100*time.Millisecond, op)
	if err != nil {
		t.Fatal(err)
	}
	if r.ops == 0 || r.ops >= calls.Load() {
		t.Fatalf("measured %d operations of %d run: want the warm-up's left out", r.ops, calls.Load())
	}
}

// testLogger logs the rows' progress through t.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}
