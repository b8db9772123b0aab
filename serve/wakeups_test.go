package serve_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testdb"
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
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
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
	// Both listen before the test goes on: the pool's connections carry
	// the test's schema as their application_name.
	for i := 0; ; i++ {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = current_setting('application_name') AND query = 'LISTEN idem_steps'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if i == 500 {
			t.Fatalf("%d services listen, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	claimAfterCreate(t, envs[0], envs[1])
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
