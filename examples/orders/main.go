// Command orders shows idem receiving order events exactly once and in
// order, on the embedded SQLite store, with nothing else to run:
//
//	go run ./examples/orders
//
// It is an order service: it listens on 127.0.0.1 for signed order events
// from a shop (CloudEvents 1.0 over HTTP, the idem signature scheme, source
// https://shop.example/orders, subject = the order's id, the sequence
// extension counting each order's events) and keeps an orders table in a
// SQLite file (a temporary one, or --db), in the same file as idem's
// tables: an event's effect is written in the inbox's own transaction, so
// it commits with the event's inbox row or not at all, and the 200 is sent
// only after that commit. It has two endpoints, each a webhook.Handler over
// its own inbox.Processor, on separate orders so that the two modes never
// share a stream:
//
//   - POST /events/snapshot, snapshot mode: each event carries the whole
//     order (status and paid amount). The shop sends order o-1001's eight
//     events, and 8 (SHIPPED) overtakes 7 (PAID): 8 is applied and the gap
//     7..7 recorded; 7 arrives later and is answered "stale" and dropped,
//     since 8 already holds its facts. The order stays SHIPPED.
//   - POST /events/delta, delta mode: each event carries a change ("add 60
//     to paid, set PAID"). Order o-1002's 8 overtakes 7 the same way: 8 is
//     parked (answered "parked", gap 7..7), nothing is applied; when 7
//     arrives the one transaction applies 7 then 8 (answered "processed",
//     applied [7 8]). The paid amount is exactly the sum of the changes:
//     nothing lost, nothing twice.
//
// Then a redelivered event is answered "duplicate" and changes nothing, an
// event whose signature was tampered with is refused (401) and never
// recorded, and an event whose payload cannot be applied is dead-lettered
// (200 with the reason, so that the shop stops retrying) and listed. It
// prints every delivery with its answer and the order's row after it, the
// recorded gaps and dead letters, and the final rows, and exits non-zero if
// any of these differs from what is described here, so it doubles as a
// test.
//
// Flags: --db PATH creates the SQLite file at PATH and keeps it, to look
// at with sqlite3 afterwards; --log also writes idem's own log lines (gaps,
// dead letters) to stderr.
//
// The test redelivery_test.go holds the proof at scale: thousands of events
// delivered one to three times, reordered, to a consumer process killed
// with SIGKILL before and after its commits, and a database restart.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
}

// The demo's orders: one per mode, and one for the bad payload.
const (
	snapshotOrder = "o-1001"
	deltaOrder    = "o-1002"
	badOrder      = "o-1003"
)

// history is the life of an order as the shop sees it: history[i] is what
// the event of sequence i+1 changes. Delta events carry these changes;
// snapshot events carry the order after them (stateAfter).
var history = []change{
	{Status: "CREATED"},
	{Add: 10, Status: "PAYING"},
	{Add: 20},
	{Add: 30},
	{Add: 40},
	{Add: 50},
	{Add: 60, Status: "PAID"},
	{Status: "SHIPPED"},
}

// stateAfter returns the order after the events 1..seq of history.
func stateAfter(seq int64) state {
	var s state
	for _, c := range history[:seq] {
		s.Paid += c.Add
		if c.Status != "" {
			s.Status = c.Status
		}
	}
	return s
}

// arrival is the order in which the shop's events reach the service: 8
// overtakes 7.
var arrival = []int64{1, 2, 3, 4, 5, 6, 8, 7}

