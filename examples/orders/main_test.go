package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store/sqlitestore"
)

// TestMain turns the test binary into a consumer process when
// TestRedelivery re-executes it (os.Executable is the test binary under go
// test); otherwise it runs the tests and then checks that none left a
// goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(envConsumerDB) != "" {
		os.Exit(consumerMain())
	}
	goleak.VerifyTestMain(m)
}

// TestRun runs the README's command, `go run ./examples/orders`, in process
// and checks what it prints: in both modes sequence 8 arrives before 7, and
// the snapshot order keeps 8 (7 is stale) while the delta order parks 8 and
// applies 7 and 8 together; then the duplicate, the 401 and the dead letter.
func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(t.Context(), nil, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	for _, want := range []string{
		// Snapshot mode: 8 applied with the gap 7..7, then 7 is stale.
		`(?m)^   snapshot +o-1001\.6 +PAYING, paid 150 +structured +200 +processed +\[6\] +- +PAYING, paid 150, seq 6$`,
		`(?m)^   snapshot +o-1001\.8 +SHIPPED, paid 210 +structured +200 +processed +\[8\] +7\.\.7 +SHIPPED, paid 210, seq 8$`,
		`(?m)^   snapshot +o-1001\.7 +PAID, paid 210 +structured +200 +stale +- +- +SHIPPED, paid 210, seq 8$`,
		`(?m)^   gaps recorded for o-1001 \(Processor\.Gaps\): 7\.\.7 snapshot `,
		// Delta mode: 8 parked (nothing applied, gap 7..7), then 7 applies 7 and 8.
		`(?m)^   delta +o-1002\.8 +set SHIPPED +binary +200 +parked +- +7\.\.7 +PAYING, paid 150, seq 6$`,
		`(?m)^   delta +o-1002\.7 +add 60, set PAID +binary +200 +processed +\[7 8\] +- +SHIPPED, paid 210, seq 8$`,
		`(?m)^   gaps recorded for o-1002 \(Processor\.Gaps\): 7\.\.7 delta `,
		`(?m)^     paid 210 = 10 \+ 20 \+ 30 \+ 40 \+ 50 \+ 60: nothing lost, nothing twice$`,
		// A redelivery, a forgery, a bad payload.
		`(?m)^   delta +o-1002\.7 +add 60, set PAID \(again\) +binary +200 +duplicate +- +- +SHIPPED, paid 210, seq 8$`,
		`(?m)^   snapshot +o-1001\.9 +CANCELLED, paid 0 \(signature tampered\) +structured +401 +signature-invalid +- +- +SHIPPED, paid 210, seq 8$`,
		`(?m)^   delta +o-1003\.1 +\{"add":"ten"\} +binary +200 +dead_lettered +- +- +\(no row\)$`,
		`(?m)^     #1 o-1003\.1 \(order o-1003, seq 1\), 1 attempt\(s\): inbox: invalid event: .*cannot unmarshal string`,
		// The final rows.
		`(?m)^   o-1001 +snapshot +SHIPPED +210 +8 +\[1 2 3 4 5 6 8\]$`,
		`(?m)^   o-1002 +delta +SHIPPED +210 +8 +\[1 2 3 4 5 6 7 8\]$`,
		`(?m)^   idem_inbox: 17 rows`,
		`(?m)^ok: `,
	} {
		if !regexp.MustCompile(want).Match(out.Bytes()) {
			t.Errorf("output lacks %s:\n%s", want, &out)
		}
	}
	if strings.Contains(out.String(), "FAIL") {
		t.Errorf("output reports a failure:\n%s", &out)
	}
}

// TestRunKeepsDB runs the demo on a file named by --db and reads the rows it
// leaves there; a second run on the same file is refused.
func TestRunKeepsDB(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "kept.db")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--db", path}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, &out)
	}
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := readOrders(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	want := []orderRow{
		{ID: snapshotOrder, Mode: "snapshot", Status: "SHIPPED", Paid: 210, Seq: 8},
		{ID: deltaOrder, Mode: "delta", Status: "SHIPPED", Paid: 210, Seq: 8},
	}
	if len(rows) != len(want) || rows[0] != want[0] || rows[1] != want[1] {
		t.Errorf("orders %+v, want %+v", rows, want)
	}
	if err := run(t.Context(), []string{"--db", path}, &out); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second run on %s: %v, want refused because the file exists", path, err)
	}
}

// TestExpectCatchesMismatches feeds a delivery's check answers that differ
// from the expectation in each way, so that the demo's exit status is known
// to mean something.
func TestExpectCatchesMismatches(t *testing.T) {
	t.Parallel()
	ev := newEvent(typeChange, deltaOrder, 7, history[6])
	e := expect{status: 200, outcome: "processed", applied: []int64{7, 8}}
	good := answer{Status: 200}
	good.Response.Outcome, good.Response.Applied = "processed", []int64{7, 8}
	row := rowView{orderRow{ID: deltaOrder, Mode: "delta", Status: "SHIPPED", Paid: 210, Seq: 8}, true}
	if err := e.check(good, row, ev); err != nil {
		t.Fatalf("good delivery: %v", err)
	}
	for name, breakIt := range map[string]func(*answer, *rowView){
		"Status":    func(a *answer, _ *rowView) { a.Status, a.Problem = 503, "store-unavailable" },
		"Outcome":   func(a *answer, _ *rowView) { a.Response.Outcome = "parked" },
		"OnlySeven": func(a *answer, _ *rowView) { a.Response.Applied = []int64{7} },
		"Gap":       func(a *answer, _ *rowView) { a.Response.Gap = &order.Gap{From: 7, To: 7} },
		"PaidTwice": func(_ *answer, r *rowView) { r.Paid += 60 },
		"Status8":   func(_ *answer, r *rowView) { r.Status = "PAID" },
		"NoRow":     func(_ *answer, r *rowView) { r.ok = false },
	} {
		a, r := good, row
		a.Response.Applied = slices.Clone(good.Response.Applied)
		breakIt(&a, &r)
		if e.check(a, r, ev) == nil {
			t.Errorf("%s: check passed", name)
		}
	}
}
