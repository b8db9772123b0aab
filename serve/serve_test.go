package serve_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

var types = types0()

func types0() map[string]execution.TypeConfig {
	return map[string]execution.TypeConfig{"export": {Lease: 30 * time.Second, MaxAttempts: 2}}
}

func openSQLite(t *testing.T) serve.Store[*sql.Tx] { return openSQLiteTB(t) }

// openSQLiteTB is openSQLite for tests and benchmarks alike.
func openSQLiteTB(t testing.TB) serve.Store[*sql.Tx] {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := sqlitestore.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openPostgres(t *testing.T) serve.Store[pgx.Tx] {
	t.Helper()
	_, s := migratedPostgres(t)
	return s
}

// migratedPostgres returns a store on a fresh, migrated schema, and its
// pool.
func migratedPostgres(t testing.TB) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, s
}

func TestSQLite(t *testing.T)   { t.Parallel(); exercise(t, openSQLite) }
func TestPostgres(t *testing.T) { t.Parallel(); exercise(t, openPostgres) }

// env is a running service with two applications and a worker token.
type env struct {
	t   *testing.T
	url string
}

func start[TX any](t *testing.T, open func(*testing.T) serve.Store[TX]) *env {
	t.Helper()
	s := open(t)
	seed(t, s)
	return startOn(t, s, &serve.Config{Types: types})
}

