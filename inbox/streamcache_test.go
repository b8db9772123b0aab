package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// TestStreamCacheTwoProcessors runs delta events through two Processors
// on one PostgreSQL store, as two receiver processes do: each remembers
// the stream states it committed (Config.StreamCache), which fall behind
// what the other commits. A remembered state that is stale is never acted
// on: an event the other processor applied, republished under a new ID,
// is a duplicate and not applied again; and with both processors taking
// turns on many streams at once, every stream's effects are each sequence
// once, in order.
//
// With batching on (Config.Batch), the events each processor gets at once
// share transactions, the same guarantees hold.
func TestStreamCacheTwoProcessors(t *testing.T) {
	t.Run("alone", func(t *testing.T) { testTwoProcessors(t, 0) })
	t.Run("batched", func(t *testing.T) { testTwoProcessors(t, 16) })
}

func testTwoProcessors(t *testing.T, batch int) {
	ctx := context.Background()
	pool, s := ledgerStore(t)
	var committed atomic.Int64 // batches of several events
	a, b := twoProcessors(t, s, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (subject, seq) VALUES ($1, $2)`, ev.Subject, ev.Sequence)
		return err
	}, inbox.Config{Batch: batch, Hooks: inbox.Hooks{OnBatch: countCommitted(&committed, nil)}})
	ev := func(subject, id string, seq int64) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: id, Type: "order.paid", Subject: subject,
			Sequence: seq, Data: []byte(`{}`), DataContentType: "application/json"}
	}
	process := func(p *inbox.Processor[pgx.Tx], e event.Event, want inbox.Outcome) {
		t.Helper()
		res, err := p.Process(ctx, e)
		if err != nil || res.Outcome != want {
			t.Fatalf("%s seq %d: %+v %v, want %v", e.ID, e.Sequence, res, err, want)
		}
	}
	ledger := func(subject string) []int64 { t.Helper(); return ledgerSeqs(t, pool, subject) }

	process(a, ev("o-1", "e1", 1), inbox.OutcomeProcessed)
	process(a, ev("o-1", "e2", 2), inbox.OutcomeProcessed) // a remembers 2
	process(b, ev("o-1", "e3", 3), inbox.OutcomeProcessed) // b moves it to 3
	// a remembers 2, where 3 is the next in order: the store holds 3.
	process(a, ev("o-1", "e3-again", 3), inbox.OutcomeDuplicate)
	process(a, ev("o-1", "e4", 4), inbox.OutcomeProcessed)
	process(a, ev("o-1", "e5", 5), inbox.OutcomeProcessed)
	if got := ledger("o-1"); fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("o-1's effects %v, want [1 2 3 4 5]", got)
	}

	// Many streams, each event sent to one processor picked at random
	// and, half the time, republished to the other.
	const streams, events = 8, 40
	var wg sync.WaitGroup
	for i := range streams {
		subject := fmt.Sprintf("s-%d", i)
		wg.Go(func() {
			ps := []*inbox.Processor[pgx.Tx]{a, b}
			for seq := int64(1); seq <= events; seq++ {
				first := rand.IntN(2)
				if res, err := ps[first].Process(ctx, ev(subject, fmt.Sprintf("%s-%d", subject, seq), seq)); err != nil || res.Outcome != inbox.OutcomeProcessed {
					t.Errorf("%s seq %d: %+v %v, want processed", subject, seq, res, err)
					return
				}
				if rand.IntN(2) == 0 {
					if res, err := ps[1-first].Process(ctx, ev(subject, fmt.Sprintf("%s-%d-again", subject, seq), seq)); err != nil || res.Outcome != inbox.OutcomeDuplicate {
						t.Errorf("%s seq %d republished: %+v %v, want duplicate", subject, seq, res, err)
						return
					}
				}
			}
		})
	}
	// One stream, every event sent by both processors at once (the same
	// event, so one of them records it): their transactions on the stream
	// race, each through its own remembered state or the stream's lock.
	const raced = 60
	for _, p := range []*inbox.Processor[pgx.Tx]{a, b} {
		wg.Go(func() {
			for seq := int64(1); seq <= raced; seq++ {
				res, err := p.Process(ctx, ev("raced", fmt.Sprintf("raced-%d", seq), seq))
				if err != nil || (res.Outcome != inbox.OutcomeProcessed && res.Outcome != inbox.OutcomeDuplicate) {
					t.Errorf("raced seq %d: %+v %v, want processed or duplicate", seq, res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := ledger("raced"); len(got) != raced || got[0] != 1 || got[raced-1] != raced {
		t.Fatalf("raced: effects %v, want 1..%d", got, raced)
	}
	for i, seq := range ledger("raced") {
		if seq != int64(i+1) {
			t.Fatalf("raced: effects out of order at %d: %v", i, ledger("raced"))
		}
	}
	if n := committed.Load(); batch > 1 && n == 0 {
		t.Errorf("no batch of more than one event committed")
	}
	for i := range streams {
		subject := fmt.Sprintf("s-%d", i)
		got := ledger(subject)
		if len(got) != events {
			t.Fatalf("%s: %d effects, want %d: %v", subject, len(got), events, got)
		}
		for j, seq := range got {
			if seq != int64(j+1) {
				t.Fatalf("%s: effects %v, want 1..%d once each, in order", subject, got, events)
			}
		}
	}
}

// TestStreamCacheFailingApply runs, on a stream the processor remembers, an
// event whose apply fails once (retried, then applied) and one whose apply
// is invalid (dead-lettered, the stream left where it was, so that the
// event sent again, fixed, applies in its place).
func TestStreamCacheFailingApply(t *testing.T) {
	ctx := context.Background()
	pool, s := ledgerStore(t)
	var mu sync.Mutex
	fails := map[string]int{"flaky": 1}
	apply := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (seq) VALUES ($1)`, ev.Sequence); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.ID == "bad":
			return inbox.Invalid(errors.New("no such order"))
		case fails[ev.ID] > 0:
			fails[ev.ID]--
			return errors.New("the database blinked")
		}
		return nil
	}
	p, err := inbox.New(s, apply, &inbox.Config{Mode: order.ModeDelta, Backoff: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string, seq int64) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: id, Type: "order.paid", Subject: "o-1",
			Sequence: seq, Data: []byte(`{}`), DataContentType: "application/json"}
	}
	for _, c := range []struct {
		id       string
		seq      int64
		want     inbox.Outcome
		attempts int
	}{
		{"e1", 1, inbox.OutcomeProcessed, 1},
		{"flaky", 2, inbox.OutcomeProcessed, 2},
		{"bad", 3, inbox.OutcomeDeadLettered, 1},
		{"fixed", 3, inbox.OutcomeProcessed, 1},
		{"e4", 4, inbox.OutcomeProcessed, 1},
	} {
		res, err := p.Process(ctx, ev(c.id, c.seq))
		if err != nil || res.Outcome != c.want || res.Attempts != c.attempts {
			t.Fatalf("%s (seq %d): %+v %v, want %v in %d attempts", c.id, c.seq, res, err, c.want, c.attempts)
		}
	}
	if seqs := ledgerSeqs(t, pool, ""); fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Fatalf("effects %v, want [1 2 3 4]: the failed applies' writes rolled back", seqs)
	}
}