// run is the whole demo. It returns an error if the demo could not run or
// if any expectation failed.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	dbPath := fs.String("db", "", "create the SQLite file here and keep it (must not exist); default: a temporary file")
	verbose := fs.Bool("log", false, "also write idem's log lines (gaps, dead letters) to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	path := *dbPath
	if path == "" {
		dir, err := os.MkdirTemp("", "idem-orders-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "orders.db")
	} else if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("--db %s: the file exists; pass a new path, the demo needs fresh orders", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--db: %w", err)
	}

	db, st, err := openOrders(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	defer st.Close()
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	snapshotP, snapshotH, err := newEndpoint(st, order.ModeSnapshot, applyState, log, nil)
	if err != nil {
		return err
	}
	deltaP, deltaH, err := newEndpoint(st, order.ModeDelta, applyChange, log, nil)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(pathSnapshot, snapshotH)
	mux.Handle(pathDelta, deltaH)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	}()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	snd, err := newSender(&http.Client{Transport: transport, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}

	base := "http://" + ln.Addr().String()
	d := &demo{ctx: ctx, db: db, snd: snd, base: base, out: stdout}
	fmt.Fprintf(stdout, "idem: order events applied exactly once and in order\n")
	fmt.Fprintf(stdout, "SQLite file %s (idem's tables and the orders table)\n", path)
	fmt.Fprintf(stdout, "endpoints %s%s (snapshot mode) and %s (delta mode)\n", base, pathSnapshot, pathDelta)
	fmt.Fprintf(stdout, "events: CloudEvents from %s, subject = order, signed (Idem-Signature)\n", source)

	// 1. Snapshot mode.
	fmt.Fprintf(stdout, "\n1. Snapshot mode, order %s: each event carries the whole order; 8 (SHIPPED) arrives before 7 (PAID)\n", snapshotOrder)
	var steps []step
	for _, seq := range arrival {
		s := stateAfter(seq)
		stp := step{to: pathSnapshot, ev: newEvent(typeState, snapshotOrder, seq, s), mode: event.ModeStructured,
			carries: fmt.Sprintf("%s, paid %d", s.Status, s.Paid), want: expect{status: 200, outcome: "processed", applied: []int64{seq}}}
		switch seq {
		case 8:
			stp.want.gap = "7..7"
		case 7:
			stp.want = expect{status: 200, outcome: "stale",
				row: &orderRow{ID: snapshotOrder, Mode: "snapshot", Status: "SHIPPED", Paid: stateAfter(8).Paid, Seq: 8}}
		}
		steps = append(steps, stp)
	}
	d.table(steps)
	d.gaps(snapshotP, snapshotOrder, "7..7 snapshot")
	d.final(snapshotOrder, orderRow{ID: snapshotOrder, Mode: "snapshot", Status: "SHIPPED", Paid: stateAfter(8).Paid, Seq: 8},
		[]int64{1, 2, 3, 4, 5, 6, 8})
	fmt.Fprintf(stdout, "   → the order stays SHIPPED: 8 applied, the older 7 answered stale and dropped (8 already holds its facts)\n")

	// 2. Delta mode.
	fmt.Fprintf(stdout, "\n2. Delta mode, order %s: each event carries a change; 8 (set SHIPPED) arrives before 7 (add 60, set PAID)\n", deltaOrder)
	steps = nil
	for _, seq := range arrival {
		c := history[seq-1]
		stp := step{to: pathDelta, ev: newEvent(typeChange, deltaOrder, seq, c), mode: event.ModeBinary,
			carries: c.String(), want: expect{status: 200, outcome: "processed", applied: []int64{seq}}}
		switch seq {
		case 8:
			stp.want = expect{status: 200, outcome: "parked", gap: "7..7",
				row: &orderRow{ID: deltaOrder, Mode: "delta", Status: "PAYING", Paid: stateAfter(6).Paid, Seq: 6}}
		case 7:
			stp.want.applied = []int64{7, 8}
		}
		steps = append(steps, stp)
	}
	d.table(steps)
	d.gaps(deltaP, deltaOrder, "7..7 delta")
	var sum int64
	var adds []string
	for _, c := range history {
		if c.Add != 0 {
			sum += c.Add
			adds = append(adds, fmt.Sprint(c.Add))
		}
	}
	d.final(deltaOrder, orderRow{ID: deltaOrder, Mode: "delta", Status: "SHIPPED", Paid: sum, Seq: 8}, []int64{1, 2, 3, 4, 5, 6, 7, 8})
	fmt.Fprintf(stdout, "   → 8 waited, parked, until 7 came; then 7 and 8 applied in one transaction, in order.\n")
	fmt.Fprintf(stdout, "     paid %d = %s: nothing lost, nothing twice\n", sum, strings.Join(adds, " + "))

	// 3. Redelivery, forgery, bad payload.
	fmt.Fprintf(stdout, "\n3. A redelivery, a forged event, a payload that cannot be applied\n")
	forged := state{Status: "CANCELLED", Paid: 0}
	bad := newEvent(typeChange, badOrder, 1, nil)
	bad.Data = []byte(`{"add":"ten"}`)
	d.table([]step{
		{to: pathDelta, ev: newEvent(typeChange, deltaOrder, 7, history[6]), mode: event.ModeBinary,
			carries: history[6].String() + " (again)",
			want:    expect{status: 200, outcome: "duplicate", row: &orderRow{ID: deltaOrder, Mode: "delta", Status: "SHIPPED", Paid: sum, Seq: 8}}},
		{to: pathSnapshot, ev: newEvent(typeState, snapshotOrder, 9, forged), mode: event.ModeStructured, tamper: true,
			carries: fmt.Sprintf("%s, paid %d (signature tampered)", forged.Status, forged.Paid),
			want:    expect{status: 401, outcome: "signature-invalid", row: &orderRow{ID: snapshotOrder, Mode: "snapshot", Status: "SHIPPED", Paid: stateAfter(8).Paid, Seq: 8}}},
		{to: pathDelta, ev: bad, mode: event.ModeBinary, carries: string(bad.Data),
			want: expect{status: 200, outcome: "dead_lettered", row: &orderRow{ID: badOrder}}},
	})
	d.deadLetters(deltaP, eventID(badOrder, 1))
	d.check(d.logged(deltaOrder, []int64{1, 2, 3, 4, 5, 6, 7, 8}))
	if n, err := inboxRow(ctx, db, eventID(snapshotOrder, 9)); err != nil || n != 0 {
		d.check(fmt.Errorf("the forged event has %d inbox rows (%v), want none", n, err))
	}

	// Final rows.
	fmt.Fprintf(stdout, "\nFinal rows of orders (and the sequences order_log shows applied, in order)\n")
	rows, err := readOrders(ctx, db)
	d.check(err)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   order_id\tmode\tstatus\tpaid\tseq\tapplied")
	for _, r := range rows {
		seqs, err := loggedSeqs(ctx, db, r.ID)
		d.check(err)
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%d\t%d\t%s\n", r.ID, r.Mode, r.Status, r.Paid, r.Seq, seqList(seqs))
	}
	tw.Flush()
	if len(rows) != 2 {
		d.check(fmt.Errorf("%d rows in orders, want 2 (%s and %s; none for %s, whose apply was undone)", len(rows), snapshotOrder, deltaOrder, badOrder))
	}
	var inboxRows int
	d.check(db.QueryRowContext(ctx, `SELECT count(*) FROM idem_inbox`).Scan(&inboxRows))
	fmt.Fprintf(stdout, "   idem_inbox: %d rows: 8 + 8 events received, 1 dead-lettered; the redelivery added none, the forgery was never recorded\n", inboxRows)
	if inboxRows != 17 {
		d.check(fmt.Errorf("idem_inbox has %d rows, want 17", inboxRows))
	}

	if len(d.failed) > 0 {
		return fmt.Errorf("%d expectations failed: %w", len(d.failed), errors.Join(d.failed...))
	}
	fmt.Fprintf(stdout, "\nok: no event applied twice, no delta lost or applied out of order, the newest snapshot kept\n")
	return nil
}

// String renders a change as the demo prints it: "add 60, set PAID".
func (c change) String() string {
	var parts []string
	if c.Add != 0 {
		parts = append(parts, fmt.Sprintf("add %d", c.Add))
	}
	if c.Status != "" {
		parts = append(parts, "set "+c.Status)
	}
	return strings.Join(parts, ", ")
}

// step is one delivery of the demo and what it must produce.
type step struct {
	to      string // the endpoint's path
	ev      event.Event
	mode    event.Mode
	tamper  bool
	carries string // the payload, for people
	want    expect
}

// expect is what a delivery must produce.
type expect struct {
	status  int
	outcome string  // the 200's outcome, or the problem's slug
	applied []int64 // the sequences the answer says were applied
	gap     string  // the gap the answer reports, "from..to", or ""
	// row is the order's row after the delivery; nil: the event's state
	// (stateAfter of the highest sequence applied) for a processed event.
	row *orderRow
}

// demo runs the deliveries and collects the expectations that failed.
type demo struct {
	ctx    context.Context
	db     *sql.DB
	snd    *sender
	base   string
	out    io.Writer
	failed []error
}

// check records err, if any, as a failed expectation and prints it.
func (d *demo) check(err error) {
	if err != nil {
		fmt.Fprintf(d.out, "   FAIL: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		d.failed = append(d.failed, err)
	}
}

// table delivers the steps in order, printing one line each, then the
// expectations they broke.
func (d *demo) table(steps []step) {
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   to\tevent\tcarries\tas\tHTTP\tanswer\tapplied\tgap\torder after")
	var errs []error
	var notes []string
	for _, s := range steps {
		a, row, err := d.deliver(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.ev.ID, err))
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t-\t(no answer)\t\t\t\n", strings.TrimPrefix(s.to, "/events/"), s.ev.ID, s.carries, s.mode)
			continue
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", strings.TrimPrefix(s.to, "/events/"), s.ev.ID, s.carries, s.mode,
			a.Status, a.Outcome(), seqList(a.Response.Applied), gapString(a.Response.Gap), row)
		if err := s.want.check(a, row, s.ev); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.ev.ID, err))
		}
		if a.Response.Reason != "" {
			notes = append(notes, fmt.Sprintf("   %s's answer says why: %s\n", s.ev.ID, a.Response.Reason))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprint(d.out, n)
	}
	for _, err := range errs {
		d.check(err)
	}
}

