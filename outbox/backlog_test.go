package outbox_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testutil/procstat"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

var (
	backlogPending = flag.Int("outbox.pending", 1000, "pending intents in TestRelayBacklogMemory (the issue's figure: 1000000)")
	backlogDrain   = flag.Duration("outbox.drain", 0, "stop draining TestRelayBacklogMemory after this long (0: drain all)")
)

// TestRelayBacklogMemory enqueues a backlog of pending intents, then drains
// it with one relay against a local target while sampling the process's
// resident set: the relay holds one batch at a time, so its memory must not
// follow the backlog. On SQLite and PostgreSQL. CI runs 1,000 (under the
// race detector, which multiplies memory, the bound is not asserted); a
// million (add -outbox.drain=2m to stop after a while):
//
//	go test ./outbox -run RelayBacklogMemory -v -timeout 60m -args -outbox.pending=1000000
func TestRelayBacklogMemory(t *testing.T) {
	n := *backlogPending
	t.Run("sqlite", func(t *testing.T) {
		db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "backlog.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := sqlitestore.Migrate(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		s, err := sqlitestore.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		backlogRun[*sql.Tx](t, s, n)
	})
	t.Run("postgres", func(t *testing.T) {
		pool := testdb.Postgres(t)
		if _, err := pgstore.Migrate(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.New(pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		backlogRun[pgx.Tx](t, s, n)
	})
}

func backlogRun[TX any](t *testing.T, s store.OutboxStore[TX], n int) {
	ctx := context.Background()
	var delivered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	r, err := outbox.New(s, &outbox.Config{Targets: []outbox.Target{{Name: "pay", URL: srv.URL, Key: orderKey("charge-")}},
		Batch: 64, Concurrency: 16, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < n; i += 10000 {
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			for j := i; j < min(i+10000, n); j++ {
				if _, err := r.EnqueueTx(ctx, tx, charge(fmt.Sprintf("o-%07d", j))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	enqueued := time.Since(start)
	runtime.GC()
	base := rss(t)

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := int64(rss(t) * 1024); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	start = time.Now()
	dctx := ctx
	if *backlogDrain > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, *backlogDrain)
		defer cancel()
	}
	if err := r.Drain(dctx); err != nil && dctx.Err() == nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	peakMiB := float64(peak.Load()) / 1024
	t.Logf("%d intents enqueued in %v; %d delivered in %v (%.0f/s); RSS before the drain %.1f MiB, peak while draining %.1f MiB",
		n, enqueued.Round(time.Millisecond), delivered.Load(), took.Round(time.Millisecond), float64(delivered.Load())/took.Seconds(), base, peakMiB)
	if *backlogDrain == 0 && delivered.Load() != int64(n) {
		t.Fatalf("delivered %d of %d", delivered.Load(), n)
	}
	if peakMiB > 128 && !raceEnabled {
		t.Fatalf("peak RSS %.1f MiB while draining, over 128 MiB", peakMiB)
	}
}

// rss reads the resident set in MiB.
func rss(t *testing.T) float64 {
	v, err := procstat.RSSMiB()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
