package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// The model test drives a Processor over memstore.NewInbox() with random
// sequences of what a sender and a crashing receiver can do (produce,
// deliver, redeliver, reorder, crash before commit, start a new execution,
// let time pass, compensate overdue delta gaps) on a few objects, and
// compares after every step with a model written from the rules of
// inbox/doc.go and order/doc.go, independently of package order's code:
//
//   - the Result of every call (outcome, applied sequences, gap, reset);
//   - the business ledger (one row per applied object/execution/sequence,
//     written by the apply function in the inbox's transaction): exactly the
//     model's, no duplicate effect, nothing lost, in the model's order;
//   - per object and execution, delta effects are exactly 1..n, each once,
//     in order; snapshot effects strictly increase; nothing of an older
//     execution is applied after a newer one;
//   - the store: inbox rows, parked payloads, no dead letters, the gap log.

const modelDeadline = time.Minute

func TestModelSnapshot(t *testing.T) { checkModel(t, "snapshot") }
func TestModelDelta(t *testing.T)    { checkModel(t, "delta") }
func TestModelMixed(t *testing.T)    { checkModel(t, "mixed") }

// evKey names one event the sender produced: object, execution run-<run>,
// sequence. A redelivery carries the same event ID; a republished copy
// (the sender lost track and sent the same change again) a new one.
type evKey struct {
	obj string
	run int
	seq int64
}

func (k evKey) exec() string   { return "run-" + strconv.Itoa(k.run) }
func (k evKey) String() string { return fmt.Sprintf("%s/%s/%d", k.obj, k.exec(), k.seq) }

// event is the CloudEvent for k: the original (dup 0) or republished copy
// dup under another ID.
func (k evKey) event(dup int) event.Event {
	ev := flowtest.FlowEvent(k.obj, k.seq, k.exec(), fmt.Sprintf(`{"obj":%q,"run":%d,"seq":%d}`, k.obj, k.run, k.seq))
	if dup > 0 {
		ev.ID += "#" + strconv.Itoa(dup)
	}
	return ev
}

// Ways an effect reaches the ledger.
const (
	viaEvent   = "event"
	viaRefetch = "refetch" // brought in by the compensation hook
)

type entry struct {
	key evKey
	via string
}

// modelLedger is the business table: rows per key and the order they were
// written in, both joined to the inbox's transaction (undone with it).
type modelLedger struct {
	rows map[evKey]int
	log  []entry
}

func (l *modelLedger) write(tx *memstore.Tx, e entry) {
	n := len(l.log)
	l.rows[e.key]++
	l.log = append(l.log, e)
	tx.OnRollback(func() {
		l.log = l.log[:n]
		if l.rows[e.key]--; l.rows[e.key] == 0 {
			delete(l.rows, e.key)
		}
	})
}

// objModel is one object: the sender's side (its current execution and
// what it produced) and what the receiver must hold.
type objModel struct {
	name string
	mode order.Mode
	// sender
	run  int           // current execution
	sent map[int]int64 // sequences produced per execution
	// receiver
	rank   int                 // execution followed, 0 before the first event
	last   int64               // highest sequence applied (or compensated) of it
	parked []int64             // delta: received after a gap, ascending
	since  map[int64]time.Time // delta: missing sequence -> when its gap opened
}

type model struct {
	objs      map[string]*objModel
	names     []string
	maxParked int
	recorded  map[string]bool // inbox rows by event ID (every committed event)
	applied   map[evKey]bool  // ledger rows
	log       []entry         // ledger order
	gaps      []store.GapRecord
	produced  []evKey
	delivered map[evKey]bool
}

func (m *model) clone() *model {
	c := *m
	c.objs = map[string]*objModel{}
	for n, o := range m.objs {
		oc := *o
		oc.sent = maps.Clone(o.sent)
		oc.parked = slices.Clone(o.parked)
		oc.since = maps.Clone(o.since)
		c.objs[n] = &oc
	}
	c.recorded = maps.Clone(m.recorded)
	c.applied = maps.Clone(m.applied)
	c.log = slices.Clone(m.log)
	c.gaps = slices.Clone(m.gaps)
	c.produced = slices.Clone(m.produced)
	c.delivered = maps.Clone(m.delivered)
	return &c
}

