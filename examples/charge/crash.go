package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/sqlitestore"
)

// A crash child is this program (or its test binary) re-executed with these
// variables set: it charges one order and kills itself at the point.
const (
	envPoint = "IDEM_CHARGE_CRASH" // afterClaim, afterWrite or afterCommit
	envDB    = "IDEM_CHARGE_DB"    // the SQLite file, already migrated
	envOrder = "IDEM_CHARGE_ORDER" // the order to charge defaultAmount for
	envLease = "IDEM_CHARGE_LEASE" // the guard's lease, as time.ParseDuration reads it
)

// crashPoints lists the points in the order the demo visits them.
func crashPoints() []string { return []string{afterClaim, afterWrite, afterCommit} }

// childMain runs a crash child from its environment. It returns only when
// the child failed to die: the exit code then says so.
func childMain() int {
	lease, err := time.ParseDuration(os.Getenv(envLease))
	if err == nil {
		err = crashChild(context.Background(), os.Getenv(envPoint), os.Getenv(envDB), os.Getenv(envOrder), lease)
	}
	fmt.Fprintf(os.Stderr, "charge: crash child (%s=%s): %v\n", envPoint, os.Getenv(envPoint), err)
	return 3
}

// crashChild charges order through its own guard on the file at path and
// kills the process at point. It returns only if it did not die.
func crashChild(ctx context.Context, point, path, order string, lease time.Duration) error {
	if !slices.Contains(crashPoints(), point) {
		return fmt.Errorf("unknown crash point %q", point)
	}
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		return err
	}
	guard, err := key.NewTx[*sql.Tx](st, &key.Config{Lease: lease})
	if err != nil {
		return err
	}
	at := func(p string) {
		if p == point {
			die()
		}
	}
	req := newCharge(order, defaultAmount)
	res, err := guard.DoTx(ctx, req.keyRequest(), chargeOp(req.Body, at))
	if err != nil {
		return fmt.Errorf("charge %s: %v: %w", order, res.Outcome, err)
	}
	if res.Outcome != key.OutcomeExecuted {
		return fmt.Errorf("charge %s: %v, want Executed (is the key new?)", order, res.Outcome)
	}
	at(afterCommit) // the response is stored; the client never gets it
	return errors.New("survived its crash point")
}

// die kills the process with SIGKILL, as kill -9 would: no deferred call
// runs, no transaction is rolled back, no buffer is flushed. (os.Process.Kill
// is SIGKILL on Unix and TerminateProcess on Windows.)
func die() {
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		panic(fmt.Sprintf("charge: cannot kill myself: %v", err))
	}
	select {} // the signal is on its way
}

// crashReport is one crash scenario: a child charging order died at Point,
// then the parent retried the same request until terminal.
type crashReport struct {
	Point   string
	Order   string
	Fate    string        // how the child ended
	Killed  bool          // by SIGKILL
	Answers []key.Outcome // the parent's answers, in order
	Result  key.Result    // the parent's terminal answer
	Err     error         // the error that came with it
	Rows    int           // ledger rows for the order afterwards
	Ledger  error         // the ledger check: one row, the one Result names
	Replay  key.Result    // one more retry of the same request
}

// crashAndRetry spawns a crash child that charges order on the file at
// dbPath with the given lease and dies at point; then it retries the same
// request through c (whose guard is on that file) until terminal, checks
// the ledger through db and retries once more. The error is for failures to
// run the scenario; broken invariants are reported by crashReport.check.
func crashAndRetry(ctx context.Context, c *client, db *sql.DB, dbPath, point, order string, lease time.Duration) (crashReport, error) {
	rep := crashReport{Point: point, Order: order}
	exe, err := os.Executable()
	if err != nil {
		return rep, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(),
		envPoint+"="+point, envDB+"="+dbPath, envOrder+"="+order, envLease+"="+lease.String())
	cmd.Stderr = os.Stderr
	rep.Fate, rep.Killed = fate(cmd.Run())

	req := newCharge(order, defaultAmount)
	rep.Answers, rep.Result, rep.Err = c.send(ctx, req)
	if rep.Err == nil {
		rep.Rows, rep.Ledger = checkLedger(ctx, db, order, rep.Result.Response)
		_, rep.Replay, rep.Err = c.send(ctx, req)
	}
	return rep, nil
}

// fate describes how a child that Run returned err for ended, and reports
// whether SIGKILL ended it.
func fate(err error) (string, bool) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exited 0", false
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			if ws.Signal() == syscall.SIGKILL {
				return "SIGKILL", true
			}
			return "signal: " + ws.Signal().String(), false
		}
		return fmt.Sprintf("exited %d", ee.ExitCode()), false
	default:
		return err.Error(), false
	}
}

// want returns the parent's expected terminal outcome and epoch after a
// crash at point: before the commit nothing happened, so the parent takes
// the key over when the lease ends (epoch 2) and charges; after it, the key
// replays the child's response (epoch 1).
func want(point string) (key.Outcome, int64) {
	if point == afterCommit {
		return key.OutcomeReplayed, 1
	}
	return key.OutcomeExecuted, 2
}

// check returns an error naming every invariant that the scenario broke.
func (r crashReport) check() error {
	var errs []error
	if !r.Killed {
		errs = append(errs, fmt.Errorf("child %s, want killed by SIGKILL", r.Fate))
	}
	if r.Err != nil {
		errs = append(errs, r.Err)
	}
	if o, e := want(r.Point); r.Result.Outcome != o || r.Result.Epoch != e {
		errs = append(errs, fmt.Errorf("parent got %v at epoch %d, want %v at epoch %d", r.Result.Outcome, r.Result.Epoch, o, e))
	}
	if r.Ledger != nil {
		errs = append(errs, r.Ledger)
	}
	if r.Err == nil && (r.Replay.Outcome != key.OutcomeReplayed || string(r.Replay.Response) != string(r.Result.Response)) {
		errs = append(errs, fmt.Errorf("retry got %v %q, want Replayed %q", r.Replay.Outcome, r.Replay.Response, r.Result.Response))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("crash %s (order %s): %w", r.Point, r.Order, err)
	}
	return nil
}
