package inbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/order"
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
func TestStreamCacheTwoProcessors(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE ledger (n bigserial PRIMARY KEY, subject text NOT NULL, seq bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(ctx context.Context, tx pgx.Tx, ev event.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (subject, seq) VALUES ($1, $2)`, ev.Subject, ev.Sequence)
		return err
	}
	newProcessor := func() *inbox.Processor[pgx.Tx] {
		p, err := inbox.New(s, apply, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := newProcessor(), newProcessor()
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
	ledger := func(subject string) []int64 {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT seq FROM ledger WHERE subject = $1 ORDER BY n`, subject)
		if err != nil {
			t.Fatal(err)
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return seqs
	}

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
	wg.Wait()
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