func (m *model) apply(k evKey, via string) {
	if m.applied[k] {
		panic(fmt.Sprintf("model applies %v twice", k))
	}
	m.applied[k] = true
	m.log = append(m.log, entry{k, via})
}

// release applies the parked sequences that follow o.last, in order.
func (m *model) release(o *objModel) []int64 {
	var out []int64
	for len(o.parked) > 0 && o.parked[0] == o.last+1 {
		s := o.parked[0]
		o.parked = o.parked[1:]
		m.apply(evKey{o.name, o.rank, s}, viaEvent)
		o.last = s
		out = append(out, s)
	}
	for s := range o.since {
		if s <= o.last {
			delete(o.since, s)
		}
	}
	if len(o.parked) == 0 {
		o.parked = nil
	}
	return out
}

// expect is what Process must answer.
type expect struct {
	outcome      inbox.Outcome
	backpressure bool // ErrBackpressure, nothing recorded
	applied      []int64
	gap          *order.Gap
	reset        bool
}

// deliver updates the model for the delivery of k under event ID id at now
// (on backpressure the caller restores the model).
func (m *model) deliver(k evKey, id string, now time.Time) expect {
	if m.recorded[id] {
		return expect{outcome: inbox.OutcomeDuplicate}
	}
	o := m.objs[k.obj]
	if k.run < o.rank {
		m.recorded[id] = true
		return expect{outcome: inbox.OutcomeSuperseded}
	}
	var e expect
	if k.run > o.rank {
		e.reset = o.rank != 0
		o.rank, o.last, o.parked, o.since = k.run, 0, nil, map[int64]time.Time{}
	}
	if o.mode == order.ModeSnapshot {
		switch {
		case k.seq == o.last:
			e.outcome = inbox.OutcomeDuplicate
		case k.seq < o.last:
			e.outcome = inbox.OutcomeStale
		default:
			if k.seq > o.last+1 {
				e.gap = &order.Gap{From: o.last + 1, To: k.seq - 1, FirstSeen: now}
				m.gaps = append(m.gaps, store.GapRecord{Stream: streamKey(k.obj), From: o.last + 1, To: k.seq - 1, FirstSeen: now})
			}
			e.outcome, e.applied = inbox.OutcomeProcessed, []int64{k.seq}
			m.apply(k, viaEvent)
			o.last = k.seq
		}
		m.recorded[id] = true
		return e
	}
	switch {
	case k.seq <= o.last || slices.Contains(o.parked, k.seq):
		e.outcome = inbox.OutcomeDuplicate
	case k.seq == o.last+1:
		m.apply(k, viaEvent)
		o.last = k.seq
		e.outcome, e.applied = inbox.OutcomeProcessed, append([]int64{k.seq}, m.release(o)...)
	default:
		if len(o.parked) >= m.maxParked {
			return expect{backpressure: true}
		}
		top := o.last
		if len(o.parked) > 0 {
			top = o.parked[len(o.parked)-1]
		}
		from := o.last + 1
		for _, p := range o.parked {
			if p < k.seq {
				from = p + 1
			}
		}
		if k.seq > top+1 { // a new missing run above everything held
			for s := top + 1; s < k.seq; s++ {
				o.since[s] = now
			}
			m.gaps = append(m.gaps, store.GapRecord{Stream: streamKey(k.obj), From: top + 1, To: k.seq - 1, Delta: true, FirstSeen: now})
		}
		delete(o.since, k.seq)
		i, _ := slices.BinarySearch(o.parked, k.seq)
		o.parked = slices.Insert(o.parked, i, k.seq)
		if from <= k.seq-1 {
			e.gap = &order.Gap{From: from, To: k.seq - 1, FirstSeen: o.since[k.seq-1]}
		}
		e.outcome = inbox.OutcomeParked
	}
	m.recorded[id] = true
	return e
}

