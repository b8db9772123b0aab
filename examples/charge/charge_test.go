package main

import (
	"go.uber.org/goleak"

	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/sqlitestore"
)

// TestMain turns the test binary into a crash child when crashAndRetry
// re-executes it (os.Executable is the test binary under go test), exactly
// as main does for the program: run and the tests below spawn children the
// same way.
func TestMain(m *testing.M) {
	if os.Getenv(envPoint) != "" {
		os.Exit(childMain())
	}
	goleak.VerifyTestMain(m)
}

// testLease is the lease of the tests' guards. It is long on purpose: tests
// never wait it out in real time. A parent moves its store's clock past a
// dead child's lease instead, and concurrent clients wait for the winner's
// commit.
const testLease = time.Minute

// setup returns a migrated ledger file in t's temp dir: its path and an
// open handle, closed at cleanup.
func setup(t *testing.T) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "charge.db")
	db, _, err := openLedger(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("openLedger: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return path, db
}

// clockClient returns a client whose guard's store, on db, reads a settable
// clock that starts now; waiting advances the clock instead of sleeping, so
// honouring RetryAfter ends a dead holder's lease at once.
func clockClient(t *testing.T, db *sql.DB) *client {
	t.Helper()
	clock := testclock.New(time.Now())
	st, err := sqlitestore.New(db, &sqlitestore.Config{Now: clock.Now})
	if err != nil {
		t.Fatalf("sqlitestore.New: %v", err)
	}
	guard, err := key.NewTx[*sql.Tx](st, &key.Config{Lease: testLease})
	if err != nil {
		t.Fatalf("key.NewTx: %v", err)
	}
	return &client{guard: guard, wait: func(_ context.Context, d time.Duration) error {
		clock.Advance(d)
		return nil
	}}
}

// TestCrashAtEachPoint kills a child process with SIGKILL at each point of
// a charge, several times with different orders, and checks that the
// parent's retry ends with exactly one ledger row: a takeover that charges
// (epoch 2) when the child died before its commit, a replay of the child's
// response (epoch 1) when it died after.
func TestCrashAtEachPoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		point       string
		wantAnswers []key.Outcome
		wantEpoch   int64
	}{
		{"AfterClaim", afterClaim, []key.Outcome{key.OutcomeInFlight, key.OutcomeExecuted}, 2},
		{"AfterWrite", afterWrite, []key.Outcome{key.OutcomeInFlight, key.OutcomeExecuted}, 2},
		{"AfterCommit", afterCommit, []key.Outcome{key.OutcomeReplayed}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path, db := setup(t)
			for i := range 3 {
				order := fmt.Sprintf("o-%s-%d", tt.point, i)
				rep, err := crashAndRetry(t.Context(), clockClient(t, db), db, path, tt.point, order, testLease)
				if err != nil {
					t.Fatalf("%s: %v", order, err)
				}
				if !rep.Killed {
					t.Errorf("%s: child %s, want killed by SIGKILL", order, rep.Fate)
				}
				if rep.Err != nil {
					t.Fatalf("%s: retry: %v", order, rep.Err)
				}
				if got := arrows(rep.Answers); got != arrows(tt.wantAnswers) {
					t.Errorf("%s: answers %s, want %s", order, got, arrows(tt.wantAnswers))
				}
				if rep.Result.Epoch != tt.wantEpoch {
					t.Errorf("%s: epoch %d, want %d", order, rep.Result.Epoch, tt.wantEpoch)
				}
				if ids, err := ledgerRows(t.Context(), db, order); err != nil || len(ids) != 1 {
					t.Errorf("%s: ledger rows %v (%v), want exactly 1", order, ids, err)
				}
				if rep.Ledger != nil {
					t.Errorf("%s: %v", order, rep.Ledger)
				}
				if rep.Replay.Outcome != key.OutcomeReplayed || !bytes.Equal(rep.Replay.Response, rep.Result.Response) {
					t.Errorf("%s: further retry got %v %q, want Replayed %q", order, rep.Replay.Outcome, rep.Replay.Response, rep.Result.Response)
				}
				if err := rep.check(); err != nil {
					t.Errorf("check: %v", err)
				}
			}
		})
	}
}

