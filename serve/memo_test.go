package serve_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// appReads counts the statements that read an application.
type appReads struct{ n atomic.Int64 }

func (c *appReads) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "FROM idem_apps") {
		c.n.Add(1)
	}
	return ctx
}
func (c *appReads) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestEventsReadTheApplicationOnce: the events of one engine call (a
// task's creation; the starts of a worker's batch) read their application
// once, in their transaction, for their callbacks, instead of once per
// event.
func TestEventsReadTheApplicationOnce(t *testing.T) {
	p0, _ := migratedPostgres(t)
	cfg := p0.Config()
	reads := &appReads{}
	cfg.ConnConfig.Tracer = reads
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CreateApp(ctx, store.App{Name: "shop", TokenHashes: [][]byte{serve.HashToken("tok")}, Scheme: "idem",
		CallbackURL: "http://127.0.0.1:1/events", Secrets: []string{"whsec_" + strings.Repeat("a", 32)}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(s, &serve.Config{Types: map[string]execution.TypeConfig{"export": {}}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		before := reads.n.Load()
		req := httptest.NewRequest("POST", "/v1/tasks", strings.NewReader(`{"type":"export","input":{}}`))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i))
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != 201 {
			t.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
		// One read to authenticate; the events (created, queued) use it.
		if got := reads.n.Load() - before; got != 1 {
			t.Fatalf("creating a task read the application %d times, want 1", got)
		}
	}
	before := reads.n.Load()
	var claimed []execution.Claimed
	if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		claimed, err = srv.Engine().ClaimManyTx(ctx, tx, []string{"export"}, "worker", 0, n)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(claimed) != n {
		t.Fatalf("claimed %d, want %d", len(claimed), n)
	}
	if got := reads.n.Load() - before; got != 1 {
		t.Fatalf("starting %d executions in one claim read the application %d times, want 1", n, got)
	}
	// Each started execution has its callback queued, as before.
	intents, err := s.ListIntents(ctx, store.IntentPending, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(intents) != 3*n { // created, queued, started
		t.Fatalf("%d callbacks queued, want %d", len(intents), 3*n)
	}
}