type dueGap struct {
	obj string
	gap order.Gap
}

func (d dueGap) String() string { return gapString(d.obj, d.gap) }

func gapString(obj string, g order.Gap) string {
	return fmt.Sprintf("%s:%d..%d@%v", obj, g.From, g.To, g.FirstSeen.Sub(testclock.Epoch0))
}

// overdue lists the first gap of every delta object whose gap opened at
// least deadline before now, in the order the compensator takes them
// (oldest first, then by subject).
func (m *model) overdue(now time.Time, deadline time.Duration) []dueGap {
	var out []dueGap
	for _, n := range m.names {
		o := m.objs[n]
		if o.mode != order.ModeDelta || len(o.parked) == 0 {
			continue
		}
		fs, ok := o.since[o.last+1]
		if !ok {
			panic(fmt.Sprintf("model: %s has parked %v after %d but no gap", n, o.parked, o.last))
		}
		if now.Sub(fs) >= deadline {
			out = append(out, dueGap{n, order.Gap{From: o.last + 1, To: o.parked[0] - 1, FirstSeen: fs}})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].gap.FirstSeen.Before(out[j].gap.FirstSeen) })
	return out
}

// compensate brings the gap's facts in (the hook's refetch rows) and
// releases what was parked behind it.
func (m *model) compensate(d dueGap) {
	o := m.objs[d.obj]
	for s := d.gap.From; s <= d.gap.To; s++ {
		m.apply(evKey{o.name, o.rank, s}, viaRefetch)
	}
	o.last = d.gap.To
	m.release(o)
}

func streamKey(obj string) store.StreamKey {
	return store.StreamKey{Source: flowtest.FlowSource, Subject: obj}
}

// harness is one run: the processor on a fresh memory inbox, its ledger,
// the model, and the crash points armed for the next call.
type harness struct {
	clock *testclock.Clock
	in    *memstore.Inbox
	p     *inbox.Processor[*memstore.Tx]
	// other is a second receiver process on the same inbox: the two take
	// turns (the step "switch"), so that each one's remembered stream
	// states (Config.StreamCache) fall behind what the other committed.
	other  *inbox.Processor[*memstore.Tx]
	led    *modelLedger
	m      *model
	stats  map[string]int
	bad    []string // what the apply function saw that it should not have
	copies int      // republished copies so far (their IDs are unique)

	cancel     context.CancelFunc // of the call in progress
	crashNow   bool               // cancel when the transaction reads the clock
	crashApply int                // cancel after the n-th apply of the call
	crashErr   bool               // and return an error (else nil)
	applyCalls int
	fired      bool
}

func (h *harness) now() time.Time {
	if h.crashNow {
		h.crashNow, h.fired = false, true
		h.cancel()
	}
	return h.clock.Now()
}

func (h *harness) apply(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
	run, err := strconv.Atoi(strings.TrimPrefix(ev.ExecutionID, "run-"))
	k := evKey{ev.Subject, run, ev.Sequence}
	var data struct {
		Obj string
		Run int
		Seq int64
	}
	if err == nil {
		err = json.Unmarshal(ev.Data, &data)
	}
	if err != nil || data.Obj != k.obj || data.Run != k.run || data.Seq != k.seq {
		h.bad = append(h.bad, fmt.Sprintf("apply got event %s (id %s) with data %s (%v)", k, ev.ID, ev.Data, err))
	}
	h.led.write(tx, entry{k, viaEvent})
	h.applyCalls++
	if h.applyCalls == h.crashApply {
		h.fired = true
		h.cancel()
		if h.crashErr {
			return errors.New("crashed before commit")
		}
	}
	return nil
}

func (h *harness) begin() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.applyCalls, h.fired = cancel, 0, false
	return ctx
}

func (h *harness) end() {
	h.cancel()
	h.crashNow, h.crashApply, h.crashErr = false, 0, false
}

func (h *harness) process(k evKey, dup int) (inbox.Result, error) {
	ctx := h.begin()
	defer h.end()
	return h.p.Process(ctx, k.event(dup))
}