// TestStreamCacheApplyHidesTheFailure guesses on a remembered stream that
// another processor has moved on without applying anything (it parked an
// event behind a gap), with apply functions that do not pass on the error
// of their statement, which the failed guess made fail: one that reports
// it as invalid, without wrapping it, and one that ignores it. Neither may
// decide the event: it is decided again under the stream's lock, where it
// fills the gap and releases the parked event, both applied once.
func TestStreamCacheApplyHidesTheFailure(t *testing.T) {
	for _, hide := range []string{"invalid", "ignored"} {
		t.Run(hide, func(t *testing.T) {
			ctx := context.Background()
			pool, s := ledgerStore(t)
			a, b := twoProcessors(t, s, func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
				_, err := tx.Exec(ctx, `INSERT INTO ledger (seq) VALUES ($1)`, ev.Sequence)
				if err != nil && hide == "invalid" {
					return inbox.Invalid(errors.New(err.Error()))
				}
				return nil
			}, inbox.Config{})
			process := func(p *inbox.Processor[pgx.Tx], seq int64, want inbox.Outcome) {
				t.Helper()
				res, err := p.Process(ctx, event.Event{Source: "https://shop.example/orders", ID: fmt.Sprint("e", seq), Type: "order.paid",
					Subject: "o-1", Sequence: seq, Data: []byte(`{}`), DataContentType: "application/json"})
				if err != nil || res.Outcome != want {
					t.Fatalf("seq %d: %+v %v, want %v", seq, res, err, want)
				}
			}
			process(a, 1, inbox.OutcomeProcessed) // a remembers 1
			process(b, 3, inbox.OutcomeParked)    // the stream moves on: 3 parked
			process(a, 2, inbox.OutcomeProcessed) // a guesses 1 -> 2 and misses
			if seqs := ledgerSeqs(t, pool, ""); fmt.Sprint(seqs) != "[1 2 3]" {
				t.Fatalf("applied %v, want [1 2 3]", seqs)
			}
			if n, err := s.ListDeadLetters(ctx, store.DeadLetterQuery{Limit: 10}); err != nil || len(n) != 0 {
				t.Fatalf("dead letters %+v, %v; want none", n, err)
			}
		})
	}
}