// commitSignal is the store with a signal on the first commit of an
// operation's transaction (Claim's own transactions do not pass through
// here), so that waiting clients retry right after it.
type commitSignal struct {
	*sqlitestore.Store
	once      sync.Once
	committed chan struct{}
}

func (s *commitSignal) CommitTx(ctx context.Context, tx *sql.Tx) error {
	err := s.Store.CommitTx(ctx, tx)
	if err == nil {
		s.once.Do(func() { close(s.committed) })
	}
	return err
}

// TestConcurrentRetries releases 64 clients together on one charge, several
// times with different orders: exactly one runs it, the others get its
// response byte for byte, and the ledger has one row. Clients that are told
// the key is in flight wait for the commit rather than for the lease.
func TestConcurrentRetries(t *testing.T) {
	t.Parallel()
	const n = 64
	_, db := setup(t)
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		order := fmt.Sprintf("o-%d", i)
		cs := &commitSignal{Store: st, committed: make(chan struct{})}
		guard, err := key.NewTx[*sql.Tx](cs, &key.Config{Lease: testLease})
		if err != nil {
			t.Fatal(err)
		}
		c := &client{guard: guard, wait: func(ctx context.Context, _ time.Duration) error {
			select {
			case <-cs.committed:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}
		rep := sendTogether(ctx, c, n, newCharge(order, defaultAmount))
		if len(rep.Errors) > 0 {
			t.Fatalf("%s: %v", order, errors.Join(rep.Errors...))
		}
		if rep.Final[key.OutcomeExecuted] != 1 || rep.Final[key.OutcomeReplayed] != n-1 {
			t.Errorf("%s: final answers %v, want Executed 1, Replayed %d", order, rep.Final, n-1)
		}
		if rep.Identical != n {
			t.Errorf("%s: %d of %d responses identical to %q", order, rep.Identical, n, rep.Response)
		}
		if rows, err := checkLedger(ctx, db, order, rep.Response); rows != 1 || err != nil {
			t.Errorf("%s: ledger rows %d (%v), want 1", order, rows, err)
		}
		if err := rep.check(n); err != nil {
			t.Errorf("check: %v", err)
		}
	}
}

// TestRun runs the README's command, `go run ./examples/charge`, in
// process (crash children included) and checks what it prints. It runs on
// the real clock with the default lease, so the lines that depend on timing
// (how many clients arrived while the charge was in flight, whether a dead
// child's lease had ended before the first retry) are matched loosely; the
// invariants are not.
func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), nil, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	for _, want := range []string{
		`(?m)^   first answers:  Executed \d+(, Replayed \d+)?(, InFlight \d+)?$`,
		`(?m)^   final answers:  Executed 1, Replayed 15$`,
		`(?m)^   response:       \{"charge_id":"ch_1","order":"o-42","amount":1000,"status":"succeeded"\}$`,
		`(?m)^   byte-identical: 16 of 16 final responses$`,
		`(?m)^   answer: Conflict \(key: key reused with a different request\)$`,
		`(?m)^   after-claim +charge-o-43 +SIGKILL +(InFlight → )*Executed +2 +1$`,
		`(?m)^   after-write +charge-o-44 +SIGKILL +(InFlight → )*Executed +2 +1$`,
		`(?m)^   after-commit +charge-o-45 +SIGKILL +Replayed +1 +1$`,
		`(?m)^ok: every order charged exactly once, every replay byte-identical$`,
	} {
		if !regexp.MustCompile(want).Match(out.Bytes()) {
			t.Errorf("output lacks %s:\n%s", want, &out)
		}
	}
	if strings.Contains(out.String(), "FAIL") {
		t.Errorf("output reports a failure:\n%s", &out)
	}
	if c := strings.Count(out.String(), "ledger rows for o-42: 1\n"); c != 2 {
		t.Errorf("output shows one ledger row for o-42 %d times, want 2:\n%s", c, &out)
	}
}