// deliver sends one step and reads the order's row after it.
func (d *demo) deliver(s step) (answer, rowView, error) {
	p, err := render(s.ev, s.mode)
	if err != nil {
		return answer{}, rowView{}, err
	}
	a, err := d.snd.post(d.ctx, d.base+s.to, p, s.tamper)
	if err != nil {
		return answer{}, rowView{}, err
	}
	r, ok, err := readOrder(d.ctx, d.db, s.ev.Subject)
	return a, rowView{r, ok}, err
}

// rowView is an order's row as read after a delivery.
type rowView struct {
	orderRow
	ok bool // the row exists
}

func (r rowView) String() string {
	if !r.ok {
		return "(no row)"
	}
	return fmt.Sprintf("%s, paid %d, seq %d", r.Status, r.Paid, r.Seq)
}

// check compares a delivery's answer and the row after it with e.
func (e expect) check(a answer, row rowView, ev event.Event) error {
	var errs []error
	if a.Status != e.status || a.Outcome() != e.outcome {
		errs = append(errs, fmt.Errorf("answer %d %s, want %d %s", a.Status, a.Outcome(), e.status, e.outcome))
	}
	if !slices.Equal(a.Response.Applied, e.applied) {
		errs = append(errs, fmt.Errorf("applied %v, want %v", a.Response.Applied, e.applied))
	}
	if g := gapString(a.Response.Gap); g != orDash(e.gap) {
		errs = append(errs, fmt.Errorf("gap %s, want %s", g, orDash(e.gap)))
	}
	if e.outcome == "dead_lettered" && (a.Response.Reason == "" || len(a.Response.DeadLetters) != 1) {
		errs = append(errs, fmt.Errorf("dead-lettered with reason %q and dead letters %v, want a reason and one", a.Response.Reason, a.Response.DeadLetters))
	}
	want := e.row
	if want == nil && len(e.applied) > 0 {
		last := e.applied[len(e.applied)-1]
		s := stateAfter(last)
		want = &orderRow{ID: ev.Subject, Mode: "delta", Status: s.Status, Paid: s.Paid, Seq: last}
		if ev.Type == typeState {
			want.Mode = "snapshot"
		}
	}
	if want != nil {
		wantView := rowView{*want, want.Mode != ""}
		if row != wantView {
			errs = append(errs, fmt.Errorf("order row %s, want %s", row, wantView))
		}
	}
	return errors.Join(errs...)
}

