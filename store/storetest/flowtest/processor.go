package flowtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// FlowSource is the CloudEvents source of the events the processor flows send.
const FlowSource = "https://shop.example/orders"

// FlowEvent returns an order event of the flow suite: subject obj, sequence
// seq, execution exec ("" for none), payload data. Its ID is unique per
// (obj, exec, seq).
func FlowEvent(obj string, seq int64, exec, data string) event.Event {
	id := fmt.Sprintf("%s/%s/%d", obj, exec, seq)
	return event.Event{
		ID: id, Source: FlowSource, Type: "order.changed", Subject: obj,
		Sequence: seq, ExecutionID: exec, DataContentType: "application/json", Data: []byte(data),
	}
}

// flowApply is the business side of the flow suite: one ledger row per
// applied event, named "<subject>/<sequence>". Data "bad" is invalid; data
// "flaky:N" fails transiently on its first N calls (counted per event
// across attempts, not rolled back); data "fixed-later" is invalid until
// fixed is set.
type flowApply[TX any] struct {
	ledger storetest.Ledger[TX]
	mu     sync.Mutex
	calls  map[string]int
	fixed  atomic.Bool
}

var errFlaky = errors.New("flaky dependency")

func (a *flowApply[TX]) apply(ctx context.Context, tx TX, ev event.Event) error {
	a.mu.Lock()
	a.calls[ev.ID]++
	n := a.calls[ev.ID]
	a.mu.Unlock()
	// The effect is written first, so that a failure after it proves the
	// rollback undoes it.
	if err := a.ledger.Charge(ctx, tx, ev.Subject+"/"+strconv.FormatInt(ev.Sequence, 10)); err != nil {
		return err
	}
	data := string(ev.Data)
	switch {
	case data == `"bad"`:
		return inbox.Invalid(errors.New("payload says bad"))
	case data == `"fixed-later"` && !a.fixed.Load():
		return inbox.Invalid(errors.New("not fixed yet"))
	case strings.HasPrefix(data, `"flaky:`):
		k, _ := strconv.Atoi(strings.Trim(data[len(`"flaky:`):], `"`))
		if n <= k {
			return errFlaky
		}
	}
	return nil
}