// seed makes the applications and the worker token of env.
func seed[TX any](t *testing.T, s serve.Store[TX]) {
	t.Helper()
	ctx := context.Background()
	for _, a := range []store.App{
		{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok-orders")}, Scheme: "idem", CreatedAt: time.Now()},
		{Name: "billing", TokenHashes: [][]byte{serve.HashToken("tok-billing")}, Scheme: "idem", CreatedAt: time.Now()},
		{Name: "gone", TokenHashes: [][]byte{serve.HashToken("tok-gone")}, Scheme: "idem", Disabled: true, CreatedAt: time.Now()},
	} {
		if err := s.CreateApp(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddWorkerToken(ctx, serve.HashToken("tok-worker"), time.Now()); err != nil {
		t.Fatal(err)
	}
}

// startOn serves s with cfg, and runs its wake-ups until the test ends.
func startOn[TX any](t *testing.T, s serve.Store[TX], cfg *serve.Config) *env {
	t.Helper()
	srv, err := serve.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.RunWakeups(ctx) }()
	t.Cleanup(func() { hs.Close(); cancel(); <-done })
	return &env{t: t, url: hs.URL}
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (e *env) call(token, method, path, idemKey, body string) answer {
	e.t.Helper()
	a, err := e.try(token, method, path, idemKey, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// try is call for goroutines other than the test's, which may not stop
// it: it returns the error instead.
func (e *env) try(token, method, path, idemKey, body string) (answer, error) {
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	req.Header.Set("Content-Type", "application/json")
	return e.do(req)
}

// do sends req and reads its answer.
func (e *env) do(req *http.Request) (answer, error) {
	// A bounded wait: a server that hangs fails the test instead of
	// stalling it.
	res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, header: res.Header, raw: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return a, nil
}

func (a answer) str(path ...string) string {
	var v any = a.body
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func (e *env) want(a answer, status int, slug string) {
	e.t.Helper()
	if a.status != status || (slug != "" && !strings.HasSuffix(a.str("type"), "/"+slug)) {
		e.t.Fatalf("got %d %s, want %d %s", a.status, a.raw, status, slug)
	}
}

func exercise[TX any](t *testing.T, open func(*testing.T) serve.Store[TX]) {
	t.Run("CreateReplayAndConflict", func(t *testing.T) {
		t.Parallel()
		e := start(t, open)
		body := `{"type":"export","input":{"order":"o-1"},"externalRef":"o-1"}`
		first := e.call("tok-orders", "POST", "/v1/tasks", "k-1", body)
		e.want(first, 201, "")
		if first.str("execution", "status") != "QUEUED" || first.str("task", "status") != "QUEUED" || first.str("task", "externalRef") != "o-1" {
			t.Fatalf("created %s", first.raw)
		}
		again := e.call("tok-orders", "POST", "/v1/tasks", "k-1", body)
		e.want(again, 201, "")
		if again.header.Get("Idempotent-Replayed") != "true" || again.str("task", "id") != first.str("task", "id") ||
			again.str("execution", "id") != first.str("execution", "id") {
			t.Fatalf("replay %v %s", again.header, again.raw)
		}
		e.want(e.call("tok-orders", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{"order":"o-2"}}`), 422, "idempotency-key-reused")
		e.want(e.call("tok-orders", "POST", "/v1/tasks", "", body), 400, "idempotency-key-missing")
		e.want(e.call("tok-orders", "POST", "/v1/tasks", "k-2", `{"type":"nope","input":{}}`), 422, "unknown-task-type")
		// Another application's key space is its own, and it sees none of
		// the first's tasks.
		other := e.call("tok-billing", "POST", "/v1/tasks", "k-1", body)
		e.want(other, 201, "")
		if other.str("task", "id") == first.str("task", "id") {
			t.Fatal("billing's key k-1 returned orders' task")
		}
		e.want(e.call("tok-billing", "GET", "/v1/tasks/"+first.str("task", "id"), "", ""), 404, "not-found")
		e.want(e.call("tok-billing", "GET", "/v1/executions/"+first.str("execution", "id"), "", ""), 404, "not-found")
		list := e.call("tok-orders", "GET", "/v1/tasks", "", "")
		if items, _ := list.body["items"].([]any); list.status != 200 || len(items) != 1 {
			t.Fatalf("list %s", list.raw)
		}
	})

	t.Run("Auth", func(t *testing.T) {
		t.Parallel()
		e := start(t, open)
		e.want(e.call("", "GET", "/v1/tasks", "", ""), 401, "unauthorized")
		e.want(e.call("nope", "GET", "/v1/tasks", "", ""), 401, "unauthorized")
		e.want(e.call("tok-gone", "GET", "/v1/tasks", "", ""), 403, "application-disabled")
		e.want(e.call("tok-worker", "GET", "/v1/tasks", "", ""), 401, "unauthorized")
		e.want(e.call("tok-orders", "POST", "/v1/worker/claim", "", `{"types":["export"]}`), 401, "unauthorized")
		e.want(e.call("tok-orders", "GET", "/v1/tasks?cursor=!!", "", ""), 400, "cursor-invalid")
	})

	t.Run("WorkerRunsAStep", func(t *testing.T) {
		t.Parallel()
		e := start(t, open)
		c := e.call("tok-orders", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{"order":"o-1"}}`)
		exec := c.str("execution", "id")
		e.want(e.call("tok-worker", "POST", "/v1/worker/claim", "", `{"types":["report"]}`), 422, "unknown-task-type")
		claim := e.call("tok-worker", "POST", "/v1/worker/claim", "", `{"types":["export"],"leaseSeconds":30}`)
		e.want(claim, 200, "")
		step := claim.str("step", "id")
		if claim.str("step", "status") != "EXECUTING" || claim.body["step"].(map[string]any)["epoch"].(float64) != 1 {
			t.Fatalf("claim %s", claim.raw)
		}
		if got := e.call("tok-worker", "POST", "/v1/worker/claim", "", `{"types":["export"]}`); got.status != 204 {
			t.Fatalf("second claim: %d %s", got.status, got.raw)
		}
		hb := e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/heartbeat", "", `{"epoch":1}`)
		if hb.status != 200 || hb.body["cancelRequested"] != false {
			t.Fatalf("heartbeat %s", hb.raw)
		}
		e.want(e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/progress", "", `{"epoch":1,"progress":40}`), 200, "")
		e.want(e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/complete", "", `{"epoch":2,"output":{"url":"x"}}`), 409, "fenced")
		e.want(e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/progress", "", `{"epoch":1,"progress":400}`), 400, "request-invalid")
		done := e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/complete", "", `{"epoch":1,"output":{"url":"x"}}`)
		if done.status != 200 || done.str("execution", "status") != "SUCCEEDED" {
			t.Fatalf("complete %s", done.raw)
		}
		e.want(e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/complete", "", `{"epoch":1,"output":{"url":"x"}}`), 200, "")
		e.want(e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/complete", "", `{"epoch":1,"output":{"url":"y"}}`), 409, "illegal-transition")
		e.want(e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/fail", "", `{"epoch":1,"error":"late"}`), 409, "illegal-transition")
		evs := e.call("tok-orders", "GET", "/v1/executions/"+exec+"/events", "", "")
		items, _ := evs.body["items"].([]any)
		var got []string
		for i, it := range items {
			m := it.(map[string]any)
			if m["sequence"] != fmt.Sprint(i+1) || m["executionid"] != exec || m["specversion"] != "1.0" {
				t.Fatalf("event %d: %v", i+1, m)
			}
			got = append(got, m["type"].(string))
		}
		if strings.Join(got, ",") != "idem.execution.created,idem.execution.queued,idem.execution.running,idem.execution.progress,idem.execution.succeeded" {
			t.Fatalf("events %v", got)
		}
		if after := e.call("tok-orders", "GET", "/v1/executions/"+exec+"/events?after=3", "", ""); len(after.body["items"].([]any)) != 2 {
			t.Fatalf("after 3: %s", after.raw)
		}
		steps := e.call("tok-orders", "GET", "/v1/executions/"+exec+"/steps", "", "")
		if s := steps.body["items"].([]any)[0].(map[string]any); s["status"] != "COMPLETED" || s["id"] != step || s["attempts"].(float64) != 1 {
			t.Fatalf("steps %s", steps.raw)
		}
		e.want(e.call("tok-orders", "POST", "/v1/executions/"+exec+"/cancel", "", ""), 409, "illegal-transition")
		rerun := e.call("tok-orders", "POST", "/v1/tasks/"+c.str("task", "id")+"/rerun", "r-1", "")
		if rerun.status != 201 || rerun.body["execution"].(map[string]any)["number"].(float64) != 2 {
			t.Fatalf("rerun %s", rerun.raw)
		}
	})

	t.Run("LiveEvents", func(t *testing.T) {
		t.Parallel()
		e := start(t, open)
		exec := e.call("tok-orders", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{}}`).str("execution", "id")
		req, _ := http.NewRequest("GET", e.url+"/v1/executions/"+exec+"/events?after=1", nil)
		req.Header.Set("Authorization", "Bearer tok-orders")
		req.Header.Set("Accept", "text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %v", res.StatusCode, res.Header)
		}
		// The run happens while the stream is open; the stream ends once
		// the execution has finished and its last event was sent.
		go func() { // a failure here leaves the stream short: reported below
			claim, _ := e.try("tok-worker", "POST", "/v1/worker/claim", "", `{"types":["export"]}`)
			_, _ = e.try("tok-worker", "POST", "/v1/worker/steps/"+claim.str("step", "id")+"/complete", "", `{"epoch":1}`)
		}()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, line := range strings.Split(string(b), "\n") {
			if id, ok := strings.CutPrefix(line, "id: "); ok {
				ids = append(ids, id)
			}
		}
		if strings.Join(ids, ",") != "2,3,4" || !strings.Contains(string(b), "event: idem.execution.succeeded") {
			t.Fatalf("stream %q", b)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		e := start(t, open)
		queued := e.call("tok-orders", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{}}`).str("execution", "id")
		if got := e.call("tok-orders", "POST", "/v1/executions/"+queued+"/cancel", "", ""); got.status != 200 || got.str("status") != "CANCELED" {
			t.Fatalf("cancel queued %s", got.raw)
		}
		running := e.call("tok-orders", "POST", "/v1/tasks", "k-2", `{"type":"export","input":{}}`).str("execution", "id")
		step := e.call("tok-worker", "POST", "/v1/worker/claim", "", `{"types":["export"]}`).str("step", "id")
		if got := e.call("tok-orders", "POST", "/v1/executions/"+running+"/cancel", "", ""); got.status != 202 || got.str("status") != "CANCELING" {
			t.Fatalf("cancel running %s", got.raw)
		}
		if hb := e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/heartbeat", "", `{"epoch":1}`); hb.body["cancelRequested"] != true {
			t.Fatalf("heartbeat %s", hb.raw)
		}
		if got := e.call("tok-worker", "POST", "/v1/worker/steps/"+step+"/fail", "", `{"epoch":1,"error":"canceled","retryable":false}`); got.str("execution", "status") != "CANCELED" {
			t.Fatalf("worker gave up: %s", got.raw)
		}
		e.want(e.call("tok-orders", "POST", "/v1/executions/"+running+"/cancel", "", ""), 200, "")
	})

	// 64 identical concurrent creates: one task, one execution, and every
	// caller ends up with that one (retrying while the first runs).
	t.Run("ConcurrentIdenticalCreates", func(t *testing.T) {
		t.Parallel()
		e := start(t, open)
		const n = 64
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				for range 200 {
					a, err := e.try("tok-orders", "POST", "/v1/tasks", "same", `{"type":"export","input":{"order":"o-9"}}`)
					if err != nil {
						return // ids[i] stays empty: reported below
					}
					if a.status == 409 {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if a.status == 201 {
						ids[i] = a.str("task", "id") + "/" + a.str("execution", "id")
					}
					return
				}
			})
		}
		wg.Wait()
		for i, id := range ids {
			if id == "" || id != ids[0] {
				t.Fatalf("caller %d got %q, caller 0 %q", i, id, ids[0])
			}
		}
		list := e.call("tok-orders", "GET", "/v1/tasks", "", "")
		if items, _ := list.body["items"].([]any); len(items) != 1 {
			t.Fatalf("%d tasks, want 1: %s", len(items), list.raw)
		}
		exec := strings.Split(ids[0], "/")[1]
		if evs := e.call("tok-orders", "GET", "/v1/executions/"+exec+"/events", "", ""); len(evs.body["items"].([]any)) != 2 {
			t.Fatalf("events %s", evs.raw)
		}
	})
}

// TestSmallPool serves from a PostgreSQL pool of two connections while
// eight applications' requests create tasks at once: a request holding its
// transaction must never wait for a second connection (every holder
// waiting for one would deadlock the pool until the clients give up).
func TestSmallPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	small, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	s, err := pgstore.New(small, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")},
		CallbackURL: "http://127.0.0.1:1/cb", Scheme: "idem", Secrets: []string{"secret-0123456789"}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(s, &serve.Config{Types: types0()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e := &env{t: t, url: hs.URL}
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Go(func() {
			a, _ := e.try("tok", "POST", "/v1/tasks", fmt.Sprintf("k-%d", i), `{"type":"export","input":{}}`)
			codes[i] = a.status // 0 when the call failed
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != 201 {
			t.Fatalf("create %d: %d", i, c)
		}
	}
}
