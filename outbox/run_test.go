package outbox_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// TestRunWakesOnNotify: a relay whose poll interval is an hour still
// delivers an intent within moments of its transaction's commit, because
// PostgreSQL's NOTIFY wakes it; and it stops when its context ends.
func TestRunWakesOnNotify(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg := newTarget(t, true)
	r, err := outbox.New(s, &outbox.Config{Targets: []outbox.Target{{Name: "pay", URL: tg.srv.URL, Key: orderKey("charge-")}},
		PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	time.Sleep(200 * time.Millisecond) // the relay's first (empty) claim, then it listens
	for i, order := range []string{"o-1", "o-2"} {
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := r.EnqueueTx(ctx, tx, charge(order))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			done, err := s.ListIntents(ctx, store.IntentDone, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(done) == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("intent %s not delivered 10 s after its commit (poll interval 1 h): no wake-up", order)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	stop()
	if err := <-ran; err != context.Canceled {
		t.Fatalf("Run returned %v", err)
	}
	if tg.calls() != 2 {
		t.Fatalf("target called %d times, want 2", tg.calls())
	}
}