// gaps prints the gaps the processor recorded for the order and checks them
// against want ("from..to mode", comma separated).
func (d *demo) gaps(p *inbox.Processor[*sql.Tx], orderID, want string) {
	gs, err := p.Gaps(d.ctx, &store.StreamKey{Source: source, Subject: orderID}, 10)
	d.check(err)
	var got []string
	for _, g := range gs {
		mode := "snapshot"
		if g.Delta {
			mode = "delta"
		}
		got = append(got, fmt.Sprintf("%d..%d %s", g.From, g.To, mode))
	}
	what := "skipped: the newer snapshot holds the facts"
	if strings.HasSuffix(want, "delta") {
		what = "held the events behind it until it filled"
	}
	fmt.Fprintf(d.out, "   gaps recorded for %s (Processor.Gaps): %s (%s)\n", orderID, strings.Join(got, ", "), what)
	if strings.Join(got, ", ") != want {
		d.check(fmt.Errorf("gaps of %s: %q, want %q", orderID, got, want))
	}
}

// final checks the order's row and the sequences its log shows applied.
func (d *demo) final(orderID string, want orderRow, seqs []int64) {
	r, ok, err := readOrder(d.ctx, d.db, orderID)
	d.check(err)
	if !ok || r != want {
		d.check(fmt.Errorf("order row %+v, want %+v", r, want))
	}
	d.check(d.logged(orderID, seqs))
}