func (h *harness) produce(rt *rapid.T, obj string) evKey {
	o := h.m.objs[obj]
	o.sent[o.run]++
	k := evKey{obj, o.run, o.sent[o.run]}
	h.m.produced = append(h.m.produced, k)
	return k
}

// pick draws an event the sender produced: a pending one (never delivered)
// when pending is set, else any (a redelivery, maybe). When there is none
// to pick from, the sender produces one first.
func (h *harness) pick(rt *rapid.T, pending bool) evKey {
	pool := h.m.produced
	if pending {
		var p []evKey
		for _, k := range pool {
			if !h.m.delivered[k] {
				p = append(p, k)
			}
		}
		pool = p
	}
	if len(pool) == 0 {
		return h.produce(rt, rapid.SampledFrom(h.m.names).Draw(rt, "object"))
	}
	return rapid.SampledFrom(pool).Draw(rt, "event")
}

// deliver delivers k (its republished copy dup when dup > 0) and checks
// the Result against the model.
func (h *harness) deliver(rt *rapid.T, k evKey, dup int) {
	before := h.m.clone()
	ev := k.event(dup)
	want := h.m.deliver(k, ev.ID, h.clock.Now())
	switch {
	case dup > 0:
		h.stats["republished"]++
	case h.m.delivered[k]:
		h.stats["redelivery"]++
	}
	res, err := h.process(k, dup)
	if want.backpressure {
		h.m = before
		if !errors.Is(err, inbox.ErrBackpressure) {
			rt.Fatalf("deliver %s: got %+v, %v; want ErrBackpressure (%d parked)", ev.ID, res, err, len(before.objs[k.obj].parked))
		}
		h.stats["backpressure"]++
		return
	}
	if err != nil {
		rt.Fatalf("deliver %s: %v; want %v", ev.ID, err, want.outcome)
	}
	h.stats[res.Outcome.String()]++
	if want.reset {
		h.stats["reset"]++
	}
	if len(res.Applied) > 1 {
		h.stats["released"]++
	}
	if res.Outcome != want.outcome || !slices.Equal(res.Applied, want.applied) || res.Reset != want.reset ||
		!sameGap(res.Gap, want.gap) || res.Attempts != 1 || len(res.DeadLetters) != 0 || res.Reason != "" {
		rt.Fatalf("deliver %s:\n got  outcome %v applied %v reset %v gap %s attempts %d dead %v reason %q\n want outcome %v applied %v reset %v gap %s",
			ev.ID, res.Outcome, res.Applied, res.Reset, fmtGap(res.Gap), res.Attempts, res.DeadLetters, res.Reason,
			want.outcome, want.applied, want.reset, fmtGap(want.gap))
	}
	if dup == 0 {
		h.m.delivered[k] = true
	}
}

func sameGap(a, b *order.Gap) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.From == b.From && a.To == b.To && a.FirstSeen.Equal(b.FirstSeen)
}

func fmtGap(g *order.Gap) string {
	if g == nil {
		return "none"
	}
	return fmt.Sprintf("%d..%d@%v", g.From, g.To, g.FirstSeen.Sub(testclock.Epoch0))
}

// crash delivers k but cancels the call before its transaction commits:
// when it reads the clock, or inside the n-th apply (after the effect is
// written). Nothing may change, and k stays deliverable.
func (h *harness) crash(rt *rapid.T, k evKey) {
	want := h.m.clone().deliver(k, k.event(0).ID, h.clock.Now())
	where := "begin"
	if n := len(want.applied); n > 0 && rapid.Bool().Draw(rt, "crashInApply") {
		h.crashApply = rapid.IntRange(1, n).Draw(rt, "crashAtApply")
		h.crashErr = rapid.Bool().Draw(rt, "crashReturnsError")
		where = fmt.Sprintf("apply %d of %d", h.crashApply, n)
	} else {
		h.crashNow = true
	}
	ctx := h.begin()
	res, err := h.p.Process(ctx, k.event(0))
	fired := h.fired
	h.end()
	if !fired {
		rt.Fatalf("crash of %v at %s: the crash point was never reached (the model expected %v applied); got %+v, %v", k, where, want.applied, res, err)
	}
	refused := want.backpressure && errors.Is(err, inbox.ErrBackpressure)
	if !errors.Is(err, context.Canceled) && !refused {
		rt.Fatalf("crash of %v at %s: got %+v, %v; want the context's error", k, where, res, err)
	}
	h.stats["crash"]++
	h.check(rt) // nothing changed: the model did not move
	if rapid.Bool().Draw(rt, "redeliverAfterCrash") {
		h.deliver(rt, k, 0)
	}
}

