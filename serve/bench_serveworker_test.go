package serve_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// BenchmarkServeWorker measures serve's task path as the bench/ row
// "execution create+complete" runs it, in two phases: 16 clients create
// b.N tasks through POST /v1/tasks (-bench.creators to change) (ServeHTTP, no network; the request
// key, the task, its execution, its events, its step and the stored answer
// in one transaction), reported as creates/s; then an in-process worker of
// 8 (serve's engine, with its callbacks hook) works them all, which is the
// ns/op; on PostgreSQL and on SQLite. Run it beside BenchmarkExecutions/Engine/Worker and BenchmarkRiver:
//
//	go test -run '^$' -bench 'ServeWorker|Engine/Worker|River/Work' -benchtime 3000x ./serve
var benchCreators = flag.Int("bench.creators", 16, "clients creating tasks at once in BenchmarkServeWorker")

func BenchmarkServeWorker(b *testing.B) {
	b.Run("Postgres", func(b *testing.B) { _, s := migratedPostgres(b); benchServe(b, s) })
	b.Run("SQLite", func(b *testing.B) { benchServe(b, openSQLiteTB(b)) })
}

func benchServe[TX any](b *testing.B, s serve.Store[TX]) {
	ctx := context.Background()
	srv, err := serve.New(s, &serve.Config{Types: map[string]execution.TypeConfig{"export": {}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.CreateApp(ctx, store.App{Name: "bench", TokenHashes: [][]byte{serve.HashToken("tok")}, Scheme: "idem", CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	creators := *benchCreators
	storetest.Concurrently(creators, func(c int) {
		for i := c; i < b.N; i += creators {
			body := fmt.Sprintf(`{"type":"export","input":{"order":"o-%d"}}`, i)
			req := httptest.NewRequest(http.MethodPost, "/v1/tasks", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer tok")
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", i))
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code != http.StatusCreated {
				b.Errorf("%d %s", rec.Code, rec.Body)
				return
			}
		}
	})
	created := time.Since(start)
	drain(b, srv.Engine())
	b.StopTimer()
	b.ReportMetric(float64(b.N)/created.Seconds(), "creates/s")
}
