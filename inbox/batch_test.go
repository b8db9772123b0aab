package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// TestBatch builds one batch on purpose (Config.Batch): two events hold
// both leaders' turns, blocked in their apply, while the events of the
// case queue up; once released, the next leader takes them all. Every
// event must end as it would alone: applied once and in order on its
// stream, its own outcome, whatever another event of its batch did (an
// apply that fails for good or once, a commit that fails, a second
// delivery queued beside the first).
func TestBatch(t *testing.T) {
	for _, c := range []struct {
		name string
		// special is the type of the case's one unusual event ("" for
		// none); it goes to stream "x" as sequence 1 ("again": as
		// sequence 2, twice, on x remembered at 1).
		special string
		// batched is whether the case's events commit in one batch.
		batched bool
	}{
		{"all good", "", true},
		{"one invalid", "invalid", false},
		{"one fails once", "flaky", false},
		{"one fails its commit", "commit", false},
		{"a second delivery", "again", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			pool, s := ledgerStore(t)
			// A deferred unique constraint fails the commit, not the
			// statement: the commit case's apply inserts the taken value.
			if _, err := pool.Exec(ctx, `CREATE TABLE taken (v int UNIQUE DEFERRABLE INITIALLY DEFERRED); INSERT INTO taken VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			var (
				g         = newGates()
				mu        sync.Mutex
				flaked    bool
				committed atomic.Int64
			)
			p, err := inbox.New(s, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
				g.wait(ev)
				switch ev.Type {
				case "invalid":
					return inbox.Invalid(errors.New("not an order"))
				case "flaky":
					mu.Lock()
					first := !flaked
					flaked = true
					mu.Unlock()
					if first {
						return errors.New("the ledger is busy")
					}
				case "commit":
					if _, err := tx.Exec(ctx, `INSERT INTO taken VALUES (1)`); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, `INSERT INTO ledger (subject, seq) VALUES ($1, $2)`, ev.Subject, ev.Sequence)
				return err
			}, &inbox.Config{Mode: order.ModeDelta, Batch: 16, Backoff: time.Millisecond, Logger: slog.New(slog.DiscardHandler),
				Hooks: inbox.Hooks{OnBatch: countCommitted(&committed, nil)}})
			if err != nil {
				t.Fatal(err)
			}
			ev := func(typ, subject string, seq int64) event.Event {
				return event.Event{Source: "https://shop.example/orders", ID: fmt.Sprintf("%s-%d", subject, seq), Type: typ,
					Subject: subject, Sequence: seq, Data: []byte(`{}`), DataContentType: "application/json"}
			}
			send, answers := sender(ctx, p)
			if c.special == "again" {
				// Stream x remembered at 1: its sequence 2 takes the
				// path that records the event with a plain insert.
				if res, err := p.Process(ctx, ev("order.paid", "x", 1)); err != nil || res.Outcome != inbox.OutcomeProcessed {
					t.Fatalf("x-1: %+v %v", res, err)
				}
			}
			g.holdLeaders(send)
			// Both leaders are busy: these queue. Stream "a" gets its
			// sequences 1 to 3, of which a batch takes one (the first
			// queued), "b" and "c" one each.
			batch := []event.Event{ev("order.paid", "a", 3), ev("order.paid", "a", 1), ev("order.paid", "b", 1), ev("order.paid", "a", 2), ev("order.paid", "c", 1)}
			switch c.special {
			case "":
			case "again": // a delivery and its copy, which waits for the next batch
				batch = append(batch, ev("again", "x", 2), ev("again", "x", 2))
			default:
				batch = append(batch, ev(c.special, "x", 1))
			}
			for _, e := range batch {
				send(e)
			}
			waitQueued(t, p, len(batch))
			// One leader's turn is given back: the case's events go as one
			// batch, while the other leader's stays taken, so that what is
			// left (a copy) waits for that batch's end.
			g.open("blk-a")
			got := map[string][]answer{}
			for range len(batch) + 1 {
				a := <-answers
				got[a.ev.Subject] = append(got[a.ev.Subject], a)
			}
			g.open("blk-b")
			a := <-answers
			got[a.ev.Subject] = append(got[a.ev.Subject], a)
			if n := committed.Load(); (n > 0) != c.batched {
				t.Errorf("%d batches committed, want batched %v", n, c.batched)
			}
			// Every ordinary event: processed (or parked until its
			// predecessor came: stream a's events queue in any order, and
			// go in separate batches in that order), its effect once, in
			// order on its stream.
			for subject, want := range map[string]string{"a": "[1 2 3]", "b": "[1]", "c": "[1]", "blk-a": "[1]", "blk-b": "[1]"} {
				for _, a := range got[subject] {
					parked := (subject == "a" || !c.batched) && a.res.Outcome == inbox.OutcomeParked
					if a.err != nil || (a.res.Outcome != inbox.OutcomeProcessed && !parked) {
						t.Errorf("%s seq %d: %+v %v, want processed", subject, a.ev.Sequence, a.res, a.err)
					}
				}
				if l := fmt.Sprint(ledgerSeqs(t, pool, subject)); l != want {
					t.Errorf("%s's effects %s, want %s", subject, l, want)
				}
			}
			x := got["x"]
			outcomes := func() (o []string) {
				for _, a := range x {
					o = append(o, fmt.Sprint(a.res.Outcome, " ", a.err != nil))
				}
				slices.Sort(o)
				return o
			}
			switch c.special {
			case "invalid":
				if o := fmt.Sprint(outcomes()); o != "[dead_lettered false]" {
					t.Errorf("the invalid event: %s, want dead-lettered", o)
				}
				if l := ledgerSeqs(t, pool, "x"); len(l) != 0 {
					t.Errorf("the invalid event's effects %v, want none", l)
				}
			case "flaky", "again":
				want := map[string]string{"flaky": "[processed false]", "again": "[duplicate false processed false]"}[c.special]
				if o := fmt.Sprint(outcomes()); o != want {
					t.Errorf("x: %s, want %s", o, want)
				}
				if c.special == "flaky" && x[0].res.Attempts != 2 {
					t.Errorf("the event that failed once: %d attempts, want 2 (its attempt in the batch counts)", x[0].res.Attempts)
				}
				want = map[string]string{"flaky": "[1]", "again": "[1 2]"}[c.special]
				if l := fmt.Sprint(ledgerSeqs(t, pool, "x")); l != want {
					t.Errorf("x's effects %s, want %s", l, want)
				}
			case "commit":
				if len(x) != 1 || !errors.Is(x[0].err, inbox.ErrUnavailable) {
					t.Errorf("the event whose commit fails: %+v, want ErrUnavailable", x)
				}
				if l := ledgerSeqs(t, pool, "x"); len(l) != 0 {
					t.Errorf("its effects %v, want none", l)
				}
			}
			// Redelivered, every event is a duplicate (a dead letter's too);
			// the one whose commit failed is new again, and fails again.
			for _, e := range batch {
				res, err := p.Process(ctx, e)
				if c.special == "commit" && e.Subject == "x" {
					if !errors.Is(err, inbox.ErrUnavailable) {
						t.Errorf("%s redelivered: %+v %v, want ErrUnavailable", e.ID, res, err)
					}
					continue
				}
				if err != nil || res.Outcome != inbox.OutcomeDuplicate {
					t.Errorf("%s redelivered: %+v %v, want duplicate", e.ID, res, err)
				}
			}
		})
	}
}

// TestBatchRedeliveryElsewhere: a batch takes one event per stream. With
// two of stream s in one batch, the batch would hold s's lock (from the
// first) while it inserts the second's inbox row, which a redelivery of
// that second event, run meanwhile by another processor, would already
// hold while it waits for s's lock: a deadlock that PostgreSQL breaks only
// after deadlock_timeout, failing one side. Here the second event waits
// for a later batch, and nothing fails.
func TestBatchRedeliveryElsewhere(t *testing.T) {
	ctx := context.Background()
	pool, s := ledgerStore(t)
	g := newGates()
	apply := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		g.wait(ev)
		_, err := tx.Exec(ctx, `INSERT INTO ledger (subject, seq) VALUES ($1, $2)`, ev.Subject, ev.Sequence)
		return err
	}
	var abandoned atomic.Int64
	cfg := &inbox.Config{Mode: order.ModeDelta, Batch: 16, Logger: slog.New(slog.DiscardHandler),
		Hooks: inbox.Hooks{OnBatch: countCommitted(nil, &abandoned)}}
	p, err := inbox.New(s, apply, cfg)
	if err != nil {
		t.Fatal(err)
	}
	other, err := inbox.New(s, apply, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(typ, subject string, seq int64) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: fmt.Sprintf("%s-%d", subject, seq), Type: typ,
			Subject: subject, Sequence: seq, Data: []byte(`{}`), DataContentType: "application/json"}
	}
	errs := make(chan error, 8)
	send := func(p *inbox.Processor[pgx.Tx], e event.Event) {
		go func() {
			res, err := p.Process(ctx, e)
			if err == nil && res.Outcome != inbox.OutcomeProcessed && res.Outcome != inbox.OutcomeDuplicate {
				err = fmt.Errorf("%s: %v", e.ID, res.Outcome)
			}
			errs <- err
		}()
	}
	g.holdLeaders(func(e event.Event) { send(p, e) })
	queueInOrder(t, p, func(e event.Event) { send(p, e) }, ev("block", "s", 1), ev("order.paid", "s", 2))
	g.open("blk-a") // a leader takes the waiting events: s-1 only
	if w := <-g.started; w != "s" {
		t.Fatalf("%s started, want s", w)
	}
	// The redelivery of s-2 elsewhere records it and waits for s's lock
	// (there is no other signal that it waits).
	send(other, ev("order.paid", "s", 2))
	time.Sleep(100 * time.Millisecond)
	g.open("s")
	g.open("blk-b")
	for range 5 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := abandoned.Load(); n != 0 {
		t.Errorf("%d batches abandoned, want none", n)
	}
	if l := fmt.Sprint(ledgerSeqs(t, pool, "s")); l != "[1 2]" {
		t.Errorf("s's effects %s, want [1 2]", l)
	}
}

// TestBatchCallbackPanics: a callback that panics (here ExecutionRank, for
// the events of one stream) gives its batch up; every event of the batch
// runs again alone, where the panic surfaces in that event's own caller,
// and the other events are processed. No leader's turn is lost: events
// that come after are processed too.
func TestBatchCallbackPanics(t *testing.T) {
	ctx := context.Background()
	in := memstore.NewInbox()
	var applied sync.Map
	p, err := inbox.New(in, func(_ context.Context, tx *memstore.Tx, ev event.Event) error {
		if _, again := applied.LoadOrStore(ev.ID, true); again {
			return inbox.Invalid(fmt.Errorf("%s applied twice", ev.ID))
		}
		tx.OnRollback(func() { applied.Delete(ev.ID) }) // an effect of the transaction
		return nil
	}, &inbox.Config{Mode: order.ModeDelta, Batch: 8, Logger: slog.New(slog.DiscardHandler),
		ExecutionRank: func(ev event.Event) int64 {
			if ev.Type == "boom" {
				panic("rank of " + ev.ID)
			}
			return 1
		}})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(typ, subject string) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: typ + "-" + subject, Type: typ,
			Subject: subject, Sequence: 1, Data: []byte(`{}`), DataContentType: "application/json"}
	}
	process := func(e event.Event) (res inbox.Result, err error, panicked any) {
		defer func() { panicked = recover() }()
		res, err = p.Process(ctx, e)
		return res, err, nil
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 12 {
			typ := "ok"
			if i%4 == 0 {
				typ = "boom"
			}
			e := ev(typ, fmt.Sprintf("r%d-%d", round, i))
			wg.Go(func() {
				res, err, panicked := process(e)
				switch {
				case typ == "boom" && panicked != "rank of "+e.ID:
					t.Errorf("%s: panicked %v (%+v %v), want its own panic", e.ID, panicked, res, err)
				case typ == "ok" && (panicked != nil || err != nil || res.Outcome != inbox.OutcomeProcessed):
					t.Errorf("%s: %+v %v, panicked %v; want processed", e.ID, res, err, panicked)
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Process calls still waiting after 30 s", round)
		}
	}
}

// TestBatchSubjectsInOneOrder: events of no order on two subjects, whose
// apply locks its subject's row, go as two batches at once. A batch runs
// its events in the order of their subjects (not their IDs), so the two
// lock the rows in one order and never deadlock; a redelivery of one of
// them, in a batch of its own, is answered as a duplicate without failing
// its batch.
func TestBatchSubjectsInOneOrder(t *testing.T) {
	ctx := context.Background()
	pool, s := ledgerStore(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE proj (subject text PRIMARY KEY, n int NOT NULL); INSERT INTO proj VALUES ('X', 0), ('W', 0)`); err != nil {
		t.Fatal(err)
	}
	g := newGates()
	var abandoned, committed atomic.Int64
	p, err := inbox.New(s, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if g.wait(ev) {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE proj SET n = n + 1 WHERE subject = $1`, ev.Subject); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond) // the other batch meanwhile locks its first row
		return nil
	}, &inbox.Config{Batch: 2, Logger: slog.New(slog.DiscardHandler), Hooks: inbox.Hooks{OnBatch: countCommitted(&committed, &abandoned)}})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(typ, id, subject string) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: id, Type: typ, Subject: subject, Data: []byte(`{}`), DataContentType: "application/json"}
	}
	if res, err := p.Process(ctx, ev("t", "old", "")); err != nil || res.Outcome != inbox.OutcomeProcessed {
		t.Fatalf("old: %+v %v", res, err)
	}
	send, answers := sender(ctx, p)
	g.holdLeaders(send)
	// By ID, the first two go X then W and the next two W then X.
	queued := []event.Event{ev("t", "a", "X"), ev("t", "z", "W"), ev("t", "b", "W"), ev("t", "y", "X"), ev("t", "old", ""), ev("t", "new", "")}
	queueInOrder(t, p, send, queued...)
	g.open("blk-a")
	g.open("blk-b")
	for range len(queued) + 2 {
		a := <-answers
		want := inbox.OutcomeProcessed
		if a.ev.ID == "old" {
			want = inbox.OutcomeDuplicate
		}
		if a.err != nil || a.res.Outcome != want || a.res.Attempts != 1 {
			t.Errorf("%s: %+v %v, want %v at the first attempt", a.ev.ID, a.res, a.err, want)
		}
	}
	if n := abandoned.Load(); n != 0 || committed.Load() == 0 {
		t.Errorf("%d batches abandoned, %d committed; want none abandoned", n, committed.Load())
	}
	var x, w int
	if err := pool.QueryRow(ctx, `SELECT (SELECT n FROM proj WHERE subject = 'X'), (SELECT n FROM proj WHERE subject = 'W')`).Scan(&x, &w); err != nil || x != 2 || w != 2 {
		t.Errorf("X %d, W %d (%v), want 2 each", x, w, err)
	}
}

// TestBatchAttemptsAsAlone: an event whose attempt fails in a batch, a lone
// one or among others, goes on from that attempt as it would alone: the
// same attempts counted, the same retries reported, the same dead letter.
func TestBatchAttemptsAsAlone(t *testing.T) {
	ctx := context.Background()
	for _, batch := range []int{0, 8} {
		var (
			mu      sync.Mutex
			calls   = map[string]int{}
			retries atomic.Int64
		)
		p, err := inbox.New(memstore.NewInbox(), func(_ context.Context, _ *memstore.Tx, ev event.Event) error {
			mu.Lock()
			defer mu.Unlock()
			calls[ev.ID]++
			switch {
			case ev.Type == "flaky" && calls[ev.ID] == 1:
				return errors.New("busy")
			case ev.Type == "bad":
				return inbox.Invalid(errors.New("bad"))
			}
			return nil
		}, &inbox.Config{Mode: order.ModeDelta, Batch: batch, Backoff: time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			Hooks: inbox.Hooks{OnRetry: func() { retries.Add(1) }}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			typ      string
			outcome  inbox.Outcome
			attempts int
		}{{"flaky", inbox.OutcomeProcessed, 2}, {"bad", inbox.OutcomeDeadLettered, 1}} {
			before := retries.Load()
			res, err := p.Process(ctx, event.Event{Source: "https://shop.example/orders", ID: c.typ, Type: c.typ, Subject: c.typ,
				Sequence: 1, Data: []byte(`{}`), DataContentType: "application/json"})
			if err != nil || res.Outcome != c.outcome || res.Attempts != c.attempts {
				t.Errorf("batch %d, %s: %+v %v, want %v after %d attempts", batch, c.typ, res, err, c.outcome, c.attempts)
			}
			if n := retries.Load() - before; n != int64(c.attempts-1) {
				t.Errorf("batch %d, %s: %d retries reported, want %d", batch, c.typ, n, c.attempts-1)
			}
			if n := calls[c.typ]; n != c.attempts && !(c.typ == "bad" && n == 1) {
				t.Errorf("batch %d, %s: applied %d times, want %d", batch, c.typ, n, c.attempts)
			}
		}
	}
}

// TestBatchQueuedWriteBlamesNoOne: J's apply ends with a write that the
// store queues (a request key's completion whose claim is gone), which
// goes out with the next event's first statement and fails it there. The
// batch fails; I, whose statement met the failure, is not blamed for it:
// run alone, it is processed at its first attempt, and J gets its own
// failure, as alone.
func TestBatchQueuedWriteBlamesNoOne(t *testing.T) {
	ctx := context.Background()
	_, s := ledgerStore(t)
	g := newGates()
	p, err := inbox.New(s, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		g.wait(ev)
		if ev.Type == "j" {
			return s.CompleteTx(ctx, tx, store.CompleteParams{Fence: store.Fence{Key: "gone", Epoch: 1, Owner: "me"}, Response: []byte("x"), Retention: time.Hour})
		}
		return nil
	}, &inbox.Config{Batch: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Config().RecordFirst {
		t.Errorf("a batching processor does not record first")
	}
	ev := func(typ, id, subject string) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: id, Type: typ, Subject: subject, Data: []byte(`{}`), DataContentType: "application/json"}
	}
	send, answers := sender(ctx, p)
	g.holdLeaders(send)
	send(ev("j", "J", "a")) // subject a: runs before I in the batch
	send(ev("i", "I", "b"))
	waitQueued(t, p, 2)
	g.open("blk-a")
	g.open("blk-b")
	for range 4 {
		a := <-answers
		switch a.ev.ID {
		case "J":
			if !errors.Is(a.err, inbox.ErrUnavailable) {
				t.Errorf("J: %+v %v, want its completion's failure (unavailable), as alone", a.res, a.err)
			}
		default:
			if a.err != nil || a.res.Outcome != inbox.OutcomeProcessed || a.res.Attempts != 1 {
				t.Errorf("%s: %+v %v, want processed at the first attempt", a.ev.ID, a.res, a.err)
			}
		}
	}
}

// answer is what Process returned for ev.
type answer struct {
	ev  event.Event
	res inbox.Result
	err error
}

// sender returns send, which processes an event with p in a goroutine of
// its own, and the channel its answers arrive on.
func sender[TX any](ctx context.Context, p *inbox.Processor[TX]) (send func(event.Event), answers chan answer) {
	answers = make(chan answer, 32)
	return func(e event.Event) {
		go func() {
			res, err := p.Process(ctx, e)
			answers <- answer{e, res, err}
		}()
	}, answers
}

// gates hold "block" events in their apply function until their subject's
// gate opens: with two of them a batching processor's two leaders are
// busy, and the events sent meanwhile queue for one batch.
type gates struct {
	mu   sync.Mutex
	gate map[string]chan struct{}
	// started receives the subject of each block event that waits.
	started chan string
}

func newGates() *gates {
	return &gates{gate: map[string]chan struct{}{}, started: make(chan string, 8)}
}

func (g *gates) of(subject string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate[subject] == nil {
		g.gate[subject] = make(chan struct{})
	}
	return g.gate[subject]
}

// wait, called by an apply function, holds ev until its subject's gate
// opens when it is a block event, and reports whether it was.
func (g *gates) wait(ev event.Event) bool {
	if ev.Type != "block" {
		return false
	}
	g.started <- ev.Subject
	<-g.of(ev.Subject)
	return true
}

func (g *gates) open(subject string) { close(g.of(subject)) }

// holdLeaders sends block events for subjects blk-a and blk-b, the second
// once the first waits (so that each has a leader of its own), and returns
// once both wait.
func (g *gates) holdLeaders(send func(event.Event)) {
	for _, subject := range []string{"blk-a", "blk-b"} {
		send(event.Event{Source: "https://shop.example/orders", ID: "block-" + subject, Type: "block", Subject: subject,
			Sequence: 1, Data: []byte(`{}`), DataContentType: "application/json"})
		<-g.started
	}
}

// waitQueued waits until n events wait for a batch in p.
func waitQueued[TX any](t *testing.T, p *inbox.Processor[TX], n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); inbox.Waiting(p) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events waiting, want %d", inbox.Waiting(p), n)
		}
	}
}

// queueInOrder sends events, each once the one before waits in p's queue.
func queueInOrder[TX any](t *testing.T, p *inbox.Processor[TX], send func(event.Event), events ...event.Event) {
	t.Helper()
	n := inbox.Waiting(p)
	for i, e := range events {
		send(e)
		waitQueued(t, p, n+i+1)
	}
}

// countCommitted returns an OnBatch hook that counts the batches that
// committed and those abandoned (either counter may be nil).
func countCommitted(committed, abandoned *atomic.Int64) func(int, bool) {
	return func(_ int, ok bool) {
		switch {
		case ok && committed != nil:
			committed.Add(1)
		case !ok && abandoned != nil:
			abandoned.Add(1)
		}
	}
}
