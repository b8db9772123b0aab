// Command bench measures idem beside the peers a Go user would pick
// instead, in one process and one run, on this machine's PostgreSQL and
// Redis, and prints one markdown table.
//
//	cd bench && go run . -clients 16,64 -duration 3s
//
// The rows are HTTP replays and new keys on Redis (idem's middleware, Fiber
// v3's idempotency middleware and the two bare frameworks), executions on
// PostgreSQL (idem's durable executions and River), and each store's
// Claim+Complete beside a hand-written idempotency table. The guarantees
// column is what short checks observed in the same run, never a claim
// written down. README.md says what each row and each check does.
//
// This is a module of its own so that the idem module never depends on
// Fiber.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	clients  []int
	duration time.Duration
	// warmup is how long a stateless row (HTTP, stores) runs, unmeasured,
	// before each measurement: pools, prepared statements and caches are
	// warm on every side alike.
	warmup time.Duration
	rows   *regexp.Regexp
	logger *slog.Logger
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	clients := fs.String("clients", "16,64", "concurrent clients, comma-separated: every row runs once per value")
	duration := fs.Duration("duration", 3*time.Second, "how long each row runs")
	warmup := fs.Duration("warmup", time.Second, "how long the HTTP and store rows run, unmeasured, before each measurement (0: none)")
	rows := fs.String("rows", "", "run only the row groups whose name matches this regexp (http-replay, http-new, executions, stores)")
	verbose := fs.Bool("v", false, "log progress to stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (clients and servers) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	opts := options{duration: *duration, warmup: *warmup, logger: slog.New(slog.DiscardHandler)}
	if *verbose {
		opts.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	for c := range strings.SplitSeq(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return fmt.Errorf("-clients %q: want positive integers separated by commas", *clients)
		}
		opts.clients = append(opts.clients, n)
	}
	if opts.duration <= 0 {
		return errors.New("-duration must be positive")
	}
	if opts.warmup < 0 {
		return errors.New("-warmup must not be negative")
	}
	var err error
	if opts.rows, err = regexp.Compile(*rows); err != nil {
		return fmt.Errorf("-rows: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	lines, err := runGroups(ctx, opts)
	if err != nil {
		return err
	}
	printTable(stdout, opts, lines)
	return nil
}

// group is one set of rows: its setups are measured side by side, idem's
// first, and each peer's throughput is compared with it.
type group struct {
	name string
	run  func(ctx context.Context, env *env, opts options) ([]line, error)
}

// groups are every row group, in the table's order.
var groups = []group{
	{"http-replay", runHTTPReplay},
	{"http-new", runHTTPNew},
	{"executions", runExecutions},
	{"stores", runStores},
}

// runGroups runs the groups that opts.rows selects, on services opened
// once and cleaned up at the end.
func runGroups(ctx context.Context, opts options) ([]line, error) {
	env, err := openEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer env.close()
	var out []line
	for _, g := range groups {
		if !opts.rows.MatchString(g.name) {
			continue
		}
		opts.logger.Info("row group", "name", g.name)
		lines, err := g.run(ctx, env, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", g.name, err)
		}
		out = append(out, lines...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-rows %q matches no row group", opts.rows)
	}
	return out, nil
}

// line is one row of the table: one setup at one client count.
type line struct {
	row        string // what is measured
	peer       string // who does it
	idem       bool   // idem's own setup, which the ratios divide
	clients    int
	result     result
	unit       string // "req/s" or "ops/s"
	guarantees string
	// kept is true when the setup kept every guarantee its checks look
	// for.
	kept bool
}

// printTable writes lines as one markdown table. The ratio column is idem's
// throughput divided by the peer's, at the same row and client count.
func printTable(w io.Writer, opts options, lines []line) {
	fmt.Fprintf(w, "Each row ran %s at each client count (the HTTP and store rows after %s unmeasured), in one process with its clients (%s, %d CPUs).\n\n",
		opts.duration, opts.warmup, runtime.Version(), runtime.NumCPU())
	fmt.Fprintln(w, "| row | peer | clients | throughput | p50 | p99 | idem/peer | guarantees (observed in this run) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---|")
	// Rows in the order they first appear, each by client count; the
	// setups keep their order (idem first) within.
	first := map[string]int{}
	for _, l := range lines {
		if _, ok := first[l.row]; !ok {
			first[l.row] = len(first)
		}
	}
	lines = slices.Clone(lines)
	slices.SortStableFunc(lines, func(a, b line) int {
		return cmp.Or(cmp.Compare(first[a.row], first[b.row]), cmp.Compare(a.clients, b.clients))
	})
	idemRate := map[string]float64{}
	for _, l := range lines {
		if l.idem {
			idemRate[l.row+"\x00"+strconv.Itoa(l.clients)] = l.result.rate()
		}
	}
	for _, l := range lines {
		ratio := "—"
		if base, ok := idemRate[l.row+"\x00"+strconv.Itoa(l.clients)]; ok && !l.idem && l.result.rate() > 0 {
			ratio = fmt.Sprintf("%.2f×", base/l.result.rate())
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f %s | %s | %s | %s | %s |\n", l.row, l.peer, l.clients,
			l.result.rate(), l.unit, ms(l.result.p50), ms(l.result.p99), ratio, l.guarantees)
	}
}

// ms formats a latency in milliseconds.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