// exerciseProcessor checks inbox.Processor on the store: duplicates,
// snapshot and delta order, dead letters and requeue, retries, halts,
// compensation, executions.
func exerciseProcessor[TX any](t *testing.T, open storetest.Open[TX]) {
	ctx := context.Background()
	type env struct {
		s     store.InboxStore[TX]
		p     *inbox.Processor[TX]
		a     *flowApply[TX]
		clock *testclock.Clock
	}
	setup := func(t *testing.T, mode order.Mode, tweak func(*inbox.Config)) env {
		t.Helper()
		s, ledger := storetest.OpenAs[store.InboxStore[TX]](t, open, nil)
		clock := testclock.New(testclock.Epoch0)
		a := &flowApply[TX]{ledger: ledger, calls: map[string]int{}}
		cfg := &inbox.Config{Mode: mode, Now: clock.Now, Backoff: time.Millisecond, GapDeadline: time.Minute,
			Logger: slog.New(slog.DiscardHandler)}
		if tweak != nil {
			tweak(cfg)
		}
		p, err := inbox.New(s, a.apply, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return env{s: s, p: p, a: a, clock: clock}
	}
	process := func(t *testing.T, e env, ev event.Event, want inbox.Outcome) inbox.Result {
		t.Helper()
		res, err := e.p.Process(ctx, ev)
		if err != nil {
			t.Fatalf("Process(%s): %v", ev.ID, err)
		}
		if res.Outcome != want {
			t.Fatalf("Process(%s) = %v (%s), want %v", ev.ID, res.Outcome, res.Reason, want)
		}
		return res
	}
	rows := func(t *testing.T, e env, obj string, seq int64) int {
		t.Helper()
		return charges(t, e.a.ledger, obj+"/"+strconv.FormatInt(seq, 10))
	}
	deadLetters := func(t *testing.T, e env) []store.DeadLetter {
		t.Helper()
		d, err := e.p.DeadLetters(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	t.Run("ConcurrentRedeliveriesApplyOnce", func(t *testing.T) {
		t.Parallel()
		for _, mode := range []order.Mode{0, order.ModeSnapshot, order.ModeDelta} {
			e := setup(t, mode, nil)
			const n = 16
			var (
				mu       sync.Mutex
				outcomes = map[inbox.Outcome]int{}
			)
			storetest.Concurrently(n, func(int) {
				res, err := e.p.Process(ctx, FlowEvent("o-1", 1, "", `{"paid":10}`))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("mode %v: %v", mode, err)
					return
				}
				outcomes[res.Outcome]++
			})
			if outcomes[inbox.OutcomeProcessed] != 1 || outcomes[inbox.OutcomeDuplicate] != n-1 || rows(t, e, "o-1", 1) != 1 {
				t.Fatalf("mode %v: outcomes %v, ledger rows %d; want 1 processed, %d duplicates, 1 row", mode, outcomes, rows(t, e, "o-1", 1), n-1)
			}
		}
	})

	t.Run("BatchedStreamsApplyOnceInOrder", func(t *testing.T) {
		t.Parallel()
		// Config.Batch: events in flight at once share transactions. Each
		// stream's events go in order from two senders at once (a
		// delivery and its redelivery), so batches hold several streams,
		// and copies of events being applied.
		for _, mode := range []order.Mode{0, order.ModeDelta} {
			e := setup(t, mode, func(c *inbox.Config) { c.Batch = 8 })
			const streams, events = 6, 12
			storetest.Concurrently(2*streams, func(i int) {
				obj := fmt.Sprintf("b-%d", i%streams)
				for seq := int64(1); seq <= events; seq++ {
					res, err := e.p.Process(ctx, FlowEvent(obj, seq, "", `{"add":1}`))
					if err != nil || (res.Outcome != inbox.OutcomeProcessed && res.Outcome != inbox.OutcomeDuplicate) {
						t.Errorf("mode %v: %s seq %d: %+v %v, want processed or duplicate", mode, obj, seq, res, err)
						return
					}
				}
			})
			for i := range streams {
				for seq := int64(1); seq <= events; seq++ {
					if n := rows(t, e, fmt.Sprintf("b-%d", i), seq); n != 1 {
						t.Fatalf("mode %v: b-%d sequence %d applied %d times, want once", mode, i, seq, n)
					}
				}
			}
		}
	})

	t.Run("SnapshotNewerWinsAndGapRecorded", func(t *testing.T) {
		t.Parallel()
		e := setup(t, order.ModeSnapshot, nil)
		process(t, e, FlowEvent("o-1", 6, "", `"PENDING"`), inbox.OutcomeProcessed)
		res := process(t, e, FlowEvent("o-1", 8, "", `"SHIPPED"`), inbox.OutcomeProcessed)
		if res.Gap == nil || res.Gap.From != 7 || res.Gap.To != 7 {
			t.Fatalf("gap = %+v, want 7..7", res.Gap)
		}
		process(t, e, FlowEvent("o-1", 7, "", `"PAID"`), inbox.OutcomeStale)
		process(t, e, FlowEvent("o-1", 8, "", `"SHIPPED"`), inbox.OutcomeDuplicate)
		if rows(t, e, "o-1", 7) != 0 || rows(t, e, "o-1", 8) != 1 {
			t.Fatal("stale snapshot 7 was applied, or 8 not once")
		}
		sk := store.StreamKey{Source: FlowSource, Subject: "o-1"}
		gaps, err := e.p.Gaps(ctx, &sk, 10)
		if err != nil || len(gaps) != 2 || gaps[1].From != 7 || gaps[1].To != 7 || gaps[1].Delta {
			t.Fatalf("recorded gaps %+v, %v; want 1..5 then 7..7, snapshot", gaps, err)
		}
	})

	t.Run("DeltaParksUntilGapFills", func(t *testing.T) {
		t.Parallel()
		e := setup(t, order.ModeDelta, nil)
		process(t, e, FlowEvent("o-1", 1, "", `{"add":1}`), inbox.OutcomeProcessed)
		res := process(t, e, FlowEvent("o-1", 3, "", `{"add":3}`), inbox.OutcomeParked)
		if res.Gap == nil || res.Gap.From != 2 || res.Gap.To != 2 {
			t.Fatalf("gap = %+v", res.Gap)
		}
		process(t, e, FlowEvent("o-1", 4, "", `{"add":4}`), inbox.OutcomeParked)
		process(t, e, FlowEvent("o-1", 3, "", `{"add":3}`), inbox.OutcomeDuplicate)
		if rows(t, e, "o-1", 3) != 0 {
			t.Fatal("parked event applied before its gap filled")
		}
		res = process(t, e, FlowEvent("o-1", 2, "", `{"add":2}`), inbox.OutcomeProcessed)
		if !slices.Equal(res.Applied, []int64{2, 3, 4}) {
			t.Fatalf("applied %v, want [2 3 4]", res.Applied)
		}
		for seq := int64(1); seq <= 4; seq++ {
			if rows(t, e, "o-1", seq) != 1 {
				t.Fatalf("sequence %d applied %d times", seq, rows(t, e, "o-1", seq))
			}
		}
		// Another stream is independent.
		process(t, e, FlowEvent("o-2", 1, "", `{"add":1}`), inbox.OutcomeProcessed)
		if ds := deadLetters(t, e); len(ds) != 0 {
			t.Fatalf("dead letters: %+v", ds)
		}
	})

	t.Run("InvalidIsDeadLetteredAndRequeued", func(t *testing.T) {
		t.Parallel()
		e := setup(t, order.ModeDelta, nil)
		res := process(t, e, FlowEvent("o-1", 1, "", `"fixed-later"`), inbox.OutcomeDeadLettered)
		if len(res.DeadLetters) != 1 || !strings.Contains(res.Reason, "not fixed yet") || res.Attempts != 1 {
			t.Fatalf("result %+v: want one dead letter at the first attempt with the reason", res)
		}
		if rows(t, e, "o-1", 1) != 0 {
			t.Fatal("the dead-lettered event's write was kept")
		}
		process(t, e, FlowEvent("o-1", 1, "", `"fixed-later"`), inbox.OutcomeDuplicate)
		process(t, e, FlowEvent("o-1", 2, "", `{"add":2}`), inbox.OutcomeParked) // waits behind the dead letter
		ds := deadLetters(t, e)
		if len(ds) != 1 || ds[0].Key.ID != "o-1//1" || ds[0].Sequence != 1 || ds[0].Attempts != 1 || !strings.Contains(ds[0].Reason, "not fixed yet") {
			t.Fatalf("dead letters %+v", ds)
		}
		ev, err := inbox.Decode(ds[0].Event)
		if err != nil || string(ev.Data) != `"fixed-later"` || ev.Subject != "o-1" {
			t.Fatalf("stored event %+v, %v", ev, err)
		}
		// Requeued before the fix: dead again, attempts add up.
		res, err = e.p.Requeue(ctx, ds[0].ID)
		if err != nil || res.Outcome != inbox.OutcomeDeadLettered {
			t.Fatalf("requeue before fix: %+v, %v", res, err)
		}
		ds = deadLetters(t, e)
		if len(ds) != 1 || ds[0].Attempts != 2 {
			t.Fatalf("after second failure: %+v", ds)
		}
		e.a.fixed.Store(true)
		res, err = e.p.Requeue(ctx, ds[0].ID)
		if err != nil || res.Outcome != inbox.OutcomeProcessed || !slices.Equal(res.Applied, []int64{1, 2}) {
			t.Fatalf("requeue after fix: %+v, %v", res, err)
		}
		if rows(t, e, "o-1", 1) != 1 || rows(t, e, "o-1", 2) != 1 || len(deadLetters(t, e)) != 0 {
			t.Fatal("requeue did not apply 1 and 2 exactly once")
		}
		if _, err := e.p.Requeue(ctx, ds[0].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("requeue twice: %v, want ErrNotFound", err)
		}
		process(t, e, FlowEvent("o-1", 1, "", `"fixed-later"`), inbox.OutcomeDuplicate)
	})

	t.Run("TransientRetriedThenDeadLettered", func(t *testing.T) {
		t.Parallel()
		e := setup(t, 0, nil)
		res := process(t, e, FlowEvent("o-1", 1, "", `"flaky:2"`), inbox.OutcomeProcessed)
		if res.Attempts != 3 || rows(t, e, "o-1", 1) != 1 {
			t.Fatalf("flaky:2 took %d attempts, %d rows; want 3 and 1 (failed attempts rolled back)", res.Attempts, rows(t, e, "o-1", 1))
		}
		res = process(t, e, FlowEvent("o-2", 1, "", `"flaky:7"`), inbox.OutcomeDeadLettered)
		if res.Attempts != 3 || rows(t, e, "o-2", 1) != 0 || !strings.Contains(res.Reason, "failed 3 times") {
			t.Fatalf("flaky:7: %+v, rows %d", res, rows(t, e, "o-2", 1))
		}
		ds := deadLetters(t, e)
		if len(ds) != 1 || ds[0].Attempts != 3 {
			t.Fatalf("dead letters %+v", ds)
		}
		// Requeue: attempts 4 to 6 fail again (dead again, 6 in all).
		res, _ = e.p.Requeue(ctx, ds[0].ID)
		if res.Outcome != inbox.OutcomeDeadLettered {
			t.Fatalf("requeue 1: %+v", res)
		}
		ds = deadLetters(t, e)
		if len(ds) != 1 || ds[0].Attempts != 6 {
			t.Fatalf("after requeue: %+v", ds)
		}
		// The next requeue fails once more (7) and passes at 8.
		res, err := e.p.Requeue(ctx, ds[0].ID)
		if err != nil || res.Outcome != inbox.OutcomeProcessed || rows(t, e, "o-2", 1) != 1 {
			t.Fatalf("requeue 2: %+v, %v", res, err)
		}
	})

	t.Run("BadReleasedEventHaltsTheChain", func(t *testing.T) {
		t.Parallel()
		e := setup(t, order.ModeDelta, nil)
		process(t, e, FlowEvent("o-1", 1, "", `{}`), inbox.OutcomeProcessed)
		process(t, e, FlowEvent("o-1", 3, "", `"fixed-later"`), inbox.OutcomeParked)
		process(t, e, FlowEvent("o-1", 4, "", `{}`), inbox.OutcomeParked)
		res := process(t, e, FlowEvent("o-1", 2, "", `{}`), inbox.OutcomeProcessed)
		if !slices.Equal(res.Applied, []int64{2}) || len(res.DeadLetters) != 1 {
			t.Fatalf("result %+v: want 2 applied and 3 dead-lettered", res)
		}
		if rows(t, e, "o-1", 2) != 1 || rows(t, e, "o-1", 3) != 0 || rows(t, e, "o-1", 4) != 0 {
			t.Fatal("3 or 4 applied past a bad delta")
		}
		e.a.fixed.Store(true)
		res, err := e.p.Requeue(ctx, res.DeadLetters[0])
		if err != nil || !slices.Equal(res.Applied, []int64{3, 4}) {
			t.Fatalf("requeue of 3: %+v, %v", res, err)
		}
		for seq := int64(1); seq <= 4; seq++ {
			if rows(t, e, "o-1", seq) != 1 {
				t.Fatalf("sequence %d: %d rows", seq, rows(t, e, "o-1", seq))
			}
		}
	})

	t.Run("OverdueGapIsCompensated", func(t *testing.T) {
		t.Parallel()
		e := setup(t, order.ModeDelta, nil)
		process(t, e, FlowEvent("o-1", 1, "", `{}`), inbox.OutcomeProcessed)
		process(t, e, FlowEvent("o-1", 4, "", `{}`), inbox.OutcomeParked)
		process(t, e, FlowEvent("o-2", 2, "", `{}`), inbox.OutcomeParked)
		var calls []string
		fn := func(ctx context.Context, tx TX, sk store.StreamKey, g order.Gap) error {
			calls = append(calls, fmt.Sprintf("%s:%d..%d", sk.Subject, g.From, g.To))
			return e.a.ledger.Charge(ctx, tx, fmt.Sprintf("%s/refetch-%d-%d", sk.Subject, g.From, g.To))
		}
		n, err := e.p.Compensate(ctx, fn)
		if err != nil || n != 0 || len(calls) != 0 {
			t.Fatalf("before the deadline: %d compensated, calls %v, %v", n, calls, err)
		}
		e.clock.Advance(time.Minute)
		// A failing hook leaves the gap and the parked events alone.
		n, err = e.p.Compensate(ctx, func(ctx context.Context, tx TX, sk store.StreamKey, g order.Gap) error {
			if err := e.a.ledger.Charge(ctx, tx, "half-done"); err != nil {
				return err
			}
			return errors.New("source unreachable")
		})
		if err == nil || n != 0 || charges(t, e.a.ledger, "half-done") != 0 {
			t.Fatalf("failing hook: n %d err %v, half-done rows %d", n, err, charges(t, e.a.ledger, "half-done"))
		}
		n, err = e.p.Compensate(ctx, fn)
		if err != nil || n != 2 {
			t.Fatalf("compensated %d, %v; want 2", n, err)
		}
		slices.Sort(calls)
		if !slices.Equal(calls, []string{"o-1:2..3", "o-2:1..1"}) {
			t.Fatalf("hook calls %v", calls)
		}
		if rows(t, e, "o-1", 4) != 1 || rows(t, e, "o-2", 2) != 1 {
			t.Fatal("parked events behind the compensated gaps were not applied")
		}
		// The missing events arriving late are duplicates now.
		process(t, e, FlowEvent("o-1", 2, "", `{}`), inbox.OutcomeDuplicate)
		process(t, e, FlowEvent("o-2", 1, "", `{}`), inbox.OutcomeDuplicate)
		if n, err := e.p.Compensate(ctx, fn); n != 0 || err != nil {
			t.Fatalf("third pass: %d, %v", n, err)
		}
	})

	t.Run("ProjectionFollowsNewestExecution", func(t *testing.T) {
		t.Parallel()
		rank := func(ev event.Event) int64 {
			n, _ := strconv.ParseInt(strings.TrimRight(strings.TrimPrefix(ev.ExecutionID, "run-"), "abc"), 10, 64)
			return n
		}
		e := setup(t, order.ModeDelta, func(c *inbox.Config) { c.ExecutionRank = rank })
		process(t, e, FlowEvent("o-1", 1, "run-1", `{}`), inbox.OutcomeProcessed)
		process(t, e, FlowEvent("o-1", 3, "run-1", `{}`), inbox.OutcomeParked)
		// run-2 parks the very sequence run-1 had parked: run-1's goes.
		res := process(t, e, FlowEvent("o-1", 3, "run-2", `{}`), inbox.OutcomeParked)
		if !res.Reset {
			t.Fatal("first event of run-2 did not reset the stream")
		}
		process(t, e, FlowEvent("o-1", 2, "run-1", `{}`), inbox.OutcomeSuperseded)
		process(t, e, FlowEvent("o-1", 1, "run-2", `{}`), inbox.OutcomeProcessed)
		res = process(t, e, FlowEvent("o-1", 2, "run-2", `{}`), inbox.OutcomeProcessed)
		if !slices.Equal(res.Applied, []int64{2, 3}) {
			t.Fatalf("applied %v, want run-2's 2 and its parked 3", res.Applied)
		}
		// Same rank, other execution: a conflict the event cannot fix.
		res = process(t, e, FlowEvent("o-1", 4, "run-2b", `{}`), inbox.OutcomeDeadLettered)
		if !strings.Contains(res.Reason, "same ExecutionSeq") || rows(t, e, "o-1", 4) != 0 {
			t.Fatalf("conflicting execution: %+v", res)
		}
		if rows(t, e, "o-1", 1) != 2 || rows(t, e, "o-1", 2) != 1 || rows(t, e, "o-1", 3) != 1 {
			t.Fatal("want 1 applied by both runs, 2 and 3 by run-2 only")
		}
	})
}

// charges counts the ledger's committed rows for id.
func charges[TX any](t *testing.T, l storetest.Ledger[TX], id string) int {
	t.Helper()
	n, err := l.Charges(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