// ledgerStore returns a migrated PostgreSQL store with a table ledger, in
// which an apply function writes the sequences it applies (and, when it
// applies more than one stream's, their subjects).
func ledgerStore(t *testing.T) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (n bigserial PRIMARY KEY, subject text NOT NULL DEFAULT '', seq bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, s
}

// twoProcessors returns two delta Processors on s configured by cfg, as
// two receiver processes have: each remembers the stream states it
// committed.
func twoProcessors(t *testing.T, s *pgstore.Store, apply inbox.ApplyFunc[pgx.Tx], cfg inbox.Config) (a, b *inbox.Processor[pgx.Tx]) {
	t.Helper()
	cfg.Mode, cfg.Logger = order.ModeDelta, slog.New(slog.DiscardHandler)
	newProcessor := func() *inbox.Processor[pgx.Tx] {
		p, err := inbox.New(s, apply, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return newProcessor(), newProcessor()
}

// ledgerSeqs returns the sequences the ledger holds for subject ("" for an
// apply that writes none), in the order written.
func ledgerSeqs(t *testing.T, pool *pgxpool.Pool, subject string) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT seq FROM ledger WHERE subject = $1 ORDER BY n`, subject)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// TestStreamCacheApplyStatementRefused runs, on a remembered stream, an
// event whose apply's first statement pgx refuses before sending anything
// (it cannot prepare it, or cannot encode its argument), which makes the
// whole pipeline fail, the queued statement of the event's record
// included. The event must end as it does without the cache: retried and
// dead-lettered (at once when the apply says it is invalid), and its
// redelivery answered as a duplicate of a dead letter, never "store
// unavailable" over and over.
func TestStreamCacheApplyStatementRefused(t *testing.T) {
	for _, c := range []struct {
		name, stmt string
		arg        any
		invalid    bool
		attempts   int
	}{
		{"parse", `INSERT INTO ledger (nosuch) VALUES ($1)`, 1, true, 1},
		{"encode", `INSERT INTO small (v) VALUES ($1)`, int64(1) << 40, false, inbox.DefaultMaxAttempts},
	} {
		for _, cache := range []int{0, -1} {
			t.Run(fmt.Sprint(c.name, "/cache=", cache), func(t *testing.T) {
				ctx := context.Background()
				pool, s := ledgerStore(t)
				if _, err := pool.Exec(ctx, `CREATE TABLE small (v int4)`); err != nil {
					t.Fatal(err)
				}
				apply := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
					if ev.ID == "bad" {
						_, err := tx.Exec(ctx, c.stmt, c.arg)
						if err != nil && c.invalid {
							return inbox.Invalid(err)
						}
						return err
					}
					_, err := tx.Exec(ctx, `INSERT INTO ledger (seq) VALUES ($1)`, ev.Sequence)
					return err
				}
				p, err := inbox.New(s, apply, &inbox.Config{Mode: order.ModeDelta, StreamCache: cache, Backoff: time.Millisecond,
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				process := func(id string, seq int64) (inbox.Result, error) {
					return p.Process(ctx, event.Event{Source: "https://shop.example/orders", ID: id, Type: "order.paid",
						Subject: "o-1", Sequence: seq, Data: []byte(`{}`), DataContentType: "application/json"})
				}
				if res, err := process("e1", 1); err != nil || res.Outcome != inbox.OutcomeProcessed {
					t.Fatalf("e1: %+v %v", res, err)
				}
				res, err := process("bad", 2)
				if err != nil || res.Outcome != inbox.OutcomeDeadLettered || res.Attempts != c.attempts {
					t.Fatalf("bad: %+v %v; want dead-lettered after %d attempts", res, err, c.attempts)
				}
				if res, err := process("bad", 2); err != nil || res.Outcome != inbox.OutcomeDuplicate {
					t.Fatalf("bad again: %+v %v; want a duplicate of the dead letter", res, err)
				}
				if res, err := process("e2", 2); err != nil || res.Outcome != inbox.OutcomeProcessed {
					t.Fatalf("2 fixed, under another ID: %+v %v", res, err)
				}
				if seqs := ledgerSeqs(t, pool, ""); fmt.Sprint(seqs) != "[1 2]" {
					t.Fatalf("applied %v, want [1 2]", seqs)
				}
			})
		}
	}
}
