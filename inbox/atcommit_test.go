package inbox_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store/pgstore"
)

// TestRecordAtCommit runs events of no order through a Processor on
// PostgreSQL, whose store records an event with the commit: a new event is
// applied once and committed; a duplicate, sequential or concurrent, is
// answered as one and its apply's writes roll back; a dead-lettered event
// delivered again is answered with its reason; a duplicate whose apply
// fails on its second run (a primary key) is answered at once, in one
// attempt and without a retry; and with RecordFirst a duplicate never runs
// apply.
func TestRecordAtCommit(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE applied (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	apply := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		runs.Add(1)
		if ev.ID == "bad" {
			return inbox.Invalid(errors.New("no such order"))
		}
		_, err := tx.Exec(ctx, `INSERT INTO applied (id) VALUES ($1)`, ev.ID)
		return err
	}
	var retries atomic.Int64
	newProcessor := func(cfg inbox.Config) *inbox.Processor[pgx.Tx] {
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.Hooks = inbox.Hooks{OnRetry: func() { retries.Add(1) }}
		p, err := inbox.New(s, apply, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newProcessor(inbox.Config{})
	ev := func(id string) event.Event {
		return event.Event{Source: "https://shop.example/orders", ID: id, Type: "order.paid", Data: []byte(`{}`), DataContentType: "application/json"}
	}
	count := func(id string) (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM applied WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	process := func(p *inbox.Processor[pgx.Tx], id string, want inbox.Outcome) inbox.Result {
		t.Helper()
		res, err := p.Process(ctx, ev(id))
		if err != nil || res.Outcome != want {
			t.Fatalf("%s: %+v %v, want %v", id, res, err, want)
		}
		return res
	}

	process(p, "e1", inbox.OutcomeProcessed)
	if res := process(p, "e1", inbox.OutcomeDuplicate); res.Attempts != 1 || retries.Load() != 0 {
		t.Fatalf("the duplicate took %d attempts and %d retries, want 1 and 0", res.Attempts, retries.Load())
	}
	if n, r := count("e1"), runs.Load(); n != 1 || r != 2 {
		t.Fatalf("e1 applied %d times, apply ran %d times; want 1 and 2 (the duplicate's failed, rolled back)", n, r)
	}

	if res := process(p, "bad", inbox.OutcomeDeadLettered); len(res.DeadLetters) != 1 {
		t.Fatalf("bad: %+v", res)
	}
	if res := process(p, "bad", inbox.OutcomeDuplicate); res.Reason == "" {
		t.Fatalf("bad again: %+v, want the dead letter named", res)
	}

	var wg sync.WaitGroup
	results := make(chan inbox.Outcome, 16)
	for range 16 {
		wg.Go(func() {
			res, err := p.Process(ctx, ev("e2"))
			if err != nil {
				t.Error(err)
			}
			results <- res.Outcome
		})
	}
	wg.Wait()
	close(results)
	processed := 0
	for o := range results {
		switch o {
		case inbox.OutcomeProcessed:
			processed++
		case inbox.OutcomeDuplicate:
		default:
			t.Fatalf("concurrent e2: %v", o)
		}
	}
	if n := count("e2"); processed != 1 || n != 1 || retries.Load() != 0 {
		t.Fatalf("concurrent e2: %d processed, applied %d times, %d retries; want 1, 1 and 0", processed, n, retries.Load())
	}

	first := newProcessor(inbox.Config{RecordFirst: true})
	before := runs.Load()
	process(first, "e1", inbox.OutcomeDuplicate)
	if r := runs.Load() - before; r != 0 {
		t.Fatalf("with RecordFirst a duplicate ran apply %d times", r)
	}
}
