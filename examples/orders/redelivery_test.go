package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store/sqlitestore"
)

var (
	redeliveryFull = flag.Bool("redelivery.full", false, "run TestRedelivery at full size: 20,000 events over 500 orders, 12 kills")
	redeliverySeed = flag.Uint64("redelivery.seed", 0, "TestRedelivery's seed (0: a new one, which the test logs)")
)

// redeliverySize is the size of a TestRedelivery run.
type redeliverySize struct {
	orders, perOrder int // events = orders × perOrder
	kills            int // consumers killed with SIGKILL, alternately before and after a commit
}

var (
	// shortSize keeps the race detector's run well under a minute on two
	// cores: with -race (and the checkptr checks it turns on), the pure-Go
	// SQLite parses and runs each statement about eight times slower, and
	// the consumer's transactions take turns on the one writer.
	shortSize = redeliverySize{orders: 50, perOrder: 20, kills: 6}
	fullSize  = redeliverySize{orders: 500, perOrder: 40, kills: 12}
)

const (
	// senders is how many goroutines deliver at once.
	senders = 8
	// window bounds how far the shuffle moves an event's first delivery
	// from its place (in deliveries); later copies land up to 4 windows
	// after it. With `interleaved` orders at a time, an order's events sit
	// about that many places apart, so a window holds several events of
	// one stream, out of order: the consumer parks and releases all along.
	// A stream can park at most perOrder-1 events (39), well under the
	// inbox's MaxParked (1024): backpressure (503) is not what this tests.
	window = 64
	// interleaved is how many orders' runs the natural order interleaves.
	interleaved = 8
)