// logged checks that order_log shows exactly seqs applied to the order, in
// this order: each once.
func (d *demo) logged(orderID string, seqs []int64) error {
	got, err := loggedSeqs(d.ctx, d.db, orderID)
	if err != nil {
		return err
	}
	if !slices.Equal(got, seqs) {
		return fmt.Errorf("order_log of %s shows %v applied, want %v", orderID, got, seqs)
	}
	return nil
}

// deadLetters prints the dead letters and checks that there is one, the
// event id's.
func (d *demo) deadLetters(p *inbox.Processor[*sql.Tx], id string) {
	ds, err := p.DeadLetters(d.ctx, 0, 10)
	d.check(err)
	fmt.Fprintf(d.out, "   dead letters (Processor.DeadLetters; the admin API lists and requeues them):\n")
	for _, dl := range ds {
		fmt.Fprintf(d.out, "     #%d %s (order %s, seq %d), %d attempt(s): %s\n", dl.ID, dl.Key.ID, dl.Stream.Subject, dl.Sequence, dl.Attempts, dl.Reason)
	}
	if len(ds) != 1 || ds[0].Key.ID != id {
		d.check(fmt.Errorf("%d dead letters, want one, of %s", len(ds), id))
	}
}

// inboxRow returns how many inbox rows the event id of source has (0 or 1).
func inboxRow(ctx context.Context, db *sql.DB, id string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM idem_inbox WHERE source = ? AND id = ?`, source, id).Scan(&n)
	return n, err
}

// seqList renders sequences as "[7 8]", or "-" for none.
func seqList(seqs []int64) string {
	if len(seqs) == 0 {
		return "-"
	}
	return fmt.Sprint(seqs)
}

// gapString renders a gap as "7..7", or "-" for none.
func gapString(g *order.Gap) string {
	if g == nil {
		return "-"
	}
	return fmt.Sprintf("%d..%d", g.From, g.To)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