// compensateStep runs one Compensate pass with a hook that writes one
// refetch row per missing sequence, and then succeeds, fails, or crashes.
func (h *harness) compensateStep(rt *rapid.T) {
	if rapid.Bool().Draw(rt, "advancePastDeadline") {
		h.clock.Advance(modelDeadline)
	}
	hook := rapid.SampledFrom([]string{"ok", "ok", "fail", "crash"}).Draw(rt, "hook")
	crashErr := rapid.Bool().Draw(rt, "hookCrashReturnsError")
	want := h.m.clone()
	due := want.overdue(h.clock.Now(), modelDeadline)
	var wantCalls []string
	for _, d := range due {
		wantCalls = append(wantCalls, d.String())
		want.compensate(d)
	}
	var calls []string
	fn := func(ctx context.Context, tx *memstore.Tx, sk store.StreamKey, g order.Gap) error {
		calls = append(calls, gapString(sk.Subject, g))
		o := h.m.objs[sk.Subject]
		if o == nil || sk.Source != flowtest.FlowSource {
			return fmt.Errorf("compensating unknown stream %v", sk)
		}
		for s := g.From; s <= g.To; s++ {
			h.led.write(tx, entry{evKey{o.name, o.rank, s}, viaRefetch})
		}
		switch hook {
		case "fail":
			return errors.New("source unreachable")
		case "crash":
			h.fired = true
			h.cancel()
			if crashErr {
				return errors.New("crashed before commit")
			}
		}
		return nil
	}
	ctx := h.begin()
	n, err := h.p.Compensate(ctx, fn)
	fired := h.fired
	h.end()
	if len(due) == 0 {
		if n != 0 || err != nil || len(calls) != 0 {
			rt.Fatalf("compensate (%s hook), nothing overdue: %d compensated, calls %v, %v", hook, n, calls, err)
		}
		return
	}
	h.stats["compensate/"+hook]++
	switch hook {
	case "ok":
		if n != len(due) || err != nil || !slices.Equal(calls, wantCalls) {
			rt.Fatalf("compensate: %d compensated, calls %v, %v; want %d, calls %v", n, calls, err, len(due), wantCalls)
		}
		h.m = want
	case "fail":
		if n != 0 || err == nil || !slices.Equal(calls, wantCalls) {
			rt.Fatalf("compensate (failing hook): %d compensated, calls %v, %v; want 0, calls %v and an error", n, calls, err, wantCalls)
		}
	case "crash":
		if !fired || n != 0 || !errors.Is(err, context.Canceled) || len(calls) == 0 || !slices.Equal(calls, wantCalls[:len(calls)]) {
			rt.Fatalf("compensate (crashing hook): %d compensated, calls %v, %v; want 0, a prefix of %v and the context's error", n, calls, err, wantCalls)
		}
	}
}

