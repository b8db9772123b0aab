package serve_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store/pgstore"
)

// Waiting claims poll once an hour here and wait up to 30 s: a claim
// answered within 10 s of the task's creation was woken by it.

// A claim waiting on the service wakes when a task is created on it.
func TestClaimWakesOnCreate(t *testing.T) {
	t.Parallel()
	s := openSQLite(t)
	seed(t, s)
	e := startOn(t, s, &serve.Config{Types: types0(), ClaimPoll: time.Hour})
	claimAfterCreate(t, e, e)
}

// A claim waiting on one service wakes when a task is created on another
// on the same PostgreSQL (NOTIFY and LISTEN), as several idem serve
// processes share the work.
func TestClaimWakesAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool, _ := migratedPostgres(t)
	var envs []*env
	for i := range 2 { // two services, each with its own store, on one schema
		s, err := pgstore.New(pool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			seed(t, s)
		}
		envs = append(envs, startOn(t, s, &serve.Config{Types: types0(), ClaimPoll: time.Hour}))
	}
	listening(t, pool, 2)
	claimAfterCreate(t, envs[0], envs[1])
}

// listening waits until n connections of the pool's schema listen for
// steps (the pool's connections carry the test's schema as their
// application_name).
func listening(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	for i := 0; ; i++ {
		var got int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = current_setting('application_name') AND query = 'LISTEN idem_steps'`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		if i == 3000 { // 30 s: a loaded CI machine is slow to hand out connections
			t.Fatalf("%d listen for steps, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An in-process worker on PostgreSQL wakes when another process tells of
// new steps (NotifySteps, as idem serve does after dispatching), though it
// polls once an hour.
func TestInProcessWorkerWakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, s := migratedPostgres(t)
	en, err := execution.New[pgx.Tx](s, &execution.Config{Types: types0()})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 1)
	w, err := en.NewWorker(map[string]execution.Handler[pgx.Tx]{
		"export": func(_ context.Context, job execution.Job) (execution.Result[pgx.Tx], error) {
			ran <- job.Task.ID
			return execution.Result[pgx.Tx]{}, nil
		},
	}, &execution.WorkerConfig{Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = w.Run(wctx) }()
	defer func() { cancel(); <-stopped }()
	listening(t, pool, 1)
	var task string
	if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		created, _, err := en.CreateTx(ctx, tx, "orders", execution.NewTask{Type: "export", Input: json.RawMessage(`{}`)})
		task = created.ID
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.NotifySteps(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ran:
		if got != task {
			t.Fatalf("ran task %s, want %s", got, task)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle worker was not woken by the new step")
	}
}

// claimAfterCreate starts a claim on waiter and, once it waits, creates a
// task on creator: the claim must get the task's step at once.
func claimAfterCreate(t *testing.T, creator, waiter *env) {
	t.Helper()
	got := make(chan answer, 1)
	go func() {
		a, err := waiter.try("tok-worker", "POST", "/v1/worker/claim", "", `{"types":["export"],"waitSeconds":30}`)
		if err != nil {
			a.raw = err.Error()
		}
		got <- a
	}()
	time.Sleep(200 * time.Millisecond) // the claim finds nothing and waits
	created := creator.call("tok-orders", "POST", "/v1/tasks", "k1", `{"type":"export","input":{}}`)
	creator.want(created, 201, "")
	select {
	case a := <-got:
		if a.status != 200 || a.str("task", "id") != created.str("task", "id") {
			t.Fatalf("claim: %d %s, want 200 with the new task", a.status, a.raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim was not woken by the new task")
	}
}