// TestRunKeepsDB runs the demo on a file named by --db and reads the ledger
// it leaves: one row per order. A second run on the same file is refused.
func TestRunKeepsDB(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "kept.db")
	args := []string{"--db", path, "--clients", "4"}
	var out bytes.Buffer
	if err := run(t.Context(), args, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT order_id, count(*), sum(amount) FROM charges GROUP BY order_id ORDER BY order_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var order string
		var n, sum int64
		if err := rows.Scan(&order, &n, &sum); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%d:%d", order, n, sum))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := "o-42:1:1000 o-43:1:1000 o-44:1:1000 o-45:1:1000"
	if strings.Join(got, " ") != want {
		t.Errorf("ledger %v, want %s", got, want)
	}

	if err := run(t.Context(), args, &out); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second run on %s: %v, want refused because the file exists", path, err)
	}
}

// TestChecksCatchBrokenInvariants feeds the checks reports that break each
// invariant, so that the program's exit status is known to mean something.
func TestChecksCatchBrokenInvariants(t *testing.T) {
	t.Parallel()
	resp := []byte(`{"charge_id":"ch_1"}`)
	good := crashReport{
		Point: afterWrite, Order: "o-1", Fate: "SIGKILL", Killed: true,
		Answers: []key.Outcome{key.OutcomeInFlight, key.OutcomeExecuted},
		Result:  key.Result{Outcome: key.OutcomeExecuted, Epoch: 2, Response: resp},
		Rows:    1,
		Replay:  key.Result{Outcome: key.OutcomeReplayed, Epoch: 2, Response: resp},
	}
	if err := good.check(); err != nil {
		t.Fatalf("good report: %v", err)
	}
	crashes := map[string]func(*crashReport){
		"ChildSurvived": func(r *crashReport) { r.Fate, r.Killed = "exited 3", false },
		"WrongOutcome":  func(r *crashReport) { r.Result.Outcome = key.OutcomeReplayed },
		"WrongEpoch":    func(r *crashReport) { r.Result.Epoch = 1 },
		"TwoRows":       func(r *crashReport) { r.Rows, r.Ledger = 2, errors.New("2 rows") },
		"ReplayDiffers": func(r *crashReport) { r.Replay.Response = []byte(`{"charge_id":"ch_2"}`) },
		"RetryFailed":   func(r *crashReport) { r.Err = key.ErrFenced },
	}
	for name, breakIt := range crashes {
		r := good
		breakIt(&r)
		if r.check() == nil {
			t.Errorf("crash report %s: check passed", name)
		}
	}

	together := togetherReport{Final: outcomeCounts{key.OutcomeExecuted: 1, key.OutcomeReplayed: 3}, Response: resp, Identical: 4}
	if err := together.check(4); err != nil {
		t.Fatalf("good together report: %v", err)
	}
	for name, r := range map[string]togetherReport{
		"TwoExecuted":   {Final: outcomeCounts{key.OutcomeExecuted: 2, key.OutcomeReplayed: 2}, Response: resp, Identical: 4},
		"ReplayDiffers": {Final: outcomeCounts{key.OutcomeExecuted: 1, key.OutcomeReplayed: 3}, Response: resp, Identical: 3},
		"ClientFailed":  {Final: outcomeCounts{key.OutcomeExecuted: 1, key.OutcomeReplayed: 3}, Response: resp, Identical: 4, Errors: []error{key.ErrUnavailable}},
	} {
		if r.check(4) == nil {
			t.Errorf("together report %s: check passed", name)
		}
	}
}
