// Command charge shows idem charging a ledger exactly once, on the embedded
// SQLite store, with nothing else to run:
//
//	go run ./examples/charge
//
// It creates a SQLite file (in a temporary directory, or at --db), with
// idem's tables and a business table, charges, in the same file; then:
//
//  1. Many clients send the same charge (same Idempotency-Key, same body) at
//     the same instant and retry "in flight" answers after their
//     Retry-After: one runs the charge, every other gets its response
//     replayed byte for byte, and the ledger has one row.
//  2. The same key with another body is refused as a conflict.
//  3. A process is killed with SIGKILL while charging, at three points:
//     after claiming the key, after writing the charge but before the
//     commit, and after the commit but before replying. The client then
//     retries the same key until it gets an answer. Before the commit
//     nothing happened, so the retry takes the key over when the dead
//     process's lease ends and charges; after the commit, the retry gets
//     the stored response. Either way the ledger has one row.
//
// The charge and the completion of its key commit in one transaction
// (key.TxGuard.DoTx), which is what makes the crashes harmless. The command
// exits non-zero if any of these checks fails, so it doubles as a test.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem/key"
)

func main() {
	if os.Getenv(envPoint) != "" {
		os.Exit(childMain()) // a crash child: see crash.go
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "charge:", err)
		os.Exit(1)
	}
}

// run is the whole demo. It returns an error if the demo could not run or
// if any invariant failed.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("charge", flag.ContinueOnError)
	dbPath := fs.String("db", "", "create the SQLite file here and keep it (must not exist); default: a temporary file")
	lease := fs.Duration("lease", 500*time.Millisecond, "how long a claim holds its key: a crashed process blocks its key this long")
	clients := fs.Int("clients", 16, "clients sending the same charge at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *clients < 1 {
		return fmt.Errorf("--clients is %d, must be at least 1", *clients)
	}

	path := *dbPath
	if path == "" {
		dir, err := os.MkdirTemp("", "idem-charge-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "charge.db")
	} else if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("--db %s: the file exists; pass a new path, the demo needs fresh keys", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--db: %w", err)
	}

	db, st, err := openLedger(ctx, path, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	guard, err := key.NewTx[*sql.Tx](st, &key.Config{Lease: *lease})
	if err != nil {
		return err
	}
	c := &client{guard: guard, wait: sleep}

	fmt.Fprintf(stdout, "idem: a ledger charged exactly once\nSQLite file %s, lease %v\n", path, *lease)
	var failed []error
	fail := func(err error) {
		if err != nil {
			fmt.Fprintf(stdout, "   FAIL: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
			failed = append(failed, err)
		}
	}

	// 1. Concurrent retries of one charge.
	req := newCharge("o-42", defaultAmount)
	fmt.Fprintf(stdout, "\n1. %d clients send the same charge at once, retrying after Retry-After until answered\n", *clients)
	printRequest(stdout, req)
	rep := sendTogether(ctx, c, *clients, req)
	fmt.Fprintf(stdout, "   first answers:  %v\n", rep.First)
	fmt.Fprintf(stdout, "   final answers:  %v\n", rep.Final)
	if rep.RolledBack > 0 {
		fmt.Fprintf(stdout, "   rolled back:    %d executions ended in an error (fenced: their lease ended first); their charges were undone\n", rep.RolledBack)
	}
	fmt.Fprintf(stdout, "   response:       %s\n", rep.Response)
	fmt.Fprintf(stdout, "   byte-identical: %d of %d final responses\n", rep.Identical, *clients)
	fail(rep.check(*clients))
	rows, err := checkLedger(ctx, db, "o-42", rep.Response)
	fmt.Fprintf(stdout, "   ledger rows for o-42: %d\n", rows)
	fail(err)

	// 2. The same key with another body.
	other := newCharge("o-42", 2*defaultAmount)
	fmt.Fprintf(stdout, "\n2. The same key with another body\n")
	printRequest(stdout, other)
	res, err := guard.DoTx(ctx, other.keyRequest(), chargeOp(other.Body, nil))
	fmt.Fprintf(stdout, "   answer: %v (%v)\n", res.Outcome, err)
	if res.Outcome != key.OutcomeConflict || !errors.Is(err, key.ErrConflict) {
		fail(fmt.Errorf("another body got %v (%v), want Conflict", res.Outcome, err))
	}
	rows, err = checkLedger(ctx, db, "o-42", rep.Response)
	fmt.Fprintf(stdout, "   ledger rows for o-42: %d\n", rows)
	fail(err)

	// 3. A process killed at each point, then retries.
	fmt.Fprintf(stdout, "\n3. A process charging is killed (SIGKILL) at each point; the client retries the same key\n")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   point\tkey\tchild\tclient's answers\tepoch\tledger rows")
	var reports []crashReport
	for i, point := range crashPoints() {
		order := fmt.Sprintf("o-%d", 43+i)
		cr, err := crashAndRetry(ctx, c, db, path, point, order, *lease)
		if err != nil {
			return err
		}
		reports = append(reports, cr)
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%d\t%d\n", point, newCharge(order, defaultAmount).Key, cr.Fate, arrows(cr.Answers), cr.Result.Epoch, cr.Rows)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "   (killed before the commit: nothing happened, the retry takes the key over when the lease ends;\n")
	fmt.Fprintf(stdout, "    killed after it: the retry gets the stored response)\n")
	for _, cr := range reports {
		fail(cr.check())
	}

	if len(failed) > 0 {
		return fmt.Errorf("%d invariants failed: %w", len(failed), errors.Join(failed...))
	}
	fmt.Fprintf(stdout, "\nok: every order charged exactly once, every replay byte-identical\n")
	return nil
}

// printRequest shows req as the HTTP request it stands for.
func printRequest(w io.Writer, req chargeRequest) {
	fmt.Fprintf(w, "   request: %s (principal %s) Idempotency-Key: %s %s\n", operation, req.Principal, req.Key, req.Body)
}

// arrows joins outcomes with arrows: "InFlight → Executed".
func arrows(outcomes []key.Outcome) string {
	s := make([]string, len(outcomes))
	for i, o := range outcomes {
		s[i] = o.String()
	}
	return strings.Join(s, " → ")
}