// check compares the product with the model, and the ledger with the
// promises that hold whatever the model says.
func (h *harness) check(rt *rapid.T) {
	m := h.m
	if len(h.bad) > 0 {
		rt.Fatalf("%s", strings.Join(h.bad, "\n"))
	}
	for k, n := range h.led.rows {
		if n != 1 {
			rt.Fatalf("ledger: %v has %d rows (a duplicate effect)", k, n)
		}
		if !m.applied[k] {
			rt.Fatalf("ledger: %v applied, the model did not apply it (parked %v, last %d of run-%d)", k, m.objs[k.obj].parked, m.objs[k.obj].last, m.objs[k.obj].rank)
		}
	}
	for k := range m.applied {
		if h.led.rows[k] == 0 {
			rt.Fatalf("ledger: %v lost (the model applied it)", k)
		}
	}
	if !slices.Equal(h.led.log, m.log) {
		rt.Fatalf("ledger order:\n got  %v\n want %v", h.led.log, m.log)
	}

	// Whatever the model says: delta effects per execution are 1..n in
	// order, snapshot ones increase, and an object never goes back to an
	// older execution.
	type runKey struct {
		obj string
		run int
	}
	top := map[runKey]int64{}
	newest := map[string]int{}
	for _, e := range h.led.log {
		k := e.key
		if k.run < newest[k.obj] {
			rt.Fatalf("ledger: %v (%s) applied after run-%d", k, e.via, newest[k.obj])
		}
		newest[k.obj] = k.run
		rk := runKey{k.obj, k.run}
		switch m.objs[k.obj].mode {
		case order.ModeDelta:
			if k.seq != top[rk]+1 {
				rt.Fatalf("ledger: delta %v (%s) applied after %d", k, e.via, top[rk])
			}
		default:
			if k.seq <= top[rk] {
				rt.Fatalf("ledger: snapshot %v applied after %d", k, top[rk])
			}
		}
		top[rk] = k.seq
	}

	events, parked, dead := h.in.Len()
	wantParked := 0
	for _, o := range m.objs {
		wantParked += len(o.parked)
	}
	if events != len(m.recorded) || parked != wantParked || dead != 0 {
		rt.Fatalf("store: %d inbox rows, %d parked, %d dead letters; want %d, %d, 0", events, parked, dead, len(m.recorded), wantParked)
	}
	gaps, err := h.p.Gaps(context.Background(), nil, 1<<20)
	if err != nil {
		rt.Fatal(err)
	}
	if !slices.EqualFunc(gaps, m.gaps, func(a, b store.GapRecord) bool {
		return a.Stream == b.Stream && a.From == b.From && a.To == b.To && a.Delta == b.Delta && a.FirstSeen.Equal(b.FirstSeen)
	}) {
		rt.Fatalf("gap log:\n got  %+v\n want %+v", gaps, m.gaps)
	}
}

