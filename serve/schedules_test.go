package serve_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
)

// scheduledFlow charges on every tick of cron, keyed by the tick.
func scheduledFlow(payURL, cron, catchUp string) string {
	return `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"schedule": {"cron": "` + cron + `", "catchUp": "` + catchUp + `", "payload": {"plan": "nightly"}}}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "` + payURL + `/v1/charges",
    "headers": {"Idempotency-Key": "= 'charge-' & payload.tick"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "done"}]}`
}

// runsOf counts the runs of the application's workflows (their hidden
// tasks), straight from the store.
func runsOf[TX any](t *testing.T, s serve.Store[TX]) int {
	t.Helper()
	tasks, err := s.ListTasks(context.Background(), store.TaskQuery{App: "orders", Type: "idem.workflow", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return len(tasks)
}

// twoSchedulers serves s twice, as two processes would, each with its own
// scheduler, on clock.
func twoSchedulers[TX any](t *testing.T, s serve.Store[TX], clk *clock) (*env, func()) {
	t.Helper()
	seed(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var first *env
	for i := range 2 {
		srv, err := serve.New(s, &serve.Config{Types: types, Now: clk.Now, ScheduleInterval: 10 * time.Millisecond, ClaimPoll: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		if i == 0 {
			first = &env{t: t, url: hs.URL}
		}
		wg.Go(func() { _ = srv.RunSchedules(ctx) })
		wg.Go(func() { _ = srv.RunWorkflows(ctx) })
	}
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return first, stop
}

// eventually waits for cond, or fails with what.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
	}
}

// Each tick of a schedule is one run, though two services fire it; a
// trigger of the tick's identity gets that run.
func TestScheduleFiresEachTickOnce(t *testing.T) {
	t.Parallel()
	t.Run("SQLite", func(t *testing.T) { t.Parallel(); scheduleCase(t, openSQLite(t)) })
	t.Run("Postgres", func(t *testing.T) { t.Parallel(); scheduleCase(t, openPostgres(t)) })
}

func scheduleCase[TX any](t *testing.T, s serve.Store[TX]) {
	pay, payURL := newPayments(t)
	// A minute's start, so that the ticks are whole minutes from here.
	clk := newClock()
	now := clk.Now()
	clk.Advance(now.Truncate(time.Minute).Add(time.Minute + 30*time.Second).Sub(now))
	e, _ := twoSchedulers(t, s, clk)
	e.putWorkflow("nightly", scheduledFlow(payURL, "* * * * *", "latest"))
	// No tick came due since the version was stored: no run.
	time.Sleep(100 * time.Millisecond)
	if n := runsOf(t, s); n != 0 {
		t.Fatalf("%d runs before the first tick", n)
	}
	for i := 1; i <= 3; i++ {
		clk.Advance(time.Minute)
		eventually(t, fmt.Sprintf("tick %d's run", i), func() bool { return runsOf(t, s) == i })
	}
	time.Sleep(100 * time.Millisecond)
	if n := runsOf(t, s); n != 3 {
		t.Fatalf("%d runs after 3 ticks and two schedulers, want 3", n)
	}
	eventually(t, "3 charges", func() bool { keys, _, _ := pay.effects(); return keys == 3 })
	tick := clk.Now().Truncate(time.Minute).UTC().Format(time.RFC3339)
	again := e.call("tok-orders", "POST", "/v1/workflows/nightly/trigger?clientIdempotencyId=cron-"+tick, "", `{"plan": "nightly", "tick": "`+tick+`"}`)
	if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the last tick's identity: %d %s, want its run", again.status, again.raw)
	}
}

// After downtime, the ticks missed run as the schedule's catchUp says:
// all of them, the latest only, or none.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		catchUp string
		want    int
	}{{"all", 5}, {"latest", 1}, {"none", 0}} {
		t.Run(c.catchUp, func(t *testing.T) {
			t.Parallel()
			s := openSQLite(t)
			_, payURL := newPayments(t)
			clk := newClock()
			now := clk.Now()
			clk.Advance(now.Truncate(time.Minute).Add(30 * time.Second).Sub(now))
			seed(t, s)
			// The definition is stored while no scheduler runs…
			srv, err := serve.New(s, &serve.Config{Types: types, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			e := &env{t: t, url: hs.URL}
			e.putWorkflow("nightly", scheduledFlow(payURL, "* * * * *", c.catchUp))
			// …and five ticks pass before one starts.
			clk.Advance(5 * time.Minute)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			sched, err := serve.New(s, &serve.Config{Types: types, Now: clk.Now, ScheduleInterval: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			go func() { defer close(done); _ = sched.RunSchedules(ctx) }()
			if c.want > 0 {
				eventually(t, "the catch-up", func() bool { return runsOf(t, s) >= c.want })
			}
			time.Sleep(150 * time.Millisecond)
			cancel()
			<-done
			if n := runsOf(t, s); n != c.want {
				t.Fatalf("catchUp %s: %d runs after 5 missed ticks, want %d", c.catchUp, n, c.want)
			}
		})
	}
}