// TestRedelivery is the proof of G7 and G8 (docs/guarantees.md): 20,000
// events over 500 orders (-redelivery.full; by default 1,000 over 50, see
// shortSize), each delivered 1 to 3 times, reordered, to a consumer process
// that is killed with SIGKILL before a commit and after a commit but before
// its 200, and one database restart; every event's effect lands exactly
// once, the inbox holds one row per distinct event, and no event is
// acknowledged before its commit.
//
// The consumer is this test binary re-executed (see consumerMain): the delta
// endpoint of the example (webhook.Handler over an inbox.Processor in
// order.ModeDelta mode, applyChange writing orders and order_log in the inbox's
// transaction) on 127.0.0.1, over the SQLite file the test gives it. Each
// consumer but the last is started with a crash point and kills itself
// there: before-commit:N inside apply, with the Nth event's change written
// in the open transaction; after-commit:N in WriteHeader of the Nth 200,
// which the handler calls only after Process returned, that is after the
// commit. The kinds alternate. Two consumers in four batch the events in
// flight (inbox.Config.Batch), so that one of them is killed with a batch
// of events written in its open transaction, and the test fails unless
// some batches of several events committed.
//
// The producer is the test: each order o-000.. has its run of delta events
// (40 at full size) "add k", k distinct over all events, so that a sum
// shows a lost or doubled event; every event is delivered 1 to 3 times;
// the deliveries are shuffled with a bounded displacement (window); 8
// goroutines send them concurrently, each retrying a delivery (signed
// again, with a fresh timestamp) on a connection error or a 5xx until it
// gets a 200, as a webhook sender does. Any other answer fails the test.
//
// When a consumer has died, before starting the next, the test opens the
// file itself and audits it: every event that was answered 200 so far has
// its inbox row and its effect, exactly once (its order_log row, or, when
// an earlier event of its order is still missing, its parked row); no
// event is applied twice or out of order anywhere; each order's paid amount
// is the sum of the adds of the events it applied. A 200 read before the
// audit was written before the kill, so this checks that an acknowledgement
// never precedes its commit. The audit reads through a read-only connection,
// which leaves the WAL as the killed consumer left it: the next consumer's
// open is the database's crash recovery (SQLite is embedded; its restart is
// the consumer's).
//
// The database restart: once, in the middle, with the consumer dead, the
// test opens the file read-write, runs PRAGMA wal_checkpoint(TRUNCATE) (the
// WAL, recovered, is copied into the main file and truncated to 0 bytes)
// and closes it; the next consumer starts from the checkpointed main file
// alone.
//
// At the end (the last consumer stopped with SIGTERM, cleanly): every
// order's paid is the sum of its events' adds; order_log has exactly one
// row per event (it has no UNIQUE constraint, so a second application
// would show), in sequence order per order; idem_inbox has one row per
// distinct event; nothing is parked, no gap is open, there is no dead
// letter; every delivery got a 200.
//
// The full size:
//
//	go test ./examples/orders -run TestRedelivery -v -redelivery.full
func TestRedelivery(t *testing.T) {
	t.Parallel()
	sz, timeout := shortSize, 3*time.Minute
	if *redeliveryFull {
		sz, timeout = fullSize, 30*time.Minute
	}
	seed := *redeliverySeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-redelivery.seed=%d gives the same deliveries and crash points)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x1de4))
	w, err := newWorkload(rng, sz)
	if err != nil {
		t.Fatal(err)
	}
	plan := crashPlan(rng, sz.kills, w)
	t.Logf("%d events over %d orders (%d each), %d deliveries (events delivered once: %d, twice: %d, three times: %d), shuffled within %d, %d senders",
		len(w.events), sz.orders, sz.perOrder, len(w.deliveries), w.copies[1], w.copies[2], w.copies[3], window, senders)

	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	path := filepath.Join(t.TempDir(), "orders.db")
	db, st, err := openOrders(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db.Close()

	transport := &http.Transport{MaxIdleConnsPerHost: senders}
	snd, err := newSender(&http.Client{Transport: transport, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := newDeliveryRun(w, snd)
	var (
		cur     *consumer
		sending sync.WaitGroup
	)
	t.Cleanup(func() {
		cancel()
		sending.Wait()
		if cur != nil {
			cur.kill()
		}
		transport.CloseIdleConnections()
	})

	cur, err = startConsumer(ctx, path, plan[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	r.url.Store(&cur.url)
	for range senders {
		sending.Go(func() { r.send(ctx) })
	}

	restartAfter := (len(plan) - 1) / 2 // the kill after which the database restarts
	batches := 0                        // of several events, committed by the killed consumers
	for k, cp := range plan {
		select {
		case <-cur.exited:
		case <-r.settled:
			t.Fatalf("every delivery was answered before the consumer reached its crash point %s", cp)
		case <-ctx.Done():
			t.Fatalf("timed out waiting for the consumer to reach its crash point %s", cp)
		}
		if how, killed := fate(cur.err); !killed {
			t.Fatalf("consumer %d (%s) %s, want killed by SIGKILL; its stderr:\n%s", k+1, cp, how, cur.stderr.String())
		}
		batches += strings.Count(cur.stderr.String(), batchCommitted)
		acked := r.ackedSoFar()
		s, err := readState(ctx, path)
		if err != nil {
			t.Fatalf("after kill %d: %v", k+1, err)
		}
		v := &violations{}
		s.checkAcked(w, acked, v)
		s.checkConsistent(w, v)
		if err := v.err(); err != nil {
			t.Errorf("after kill %d (%s): %v", k+1, cp, err)
		}
		t.Logf("kill %d at %v: %s, SIGKILL; audit: %d events answered 200 so far, each committed: inbox row and effect once (%d applied, %d parked behind a gap)",
			k+1, time.Since(began).Round(time.Millisecond), cp, s.ackedCount, s.ackedApplied, s.ackedCount-s.ackedApplied)
		if k == restartAfter {
			before, after, err := checkpoint(ctx, path)
			if err != nil {
				t.Fatalf("database restart: %v", err)
			}
			t.Logf("database restart: consumer down, WAL recovered and checkpointed (TRUNCATE): %d bytes → %d; the next consumer starts from the main file", before, after)
		}
		next := crashPoint{}
		if k+1 < len(plan) {
			next = plan[k+1]
		}
		if cur, err = startConsumer(ctx, path, next, batchOf(k+1)); err != nil {
			t.Fatal(err)
		}
		r.url.Store(&cur.url)
	}
	select {
	case <-r.settled:
	case <-ctx.Done():
		t.Fatalf("timed out with %d deliveries unanswered", r.left.Load())
	}
	sending.Wait()
	if err := r.err(); err != nil {
		t.Fatal(err)
	}
	if how, err := cur.stop(); how != "exited 0" || err != nil {
		t.Fatalf("last consumer, stopped with SIGTERM: %s (%v), want exited 0; its stderr:\n%s", how, err, cur.stderr.String())
	}

	s, err := readState(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	s.checkAcked(w, r.ackedSoFar(), v)
	s.checkConsistent(w, v)
	s.checkFinal(w, v)
	if err := v.err(); err != nil {
		t.Error(err)
	}
	out := r.outcomeCounts()
	recorded := out["processed"] + out["parked"]
	others := len(out) - len(slices.DeleteFunc(slices.Collect(maps.Keys(out)), func(k string) bool { return k != "processed" && k != "parked" && k != "duplicate" }))
	if recorded+out["duplicate"] != len(w.deliveries) || recorded > len(w.events) || others != 0 {
		t.Errorf("answers %v: want processed + parked + duplicate = %d deliveries, processed + parked <= %d events, nothing else",
			out, len(w.deliveries), len(w.events))
	}
	t.Logf("answers: %d processed, %d parked, %d duplicate; %d first answers lost to the kills (recorded, then answered duplicate on retry)",
		out["processed"], out["parked"], out["duplicate"], len(w.events)-recorded)
	t.Logf("attempts: %d for %d deliveries (%d connection errors, %d 5xx answers), every delivery answered 200",
		r.attempts.Load(), len(w.deliveries), r.connErrors.Load(), r.serverErrors.Load())
	t.Logf("end: idem_inbox %d rows = %d distinct events; order_log %d rows, each event once, in sequence order per order; paid = the sum of the adds for all %d orders; %d parked, %d open gaps, %d dead letters",
		s.inboxRows, len(w.events), s.logRows, len(s.orders), len(s.parked), s.openGaps, s.deadLetters)
	t.Logf("%d kills (%d before a commit, %d after one), 1 database restart, wall time %v; the killed consumers that batched committed %d batches of several events",
		len(plan), (len(plan)+1)/2, len(plan)/2, time.Since(began).Round(time.Millisecond), batches)
	if batches == 0 {
		t.Errorf("no batch of several events committed: the batching consumers did not batch")
	}
}

// The consumer process: the test binary with these variables set (see
// TestMain).
const (
	envConsumerDB = "IDEM_ORDERS_CONSUMER_DB" // the SQLite file, created by the parent
	envCrash      = "IDEM_ORDERS_CRASH"       // "" or a crashPoint: before-commit:N, after-commit:N
	envBatch      = "IDEM_ORDERS_BATCH"       // the consumer's inbox.Config.Batch
)

// batchOf is the inbox.Config.Batch of consumer k (from 0): two in four
// batch, so that crash points of both kinds meet batches.
func batchOf(k int) int {
	if k/2%2 == 1 {
		return 8
	}
	return 0
}

// batchCommitted starts the line a consumer writes on stderr for each batch
// of several events it committed.
const batchCommitted = "batch committed:"

// Crash points of a consumer.
const (
	beforeCommit = "before-commit" // in apply, the Nth event's change written, the transaction open
	afterCommit  = "after-commit"  // the Nth 200, committed, not yet written
)

// crashPoint is where a consumer kills itself; the zero value: nowhere.
type crashPoint struct {
	point string
	n     int64
}

func (c crashPoint) String() string {
	if c.point == "" {
		return ""
	}
	return fmt.Sprintf("%s:%d", c.point, c.n)
}

func parseCrashPoint(s string) (crashPoint, error) {
	if s == "" {
		return crashPoint{}, nil
	}
	point, num, _ := strings.Cut(s, ":")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || (point != beforeCommit && point != afterCommit) {
		return crashPoint{}, fmt.Errorf("crash point %q: want %s:N or %s:N with N >= 1", s, beforeCommit, afterCommit)
	}
	return crashPoint{point, n}, nil
}

// crashPlan returns the crash points of the kills consumers, alternating
// before and after a commit, each at a random count in the second half of
// its share of the run (applies or 200s over kills+1), so that the kills
// spread over the run and the last consumer still has work left.
func crashPlan(rng *rand.Rand, kills int, w *workload) []crashPoint {
	phases := int64(kills + 1)
	applies := int64(len(w.events)) / phases
	acks := int64(len(w.deliveries)) / phases
	plan := make([]crashPoint, kills)
	for k := range plan {
		if k%2 == 0 {
			plan[k] = crashPoint{beforeCommit, applies/2 + rng.Int64N(applies/2) + 1}
		} else {
			plan[k] = crashPoint{afterCommit, acks/2 + rng.Int64N(acks/2) + 1}
		}
	}
	return plan
}

// consumerMain runs a consumer from its environment and returns its exit
// code.
func consumerMain() int {
	batch, _ := strconv.Atoi(os.Getenv(envBatch))
	if err := consume(os.Getenv(envConsumerDB), os.Getenv(envCrash), batch); err != nil {
		fmt.Fprintf(os.Stderr, "consumer (%s=%q): %v\n", envCrash, os.Getenv(envCrash), err)
		return 3
	}
	return 0
}

// consume serves the delta endpoint over the file at path on 127.0.0.1,
// batching up to batch events in flight, prints its address on stdout, and
// serves until SIGTERM (then it shuts down cleanly) or its crash point
// (then it is killed).
func consume(path, crash string, batch int) error {
	cp, err := parseCrashPoint(crash)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, st, err := openOrders(ctx, path)
	if err != nil {
		return err
	}
	defer db.Close()
	defer st.Close()

	var applied, acked atomic.Int64
	apply := func(ctx context.Context, tx *sql.Tx, ev event.Event) error {
		if err := applyChange(ctx, tx, ev); err != nil {
			return err
		}
		if cp.point == beforeCommit && applied.Add(1) == cp.n {
			die() // the change is written in tx, which will never commit
		}
		return nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	_, h, err := newEndpoint(st, order.ModeDelta, apply, log, func(c *inbox.Config) {
		c.Batch = batch
		c.Hooks.OnBatch = func(n int, committed bool) {
			if committed {
				fmt.Fprintln(os.Stderr, batchCommitted, n) // the parent counts them
			}
		}
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(pathDelta, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cp.point == afterCommit {
			w = &dieOnAck{ResponseWriter: w, acked: &acked, n: cp.n}
		}
		h.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Println(ln.Addr()); err != nil { // the parent waits for this line
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-served
	return err
}

// dieOnAck kills the process when the handler writes its nth 200 (counted
// over the process): the event is committed, its acknowledgement never
// leaves.
type dieOnAck struct {
	http.ResponseWriter
	acked *atomic.Int64
	n     int64
	wrote bool
}

func (w *dieOnAck) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if code == http.StatusOK && w.acked.Add(1) == w.n {
			die()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *dieOnAck) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// die kills the process with SIGKILL, as kill -9 would: no deferred call
// runs, no transaction is rolled back, no buffer is flushed.
func die() {
	if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
		panic(fmt.Sprintf("consumer: cannot kill myself: %v", err))
	}
	select {} // the signal is on its way
}

// consumer is a consumer process as the parent sees it.
type consumer struct {
	crash  crashPoint
	cmd    *exec.Cmd
	url    string        // its delta endpoint
	exited chan struct{} // closed when it has exited and been waited for
	err    error         // Wait's, once exited is closed
	stderr bytes.Buffer  // read once exited is closed
}

// startConsumer starts a consumer over the file at path, to die at cp, and
// returns once it has printed its address.
func startConsumer(ctx context.Context, path string, cp crashPoint, batch int) (*consumer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	c := &consumer{crash: cp, cmd: exec.Command(exe), exited: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), envConsumerDB+"="+path, envCrash+"="+cp.String(), envBatch+"="+strconv.Itoa(batch))
	c.cmd.Stdout = pw // the child's own end: nothing copies it, Wait does not close pr
	c.cmd.Stderr = &c.stderr
	err = c.cmd.Start()
	pw.Close()
	if err != nil {
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(pr).ReadString('\n') // EOF if it dies first
		line <- s
	}()
	select {
	case s := <-line:
		if addr := strings.TrimSpace(s); addr != "" {
			c.url = "http://" + addr + pathDelta
			return c, nil
		}
		<-c.exited
		how, _ := fate(c.err)
		return nil, fmt.Errorf("consumer (%s) %s before printing its address; its stderr:\n%s", cp, how, c.stderr.String())
	case <-ctx.Done():
		c.kill()
		<-line
		return nil, fmt.Errorf("consumer (%s) did not print its address: %w", cp, ctx.Err())
	}
}

// kill kills the consumer if it still runs and waits for it.
func (c *consumer) kill() {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// stop asks the consumer to shut down (SIGTERM) and returns how it ended.
func (c *consumer) stop() (string, error) {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return "", err
	}
	select {
	case <-c.exited:
		how, _ := fate(c.err)
		return how, nil
	case <-time.After(30 * time.Second):
		c.kill()
		return "", errors.New("still running 30 s after SIGTERM")
	}
}

// fate describes how a process that Wait returned err for ended, and
// reports whether SIGKILL ended it.
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

// testEvent is one event of the workload.
type testEvent struct {
	order string
	seq   int64
	add   int64
	id    string
	p     payload // rendered once (binary mode), signed at each attempt
}

// workload is what the producer sends: the events, and the deliveries (an
// event's index each) in the order they are taken by the senders.
type workload struct {
	events     []testEvent
	deliveries []int
	orders     []string
	byID       map[string]int
	sums       map[string][]int64 // order → sums[k]: the adds of its events 1..k
	copies     [4]int             // events delivered 1, 2 and 3 times
}

// newWorkload builds the events of sz and a delivery list: the orders' runs
// interleaved `interleaved` at a time (the natural order), each event 1 to
// 3 times, its first delivery moved less than window places later and the
// others up to 4 windows later.
func newWorkload(rng *rand.Rand, sz redeliverySize) (*workload, error) {
	w := &workload{byID: map[string]int{}, sums: map[string][]int64{}}
	for o := range sz.orders {
		id := fmt.Sprintf("o-%03d", o)
		w.orders = append(w.orders, id)
		w.sums[id] = []int64{0}
	}
	next := make([]int64, sz.orders)
	var live []int
	waiting := 0
	for ; waiting < min(interleaved, sz.orders); waiting++ {
		live = append(live, waiting)
	}
	for len(live) > 0 {
		k := rng.IntN(len(live))
		o := live[k]
		next[o]++
		add := int64(len(w.events) + 1) // distinct over all events
		ev := newEvent(typeChange, w.orders[o], next[o], change{Add: add})
		p, err := render(ev, event.ModeBinary)
		if err != nil {
			return nil, err
		}
		w.byID[ev.ID] = len(w.events)
		w.events = append(w.events, testEvent{order: ev.Subject, seq: ev.Sequence, add: add, id: ev.ID, p: p})
		w.sums[ev.Subject] = append(w.sums[ev.Subject], w.sums[ev.Subject][next[o]-1]+add)
		if next[o] == int64(sz.perOrder) {
			live = slices.Delete(live, k, k+1)
			if waiting < sz.orders {
				live = append(live, waiting)
				waiting++
			}
		}
	}
	type keyed struct{ key, ev int }
	var ks []keyed
	for i := range w.events {
		n := 1 + rng.IntN(3)
		w.copies[n]++
		ks = append(ks, keyed{i + rng.IntN(window), i})
		for range n - 1 {
			ks = append(ks, keyed{i + rng.IntN(4*window), i})
		}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return cmp.Compare(a.key, b.key) })
	for _, k := range ks {
		w.deliveries = append(w.deliveries, k.ev)
	}
	return w, nil
}

// deliveryRun is the producer: senders take the deliveries in order and
// deliver each until it is answered 200.
type deliveryRun struct {
	w       *workload
	snd     *sender
	url     atomic.Pointer[string] // the live consumer's endpoint
	next    atomic.Int64           // the next delivery to take
	acked   []atomic.Bool          // per event: some delivery of it was answered 200
	left    atomic.Int64           // deliveries without a final answer
	settled chan struct{}          // closed when left reaches 0

	attempts, connErrors, serverErrors atomic.Int64

	mu       sync.Mutex
	outcomes map[string]int // outcomes of the 200 answers
	errs     []error        // deliveries that got an answer other than 200 or 5xx
}

func newDeliveryRun(w *workload, snd *sender) *deliveryRun {
	r := &deliveryRun{w: w, snd: snd, acked: make([]atomic.Bool, len(w.events)), settled: make(chan struct{}), outcomes: map[string]int{}}
	r.left.Store(int64(len(w.deliveries)))
	return r
}

// send is one sender: it delivers the next delivery until none is left.
func (r *deliveryRun) send(ctx context.Context) {
	for ctx.Err() == nil {
		i := r.next.Add(1) - 1
		if i >= int64(len(r.w.deliveries)) {
			return
		}
		r.deliver(ctx, r.w.deliveries[i])
	}
}

// deliver sends event e until it is answered 200, pausing (1 ms, doubling
// to 50 ms) after a connection error or a 5xx. Each attempt is signed
// anew.
func (r *deliveryRun) deliver(ctx context.Context, e int) {
	ev := &r.w.events[e]
	pause := time.Millisecond
	for ctx.Err() == nil {
		r.attempts.Add(1)
		a, err := r.snd.post(ctx, *r.url.Load(), ev.p, false)
		switch {
		case err == nil && a.Status == http.StatusOK:
			if a.Response.ID != ev.id || a.Response.Source != source {
				r.settle(fmt.Errorf("%s: answered for %s %s", ev.id, a.Response.Source, a.Response.ID))
				return
			}
			r.acked[e].Store(true)
			r.mu.Lock()
			r.outcomes[a.Response.Outcome]++
			r.mu.Unlock()
			r.settle(nil)
			return
		case err != nil:
			r.connErrors.Add(1)
		case a.Status >= 500:
			r.serverErrors.Add(1)
		default:
			r.settle(fmt.Errorf("%s: %d %s (%s): only a 200 or a 5xx may answer a valid signed event", ev.id, a.Status, a.Problem, a.Detail))
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// settle records a delivery's final answer: err nil for a 200.
func (r *deliveryRun) settle(err error) {
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
	if r.left.Add(-1) == 0 {
		close(r.settled)
	}
}

func (r *deliveryRun) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

func (r *deliveryRun) outcomeCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.outcomes)
}

// ackedSoFar returns, per event, whether a 200 for it has been read.
func (r *deliveryRun) ackedSoFar() []bool {
	out := make([]bool, len(r.acked))
	for i := range r.acked {
		out[i] = r.acked[i].Load()
	}
	return out
}

// dbState is what the SQLite file holds, read at once.
type dbState struct {
	inbox       map[string]int     // event id → inbox status (1 done, 2 dead)
	applied     map[string]int     // event id → its order_log rows
	parked      map[string]bool    // event ids parked behind a gap
	logs        map[string][]int64 // order → the sequences applied, in application order
	logAdds     map[string]int64   // order → the sum of its order_log add_paid
	orders      map[string]orderRow
	inboxRows   int
	logRows     int
	deadLetters int
	openGaps    int // streams with an open gap

	// Filled by checkAcked.
	ackedCount, ackedApplied int
}

// readState reads the file at path through a read-only connection: unlike
// a read-write one, its close does not checkpoint the WAL and delete it, so
// the next consumer finds the WAL as the killed one left it.
func readState(ctx context.Context, path string) (*dbState, error) {
	db, err := sql.Open(sqlitestore.DriverName, "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	s := &dbState{inbox: map[string]int{}, applied: map[string]int{}, parked: map[string]bool{},
		logs: map[string][]int64{}, logAdds: map[string]int64{}, orders: map[string]orderRow{}}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}) // one snapshot for every query
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	queries := []struct {
		q    string
		scan func(*sql.Rows) error
	}{
		{`SELECT id, status FROM idem_inbox WHERE source = '` + source + `'`, func(rows *sql.Rows) error {
			var id string
			var status int
			err := rows.Scan(&id, &status)
			s.inbox[id] = status
			s.inboxRows++
			return err
		}},
		{`SELECT order_id, seq, event_id, add_paid FROM order_log ORDER BY id`, func(rows *sql.Rows) error {
			var o, id string
			var seq, add int64
			err := rows.Scan(&o, &seq, &id, &add)
			s.applied[id]++
			s.logs[o] = append(s.logs[o], seq)
			s.logAdds[o] += add
			s.logRows++
			return err
		}},
		{`SELECT subject, seq FROM idem_parked WHERE source = '` + source + `'`, func(rows *sql.Rows) error {
			var o string
			var seq int64
			err := rows.Scan(&o, &seq)
			s.parked[eventID(o, seq)] = true
			return err
		}},
		{`SELECT order_id, mode, status, paid, seq FROM orders`, func(rows *sql.Rows) error {
			var o orderRow
			err := rows.Scan(&o.ID, &o.Mode, &o.Status, &o.Paid, &o.Seq)
			s.orders[o.ID] = o
			return err
		}},
		{`SELECT (SELECT count(*) FROM idem_dead_letters), (SELECT count(*) FROM idem_streams WHERE gap_since IS NOT NULL)`, func(rows *sql.Rows) error {
			return rows.Scan(&s.deadLetters, &s.openGaps)
		}},
	}
	for _, q := range queries {
		rows, err := tx.QueryContext(ctx, q.q)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.q, err)
		}
		for rows.Next() {
			if err := q.scan(rows); err != nil {
				rows.Close()
				return nil, fmt.Errorf("%s: %w", q.q, err)
			}
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, fmt.Errorf("%s: %w", q.q, err)
		}
	}
	return s, nil
}

// violations collects broken invariants, keeping the first few messages.
type violations struct {
	n    int
	msgs []string
}

func (v *violations) add(format string, args ...any) {
	v.n++
	if len(v.msgs) < 20 {
		v.msgs = append(v.msgs, fmt.Sprintf(format, args...))
	}
}

func (v *violations) err() error {
	if v.n == 0 {
		return nil
	}
	return fmt.Errorf("%d broken invariants:\n  %s", v.n, strings.Join(v.msgs, "\n  "))
}

// checkAcked checks that every acknowledged event is committed: it has its
// inbox row, done, and its effect exactly once: its order_log row, or its
// parked row while an earlier event of its order is missing.
func (s *dbState) checkAcked(w *workload, acked []bool, v *violations) {
	s.ackedCount, s.ackedApplied = 0, 0
	for e, ok := range acked {
		if !ok {
			continue
		}
		ev := w.events[e]
		s.ackedCount++
		switch st := s.inbox[ev.id]; st {
		case 0:
			v.add("%s was answered 200 but has no inbox row: acknowledged before its commit", ev.id)
		case 1:
		default:
			v.add("%s was answered 200 but its inbox row is %s, want done", ev.id, inboxStatus(st))
		}
		switch n := s.applied[ev.id]; {
		case n == 1:
			s.ackedApplied++
		case n == 0 && !s.parked[ev.id]:
			v.add("%s was answered 200 but is neither applied nor parked: its effect is lost", ev.id)
		}
	}
}

// checkConsistent checks every event and order, acknowledged or not: no
// event applied twice, or both applied and parked, or applied without its
// inbox row; each order's log is its sequences 1..n in order, and its row
// is the sum of exactly those events.
func (s *dbState) checkConsistent(w *workload, v *violations) {
	for id, n := range s.applied {
		if _, known := w.byID[id]; !known {
			v.add("order_log has an unknown event %s", id)
			continue
		}
		if n > 1 {
			v.add("%s applied %d times", id, n)
		}
		if s.parked[id] {
			v.add("%s applied and still parked", id)
		}
		if s.inbox[id] != 1 {
			v.add("%s applied but its inbox row is %s", id, inboxStatus(s.inbox[id]))
		}
	}
	for o, seqs := range s.logs {
		for i, seq := range seqs {
			if seq != int64(i+1) {
				v.add("order %s: applied sequences %v: not 1..%d in order", o, seqs, len(seqs))
				break
			}
		}
		row, ok := s.orders[o]
		n := len(seqs)
		sums := w.sums[o]
		switch {
		case !ok:
			v.add("order %s: %d events applied but no row", o, n)
		case n >= len(sums):
			v.add("order %s: %d events applied, it has %d", o, n, len(sums)-1)
		case row.Paid != sums[n] || s.logAdds[o] != sums[n] || row.Seq != int64(n):
			v.add("order %s: paid %d at seq %d (its log adds %d), want %d, the sum of the adds of events 1..%d",
				o, row.Paid, row.Seq, s.logAdds[o], sums[n], n)
		}
	}
	for o := range s.orders {
		if len(s.logs[o]) == 0 {
			v.add("order %s has a row but no event applied", o)
		}
	}
}

// checkFinal checks the end state: every event applied exactly once (its
// order's paid is the sum of all its adds), one inbox row per distinct
// event, nothing parked or dead, no gap open.
func (s *dbState) checkFinal(w *workload, v *violations) {
	for _, ev := range w.events {
		if s.applied[ev.id] != 1 {
			v.add("%s applied %d times, want exactly once", ev.id, s.applied[ev.id])
		}
	}
	for _, o := range w.orders {
		sums := w.sums[o]
		if row := s.orders[o]; row.Paid != sums[len(sums)-1] {
			v.add("order %s: paid %d, want %d, the sum of its %d adds", o, row.Paid, sums[len(sums)-1], len(sums)-1)
		}
	}
	if s.inboxRows != len(w.events) || s.logRows != len(w.events) {
		v.add("idem_inbox %d rows, order_log %d rows, want %d each: one per distinct event", s.inboxRows, s.logRows, len(w.events))
	}
	if len(s.parked) != 0 || s.deadLetters != 0 || s.openGaps != 0 {
		v.add("%d events still parked, %d dead letters, %d open gaps: want none", len(s.parked), s.deadLetters, s.openGaps)
	}
}

func inboxStatus(st int) string {
	switch st {
	case 0:
		return "missing"
	case 1:
		return "done"
	case 2:
		return "dead"
	}
	return strconv.Itoa(st)
}

// checkpoint is the database restart: with no consumer running, open the
// file read-write (recovering the WAL), copy the WAL into the main file and
// truncate it, close. It returns the WAL's size before and after.
func checkpoint(ctx context.Context, path string) (before, after int64, err error) {
	before = fileSize(path + "-wal")
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return before, 0, err
	}
	defer db.Close()
	var busy, frames, done int
	if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil {
		return before, 0, err
	}
	if busy != 0 {
		return before, 0, fmt.Errorf("wal_checkpoint(TRUNCATE) was blocked (%d frames, %d checkpointed)", frames, done)
	}
	return before, fileSize(path + "-wal"), nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// TestAuditCatchesBrokenInvariants feeds the audit of TestRedelivery states
// that break each invariant, so that its passing is known to mean
// something.
func TestAuditCatchesBrokenInvariants(t *testing.T) {
	t.Parallel()
	w, err := newWorkload(rand.New(rand.NewPCG(1, 2)), redeliverySize{orders: 2, perOrder: 3})
	if err != nil {
		t.Fatal(err)
	}
	all := make([]bool, len(w.events))
	for i := range all {
		all[i] = true
	}
	// good is the end state: every event applied once, in order.
	good := func() *dbState {
		s := &dbState{inbox: map[string]int{}, applied: map[string]int{}, parked: map[string]bool{},
			logs: map[string][]int64{}, logAdds: map[string]int64{}, orders: map[string]orderRow{}}
		for _, o := range w.orders {
			for seq := int64(1); seq <= 3; seq++ {
				ev := w.events[w.byID[eventID(o, seq)]]
				s.inbox[ev.id], s.applied[ev.id] = 1, 1
				s.logs[o] = append(s.logs[o], seq)
				s.logAdds[o] += ev.add
				s.inboxRows++
				s.logRows++
			}
			s.orders[o] = orderRow{ID: o, Mode: "delta", Paid: w.sums[o][3], Seq: 3}
		}
		return s
	}
	audit := func(s *dbState, acked []bool) error {
		v := &violations{}
		s.checkAcked(w, acked, v)
		s.checkConsistent(w, v)
		s.checkFinal(w, v)
		return v.err()
	}
	if err := audit(good(), all); err != nil {
		t.Fatalf("good state: %v", err)
	}
	o := w.orders[0]
	first, last := eventID(o, 1), eventID(o, 3)
	for name, breakIt := range map[string]func(*dbState){
		"AckBeforeCommit": func(s *dbState) { delete(s.inbox, last) },
		"EffectLost": func(s *dbState) {
			delete(s.applied, last)
			s.logs[o] = s.logs[o][:2]
			s.logAdds[o] -= w.events[w.byID[last]].add
			s.orders[o] = orderRow{ID: o, Mode: "delta", Paid: w.sums[o][2], Seq: 2}
		},
		"AppliedTwice": func(s *dbState) { s.applied[first] = 2 },
		"OutOfOrder":   func(s *dbState) { s.logs[o][0], s.logs[o][1] = 2, 1 },
		"PaidWrong":    func(s *dbState) { s.orders[o] = orderRow{ID: o, Mode: "delta", Paid: w.sums[o][3] + 1, Seq: 3} },
		"StillParked":  func(s *dbState) { s.parked[last] = true },
		"DeadLetter":   func(s *dbState) { s.deadLetters = 1 },
		"OpenGap":      func(s *dbState) { s.openGaps = 1 },
		"ExtraInbox":   func(s *dbState) { s.inboxRows++ },
		"DeadInboxRow": func(s *dbState) { s.inbox[first] = 2 },
	} {
		s := good()
		breakIt(s)
		err := audit(s, all)
		if err == nil {
			t.Errorf("%s: the audit passed", name)
		}
		t.Logf("%s: %v", name, err)
	}

	// Mid-run, an acknowledged event may be parked rather than applied, and
	// an unacknowledged one may be missing altogether; neither breaks
	// anything. An acknowledged one that is missing does.
	s := good()
	delete(s.applied, last)
	s.parked[last] = true
	s.logs[o] = s.logs[o][:2]
	s.logAdds[o] -= w.events[w.byID[last]].add
	s.orders[o] = orderRow{ID: o, Mode: "delta", Paid: w.sums[o][2], Seq: 2}
	v := &violations{}
	s.checkAcked(w, all, v)
	s.checkConsistent(w, v)
	if err := v.err(); err != nil || s.ackedApplied != len(w.events)-1 {
		t.Errorf("acknowledged and parked: %v, %d of %d applied", err, s.ackedApplied, len(w.events))
	}
	delete(s.parked, last)
	delete(s.inbox, last)
	acked := slices.Clone(all)
	acked[w.byID[last]] = false
	v = &violations{}
	s.checkAcked(w, acked, v)
	s.checkConsistent(w, v)
	if err := v.err(); err != nil {
		t.Errorf("not acknowledged, not recorded: %v", err)
	}
	v = &violations{}
	s.checkAcked(w, all, v)
	if v.err() == nil {
		t.Errorf("acknowledged, not recorded: the audit passed")
	}
}

// TestParseCrashPoint checks the consumer's crash point syntax.
func TestParseCrashPoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]crashPoint{
		"":                 {},
		"before-commit:1":  {beforeCommit, 1},
		"after-commit:250": {afterCommit, 250},
	} {
		got, err := parseCrashPoint(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("parseCrashPoint(%q) = %v (%q), %v; want %v", in, got, got.String(), err, want)
		}
	}
	for _, in := range []string{"before-commit", "before-commit:0", "after-commit:-1", "during-commit:3", "after-commit:x"} {
		if _, err := parseCrashPoint(in); err == nil {
			t.Errorf("parseCrashPoint(%q): no error", in)
		}
	}
}