func checkModel(t *testing.T, modes string) {
	t.Parallel()
	stats := map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 3).Draw(rt, "objects")
		m := &model{
			objs:      map[string]*objModel{},
			maxParked: rapid.SampledFrom([]int{2, 3, order.DefaultMaxParked}).Draw(rt, "maxParked"),
			recorded:  map[string]bool{},
			applied:   map[evKey]bool{},
			delivered: map[evKey]bool{},
		}
		for i := range n {
			name := string(rune('a' + i))
			mode := order.ModeSnapshot
			switch modes {
			case "delta":
				mode = order.ModeDelta
			case "mixed":
				mode = rapid.SampledFrom([]order.Mode{order.ModeSnapshot, order.ModeDelta}).Draw(rt, "mode-"+name)
			}
			m.names = append(m.names, name)
			m.objs[name] = &objModel{name: name, mode: mode, run: 1, sent: map[int]int64{}, since: map[int64]time.Time{}}
		}
		h := &harness{
			clock: testclock.New(testclock.Epoch0),
			in:    memstore.NewInbox(),
			led:   &modelLedger{rows: map[evKey]int{}},
			m:     m,
			stats: stats,
		}
		cfg := &inbox.Config{
			ModeOf: func(ev event.Event) order.Mode { return h.m.objs[ev.Subject].mode },
			ExecutionRank: func(ev event.Event) int64 {
				r, _ := strconv.ParseInt(strings.TrimPrefix(ev.ExecutionID, "run-"), 10, 64)
				return r
			},
			MaxParked: m.maxParked,
			// Batching on: every event runs its first attempt as a batch of
			// one, whose failure hands it back to run alone.
			Batch:       rapid.SampledFrom([]int{0, 4}).Draw(rt, "batch"),
			Backoff:     time.Millisecond,
			GapDeadline: modelDeadline,
			Now:         h.now,
			Logger:      slog.New(slog.DiscardHandler),
		}
		p, err := inbox.New(h.in, h.apply, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		other, err := inbox.New(h.in, h.apply, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		h.p, h.other = p, other
		object := rapid.SampledFrom(m.names)

		rt.Repeat(map[string]func(*rapid.T){
			"produce": func(rt *rapid.T) {
				obj := object.Draw(rt, "object")
				for range rapid.IntRange(1, 3).Draw(rt, "count") {
					h.produce(rt, obj)
				}
			},
			"deliverPending": func(rt *rapid.T) {
				for range rapid.IntRange(1, 3).Draw(rt, "count") {
					h.deliver(rt, h.pick(rt, true), 0)
				}
			},
			"deliverAny": func(rt *rapid.T) { h.deliver(rt, h.pick(rt, false), 0) },
			"republish": func(rt *rapid.T) {
				h.copies++
				h.deliver(rt, h.pick(rt, false), h.copies)
			},
			"crash": func(rt *rapid.T) { h.crash(rt, h.pick(rt, rapid.Bool().Draw(rt, "pending"))) },
			"newExecution": func(rt *rapid.T) {
				o := h.m.objs[object.Draw(rt, "object")]
				o.run++
				h.stats["newExecution"]++
			},
			"tick": func(rt *rapid.T) {
				h.clock.Advance(rapid.SampledFrom([]time.Duration{time.Second, modelDeadline / 2, modelDeadline}).Draw(rt, "advance"))
			},
			"compensate": func(rt *rapid.T) { h.compensateStep(rt) },
			"switch": func(rt *rapid.T) {
				h.p, h.other = h.other, h.p
				h.stats["switch"]++
			},
			"": func(rt *rapid.T) { h.check(rt) },
		})
	})
	keys := slices.Sorted(maps.Keys(stats))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, stats[k])
	}
	t.Logf("%s:%s", modes, b.String())
}

// TestModelResetParksDiscardedSequence is the shortest failure the model
// found: run-1's sequence 2 is parked (1 missing), then run-2 begins with
// its own sequence 2. The stream follows run-2 and must park that event
// (run-1's parked 2 is discarded); the sender's run-2/1 then releases it.
func TestModelResetParksDiscardedSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	led := &modelLedger{rows: map[evKey]int{}}
	apply := func(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
		run, _ := strconv.Atoi(strings.TrimPrefix(ev.ExecutionID, "run-"))
		led.write(tx, entry{evKey{ev.Subject, run, ev.Sequence}, viaEvent})
		return nil
	}
	clock := testclock.New(testclock.Epoch0)
	p, err := inbox.New(memstore.NewInbox(), apply, &inbox.Config{
		Mode: order.ModeDelta, Now: clock.Now, Backoff: time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		ExecutionRank: func(ev event.Event) int64 {
			r, _ := strconv.ParseInt(strings.TrimPrefix(ev.ExecutionID, "run-"), 10, 64)
			return r
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ev      evKey
		want    inbox.Outcome
		applied []int64
	}{
		{evKey{"a", 1, 2}, inbox.OutcomeParked, nil},
		{evKey{"a", 2, 2}, inbox.OutcomeParked, nil}, // a newer execution: run-1's parked 2 is discarded
		{evKey{"a", 2, 1}, inbox.OutcomeProcessed, []int64{1, 2}},
	}
	for _, s := range steps {
		res, err := p.Process(ctx, s.ev.event(0))
		if err != nil || res.Outcome != s.want || !slices.Equal(res.Applied, s.applied) {
			t.Fatalf("Process(%v) = %v applied %v, %v; want %v applied %v", s.ev, res.Outcome, res.Applied, err, s.want, s.applied)
		}
	}
	want := []entry{{evKey{"a", 2, 1}, viaEvent}, {evKey{"a", 2, 2}, viaEvent}}
	if !slices.Equal(led.log, want) {
		t.Fatalf("ledger %v, want %v", led.log, want)
	}
}
