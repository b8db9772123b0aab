package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/procstat"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

var backlogN = flag.Int("backlog.n", 4000, "parked + dead events in TestBacklogCostsNoMemory (the issue's figure: 1000000)")

// TestBacklogCostsNoMemory measures that a backlog of parked events and
// dead letters lives on disk, not in the process: it builds N/2 parked
// events (1,000 behind a gap on each of N/2000 streams) and N/2 dead
// letters in a SQLite inbox, then runs the processor's work that touches
// them (new events, a walk over every dead letter page by page, the
// compensation of every stream, which releases and applies all the parked
// events) while sampling the resident set. The same work on an empty
// backlog is the baseline, measured in the same run. Short in CI; a
// million:
//
//	go test -run BacklogCostsNoMemory -v -timeout 60m ./inbox -args -backlog.n=1000000
func TestBacklogCostsNoMemory(t *testing.T) {
	n := *backlogN
	perStream := 1000
	streams := max(n/2/perStream, 1)
	dead := n / 2

	base := backlogRun(t, 0, 0, 0)
	full := backlogRun(t, streams, perStream, dead)
	t.Logf("backlog: %d parked events on %d streams + %d dead letters (db %.1f MiB)", streams*perStream, streams, dead, full.dbMiB)
	t.Logf("peak RSS during the work: %.1f MiB with the backlog, %.1f MiB without (ratio %.2f); Go heap peak %.1f vs %.1f MiB",
		full.peakRSS, base.peakRSS, full.peakRSS/base.peakRSS, full.peakHeap, base.peakHeap)
	t.Logf("work: %d dead letters walked, %d parked events released by %d compensations, in %v",
		full.walked, full.released, full.compensated, full.took.Round(time.Millisecond))
	if full.walked != dead || full.released != streams*perStream || full.compensated != streams {
		t.Fatalf("work incomplete: walked %d/%d, released %d/%d, compensated %d/%d",
			full.walked, dead, full.released, streams*perStream, full.compensated, streams)
	}
	// Resident memory must not follow the backlog: a backlog held in memory
	// would cost at least its events' bytes (~300 B each).
	if grow := full.peakRSS - base.peakRSS; grow > 64 {
		t.Fatalf("peak RSS grew by %.1f MiB with the backlog", grow)
	}
}

type backlogFigures struct {
	peakRSS, peakHeap, dbMiB      float64
	walked, released, compensated int
	took                          time.Duration
}

func backlogRun(t *testing.T, streams, perStream, dead int) backlogFigures {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "backlog.db")
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE paid (id TEXT NOT NULL, seq INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var nowNanos atomic.Int64
	nowNanos.Store(clock.UnixNano())
	now := func() time.Time { return time.Unix(0, nowNanos.Load()).UTC() }
	apply := func(ctx context.Context, tx *sql.Tx, ev event.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO paid VALUES (?, ?)`, ev.Subject, ev.Sequence)
		return err
	}
	p, err := inbox.New(s, apply, &inbox.Config{Mode: order.ModeDelta, Now: now, Logger: slog.New(slog.DiscardHandler), GapDeadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(obj string, seq int64) event.Event {
		return event.Event{ID: fmt.Sprintf("%s-%d", obj, seq), Source: "https://shop.example/orders", Type: "order.paid",
			Subject: obj, Sequence: seq, DataContentType: "application/json", Data: []byte(`{"add":10,"note":"a parked delta of a typical size, about two hundred bytes in all"}`)}
	}

	// Build the backlog through the store, in large transactions (through
	// Process it would take one commit each).
	for st := range streams {
		sk := store.StreamKey{Source: "https://shop.example/orders", Subject: "p-" + strconv.Itoa(st)}
		parked := make([]int64, perStream)
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			for i := range perStream {
				seq := int64(i + 2) // 1 is missing
				parked[i] = seq
				b, err := inbox.Encode(ev(sk.Subject, seq))
				if err != nil {
					return err
				}
				if _, _, err := s.RecordEventTx(ctx, tx, store.EventKey{Source: sk.Source, ID: fmt.Sprintf("%s-%d", sk.Subject, seq)}, clock); err != nil {
					return err
				}
				if err := s.ParkTx(ctx, tx, sk, store.ParkedEvent{Sequence: seq, Event: b}); err != nil {
					return err
				}
			}
			state, _ := json.Marshal(order.Stream{Execution: "-", ExecutionSeq: 1, Parked: parked,
				Gaps: []order.Gap{{From: 1, To: 1, FirstSeen: clock}}})
			if _, err := s.LockStreamTx(ctx, tx, sk); err != nil {
				return err
			}
			return s.PutStreamTx(ctx, tx, sk, state, clock)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for start := 0; start < dead; start += 10000 {
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			for i := start; i < min(start+10000, dead); i++ {
				e := ev("d-"+strconv.Itoa(i%5000), int64(i/5000+1))
				e.ID = "dead-" + strconv.Itoa(i)
				b, err := inbox.Encode(e)
				if err != nil {
					return err
				}
				if _, err := s.DeadLetterTx(ctx, tx, store.DeadLetter{Key: store.EventKey{Source: e.Source, ID: e.ID},
					Stream: store.StreamKey{Source: e.Source, Subject: e.Subject}, Sequence: e.Sequence,
					Reason: "invalid: amount is not a number", Event: b, Attempts: 3, FirstFailed: clock, LastFailed: clock}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var fig backlogFigures
	for _, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			fig.dbMiB += float64(fi.Size()) / (1 << 20)
		}
	}

	// The work, with the resident set sampled every 20 ms.
	runtime.GC()
	debug.FreeOSMemory()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := rssMiB(t); r > fig.peakRSS {
				fig.peakRSS = r
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if h := float64(ms.HeapInuse) / (1 << 20); h > fig.peakHeap {
				fig.peakHeap = h
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	start := time.Now()
	for i := range 500 {
		if _, err := p.Process(ctx, ev("n-"+strconv.Itoa(i%50), int64(i/50+1))); err != nil {
			t.Fatal(err)
		}
	}
	for after := int64(0); ; {
		page, err := p.DeadLetters(ctx, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		fig.walked += len(page)
		after = page[len(page)-1].ID
	}
	nowNanos.Store(clock.Add(time.Hour).UnixNano())
	refetch := func(ctx context.Context, tx *sql.Tx, sk store.StreamKey, g order.Gap) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO paid VALUES (?, ?)`, sk.Subject, g.From)
		return err
	}
	for {
		c, err := p.Compensate(ctx, refetch)
		if err != nil {
			t.Fatal(err)
		}
		if c == 0 {
			break
		}
		fig.compensated += c
	}
	fig.took = time.Since(start)
	close(stop)
	wg.Wait()
	var applied int
	if err := db.QueryRow(`SELECT count(*) FROM paid WHERE id LIKE 'p-%' AND seq > 1`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	fig.released = applied
	return fig
}

// rssMiB reads the resident set in MiB.
func rssMiB(t *testing.T) float64 {
	v, err := procstat.RSSMiB()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
