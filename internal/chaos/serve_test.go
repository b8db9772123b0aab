package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/webhook"
)

// serveSize is one version of TestServeChaos.
type serveSize struct {
	tasks, workers      int
	duration, killEvery time.Duration
	stall               float64 // share of claims whose worker stalls past its lease
}

func currentServeSize() serveSize {
	if *long {
		return serveSize{tasks: 2000, workers: 16, duration: 60 * time.Second, killEvery: 2 * time.Second, stall: 0.05}
	}
	return serveSize{tasks: 60, workers: 6, duration: 6 * time.Second, killEvery: 1500 * time.Millisecond, stall: 0.15}
}

// TestServeChaos runs three `idem serve` processes on one PostgreSQL schema,
// SIGKILLs one at random again and again, and has workers that sometimes
// stall past their lease (as a SIGSTOPped process would) before
// completing: HTTP workers for the tasks of type export, and in-process
// workers (execution.Worker, in this process) for those of type ledger,
// whose handlers write a ledger row in the transaction that completes
// their step. Every step calls a target that honours Idempotency-Key with
// the step's key. After the faults stop, every task's execution must be
// SUCCEEDED within the lease plus a few seconds; the target must have seen
// one effect per execution; the ledger must hold one row per ledger step,
// written under its final claim; no completion under a stale epoch may
// have been accepted; every history must be numbered 1, 2, 3… with no gap;
// and the application's receiver (an idem webhook endpoint in delta mode)
// must have applied every execution's events, 1, 2, 3… once each,
// delivered by the relays of processes that were killed again and again.
func TestServeChaos(t *testing.T) {
	sz := currentServeSize()
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE chaos_ledger (step text NOT NULL, epoch bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// The application's receiver: an idem webhook endpoint, delta order,
	// ranking executions, on its own memory inbox. It records every event
	// it applies, per execution.
	const secret = "chaos-callback-secret-0123456789"
	var rmu sync.Mutex
	received := map[string][]int64{}
	rp, err := inbox.New(memstore.NewInbox(), func(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
		rmu.Lock()
		defer rmu.Unlock()
		received[ev.ExecutionID] = append(received[ev.ExecutionID], ev.Sequence)
		n := len(received[ev.ExecutionID])
		id := ev.ExecutionID
		tx.OnRollback(func() { rmu.Lock(); received[id] = received[id][:n-1]; rmu.Unlock() })
		return nil
	}, &inbox.Config{Mode: order.ModeDelta, ExecutionRank: execution.Rank})
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rh, err := webhook.New(rp, &webhook.Config{Verifier: v})
	if err != nil {
		t.Fatal(err)
	}
	receiver := httptest.NewServer(rh)
	defer receiver.Close()
	if err := st.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")}, CallbackURL: receiver.URL,
		Scheme: "idem", Secrets: []string{secret}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddWorkerToken(ctx, serve.HashToken("w"), time.Now()); err != nil {
		t.Fatal(err)
	}
	storeURL := schemaURL(t, pool).String()

	// The downstream target: one effect per key, whatever the retries.
	var tmu sync.Mutex
	effects, calls := map[string]int{}, map[string]int{}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		tmu.Lock()
		calls[k]++
		if calls[k] == 1 {
			effects[k]++
		}
		tmu.Unlock()
		w.WriteHeader(200)
	}))
	defer target.Close()

	dir := t.TempDir()
	procs := make([]*proxyProc, 3)
	for i := range procs {
		procs[i] = &proxyProc{t: t, addr: freeAddr(t), log: filepath.Join(dir, fmt.Sprintf("serve-%d.log", i)),
			args: []string{"serve", "--store", storeURL, "--task-types", "export,ledger", "--lease", "2s", "--key-lease", "2s", "--shutdown-timeout", "2s"}}
		procs[i].start()
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	call := func(token, method, path, key string, body any) (int, map[string]any, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		p := procs[rand.IntN(len(procs))]
		req, _ := http.NewRequest(method, "http://"+p.addr+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(res.Body)
		_ = json.Unmarshal(b, &out)
		return res.StatusCode, out, nil
	}

	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The killer.
	var kills atomic.Int64
	wg.Go(func() {
		t := time.NewTicker(sz.killEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				procs[rand.IntN(len(procs))].kill()
				kills.Add(1)
			}
		}
	})
	// The workers.
	type accepted struct {
		step  string
		epoch int64
	}
	var amu sync.Mutex
	var completes []accepted
	var fenced, refused, stalls atomic.Int64
	workersDone := make(chan struct{})
	var workers sync.WaitGroup
	for range sz.workers {
		workers.Go(func() {
			for {
				select {
				case <-workersDone:
					return
				default:
				}
				code, c, err := call("w", "POST", "/v1/worker/claim", "", map[string]any{"types": []string{"export"}, "waitSeconds": 1, "leaseSeconds": 2})
				if err != nil || code != 200 {
					continue
				}
				step, _ := c["step"].(map[string]any)
				id, _ := step["id"].(string)
				key, _ := step["idempotencyKey"].(string)
				epoch := int64(step["epoch"].(float64))
				req, _ := http.NewRequest("POST", target.URL, nil)
				req.Header.Set("Idempotency-Key", key)
				if res, err := http.DefaultClient.Do(req); err == nil {
					res.Body.Close()
				}
				if rand.Float64() < sz.stall {
					stalls.Add(1)
					time.Sleep(3 * time.Second) // past the 2 s lease
				}
				for try := 0; try < 20; try++ {
					code, _, err := call("w", "POST", "/v1/worker/steps/"+id+"/complete", "", map[string]any{"epoch": epoch, "output": map[string]any{"ok": true}})
					if err != nil || code >= 500 {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					switch code {
					case 200:
						amu.Lock()
						completes = append(completes, accepted{id, epoch})
						amu.Unlock()
					case 409:
						fenced.Add(1)
					default:
						refused.Add(1)
					}
					break
				}
			}
		})
	}
	// The in-process workers, on a service of this process that serves
	// nothing (the serve processes' relays deliver its callbacks): one
	// that heartbeats, and one that never does in time and stalls past its
	// lease now and then, its completion then fenced and its ledger row
	// rolled back.
	inproc, err := serve.New(st, &serve.Config{Types: map[string]execution.TypeConfig{"export": {Lease: 2 * time.Second}, "ledger": {Lease: 2 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	ledgerHandler := func(stall float64) execution.Handler[pgx.Tx] {
		return func(hctx context.Context, job execution.Job) (execution.Result[pgx.Tx], error) {
			req, _ := http.NewRequestWithContext(hctx, "POST", target.URL, nil)
			req.Header.Set("Idempotency-Key", job.Step.IdempotencyKey)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return execution.Result[pgx.Tx]{}, err
			}
			res.Body.Close()
			if rand.Float64() < stall {
				stalls.Add(1)
				time.Sleep(3 * time.Second) // past the 2 s lease, no heartbeat
			}
			step, epoch := "orders."+job.Step.ID, job.Step.Epoch
			return execution.Result[pgx.Tx]{Output: json.RawMessage(`{"ok":true}`), Writes: func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO chaos_ledger (step, epoch) VALUES ($1, $2)`, step, epoch)
				return err
			}}, nil
		}
	}
	inprocCtx, stopInproc := context.WithCancel(ctx)
	var inprocWorkers sync.WaitGroup
	for _, wc := range []struct {
		stall float64
		cfg   execution.WorkerConfig
	}{
		{0, execution.WorkerConfig{Concurrency: 4, Poll: 50 * time.Millisecond}},
		{sz.stall, execution.WorkerConfig{Concurrency: 2, Poll: 50 * time.Millisecond, Heartbeat: time.Hour}},
	} {
		w, err := inproc.Engine().NewWorker(map[string]execution.Handler[pgx.Tx]{"ledger": ledgerHandler(wc.stall)}, &wc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		inprocWorkers.Go(func() { _ = w.Run(inprocCtx) })
	}
	// The applications' clients: every task created, retried until 201.
	execs := make([]string, sz.tasks)
	var clients sync.WaitGroup
	for c := range 4 {
		clients.Go(func() {
			for i := c; i < sz.tasks; i += 4 {
				for try := 0; ; try++ {
					code, out, err := call("tok", "POST", "/v1/tasks", fmt.Sprintf("task-%d", i), map[string]any{"type": taskType(i), "input": map[string]any{"n": i}})
					if err == nil && code == 201 {
						execs[i] = out["execution"].(map[string]any)["id"].(string)
						break
					}
					if try > 1000 {
						t.Errorf("task %d never created: %d %v %v", i, code, out, err)
						return
					}
					// A process killed while creating leaves its key held
					// for --key-lease: 409 until then.
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(sz.duration / time.Duration(sz.tasks/4+1))
			}
		})
	}
	clients.Wait()
	time.Sleep(max(0, sz.duration-time.Since(start)))
	close(stop)
	wg.Wait()
	// The faults stopped: every execution must finish within lease + 5 s
	// (plus a claim's wait and a stalled worker's sleep).
	deadline := time.Now().Add(2*time.Second + 5*time.Second + 4*time.Second)
	var pending []string
	for {
		pending = pending[:0]
		for _, id := range execs {
			e, err := st.GetExecution(ctx, "orders", id)
			if err != nil || e.Status != store.ExecutionSucceeded {
				pending = append(pending, id)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	close(workersDone)
	workers.Wait()
	stopInproc()
	inprocWorkers.Wait()
	if len(pending) > 0 {
		t.Fatalf("%d executions not SUCCEEDED within lease + 5 s after the faults stopped (e.g. %s)", len(pending), pending[0])
	}
	// One effect per execution's key, and no other key.
	tmu.Lock()
	for i, id := range execs {
		if k := id + ":" + taskType(i); effects[k] != 1 {
			t.Errorf("execution %s: %d effects at the target", id, effects[k])
		}
	}
	if len(effects) != sz.tasks {
		t.Errorf("the target saw %d keys, want %d", len(effects), sz.tasks)
	}
	retries := 0
	for _, n := range calls {
		retries += n - 1
	}
	tmu.Unlock()
	// Every accepted completion was under the step's final claim, and the
	// histories are whole.
	final := map[string]int64{}
	for _, id := range execs {
		steps, err := st.ListSteps(ctx, "orders", id)
		if err != nil || len(steps) != 1 {
			t.Fatalf("steps of %s: %v %v", id, steps, err)
		}
		final["orders."+steps[0].ID] = steps[0].Epoch
		evs, err := st.ListEvents(ctx, "orders", id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range evs {
			if ev.Sequence != int64(i+1) {
				t.Fatalf("execution %s: event %d has sequence %d", id, i+1, ev.Sequence)
			}
		}
		if types := eventTypes(evs); types[len(types)-1] != "idem.execution.succeeded" || slices.Index(types, "idem.execution.succeeded") != len(types)-1 {
			t.Fatalf("execution %s: events %v", id, types)
		}
	}
	// The receiver got every execution's events, contiguous from 1, once
	// each (the relays in the killed processes were restarted with them).
	want := map[string]int{}
	for _, id := range execs {
		e, err := st.GetExecution(ctx, "orders", id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = int(e.LastSequence)
	}
	// A relay killed while holding a callback leaves it for its lease
	// (15 s) before another takes it over, and retries back off.
	deliveredBy := time.Now().Add(60 * time.Second)
	for {
		missing := 0
		rmu.Lock()
		for id, n := range want {
			got := received[id]
			for i, seq := range got {
				if seq != int64(i+1) {
					rmu.Unlock()
					t.Fatalf("execution %s: the receiver applied %v, not 1, 2, 3… once each", id, got)
				}
			}
			if len(got) > n {
				rmu.Unlock()
				t.Fatalf("execution %s: the receiver applied %v, beyond its %d events", id, got, n)
			}
			if len(got) < n {
				missing++
			}
		}
		rmu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deliveredBy) {
			dead, _ := st.ListIntents(ctx, store.IntentDead, 0, 10)
			t.Fatalf("%d executions' callbacks not all delivered within 60 s (dead intents: %+v)", missing, dead)
		}
		time.Sleep(200 * time.Millisecond)
	}
	amu.Lock()
	for _, a := range completes {
		if a.epoch != final[a.step] {
			t.Errorf("a completion under epoch %d was accepted; the step's claim is %d", a.epoch, final[a.step])
		}
	}
	n := len(completes)
	amu.Unlock()
	// The ledger: one row per ledger step, written under its final claim.
	rows, err := pool.Query(ctx, `SELECT step, epoch FROM chaos_ledger`)
	if err != nil {
		t.Fatal(err)
	}
	ledger := map[string][]int64{}
	for rows.Next() {
		var step string
		var epoch int64
		if err := rows.Scan(&step, &epoch); err != nil {
			t.Fatal(err)
		}
		ledger[step] = append(ledger[step], epoch)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	ledgerSteps := 0
	for i, id := range execs {
		if taskType(i) != "ledger" {
			continue
		}
		ledgerSteps++
		steps, err := st.ListSteps(ctx, "orders", id)
		if err != nil || len(steps) != 1 {
			t.Fatalf("steps of %s: %v %v", id, steps, err)
		}
		step := "orders." + steps[0].ID
		if got := ledger[step]; len(got) != 1 || got[0] != steps[0].Epoch {
			t.Errorf("step %s: ledger rows under epochs %v, want one under its final epoch %d", step, got, steps[0].Epoch)
		}
		delete(ledger, step)
	}
	if len(ledger) != 0 {
		t.Errorf("ledger rows of no ledger step: %v", ledger)
	}
	if kills.Load() == 0 || stalls.Load() == 0 {
		t.Fatalf("kills %d, stalls %d: the test proved nothing about crashes or stale workers", kills.Load(), stalls.Load())
	}
	events := 0
	for _, n := range want {
		events += n
	}
	t.Logf("%d tasks over 3 serve processes: %d kills, %d stalled workers, %d HTTP completions accepted, %d refused as fenced (409), %d refused otherwise; %d ledger steps run in process, one ledger row each; %d repeated calls at the target (one effect per key); %d events applied by the receiver, each once and in order",
		sz.tasks, kills.Load(), stalls.Load(), n, fenced.Load(), refused.Load(), ledgerSteps, retries, events)
}

// taskType is the type of the chaos test's task i: every other one runs
// in process.
func taskType(i int) string {
	if i%2 == 1 {
		return "ledger"
	}
	return "export"
}

func eventTypes(evs []store.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

// TestServeBacklog fills a PostgreSQL schema with queued executions (each
// with its task, two events and a dispatched step, written by SQL in bulk),
// starts `idem serve` on it and drains it with HTTP workers: the process's
// resident memory must stay small whatever the backlog (it holds no
// queue, every claim is one indexed walk). 20,000 in CI; 1,000,000 with
// -chaos.long.
func TestServeBacklog(t *testing.T) {
	n, drainFor := 20000, 5*time.Second
	if *long {
		n, drainFor = 1000000, 60*time.Second
	}
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddWorkerToken(ctx, serve.HashToken("w"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")}, Scheme: "idem", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	fill := time.Now()
	for _, q := range []string{
		`INSERT INTO idem_tasks (app, id, type, input, external_ref, current_execution, status, created_at)
		 SELECT 'orders', 't' || g, 'export', '{"n":1}', '', 'e' || g, 2, now() FROM generate_series(1, $1) g`,
		`INSERT INTO idem_executions (app, id, task_id, number, status, last_seq, created_at)
		 SELECT 'orders', 'e' || g, 't' || g, 1, 2, 2, now() FROM generate_series(1, $1) g`,
		`INSERT INTO idem_execution_events (app, execution_id, seq, type, data, at)
		 SELECT 'orders', 'e' || g, s, CASE s WHEN 1 THEN 'idem.execution.created' ELSE 'idem.execution.queued' END, '{}', now()
		 FROM generate_series(1, $1) g, generate_series(1, 2) s`,
		`INSERT INTO idem_steps (app, id, execution_id, name, type, once, status, due_at, idempotency_key, created_at)
		 SELECT 'orders', 's' || g, 'e' || g, 'export', 'export', false, 2, now() - interval '1 hour', 'e' || g || ':export', now()
		 FROM generate_series(1, $1) g`,
		`ANALYZE`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{n}
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("backlog of %d queued executions written in %v", n, time.Since(fill).Round(time.Millisecond))

	p := &proxyProc{t: t, addr: freeAddr(t), log: filepath.Join(t.TempDir(), "serve.log"),
		args: []string{"serve", "--store", schemaURL(t, pool).String(), "--task-types", "export"}}
	p.start()
	idle := rssOf(p)
	var done atomic.Int64
	stop := time.Now().Add(drainFor)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", "http://"+p.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer w")
		res, err := client.Do(req)
		if err != nil {
			return 0, nil
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				code, c := post("/v1/worker/claim", `{"types":["export"]}`)
				if code != 200 {
					continue
				}
				step := c["step"].(map[string]any)
				if code, _ := post("/v1/worker/steps/"+step["id"].(string)+"/complete",
					fmt.Sprintf(`{"epoch":%d}`, int64(step["epoch"].(float64)))); code == 200 {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	peak := rssOf(p)
	p.stop()
	t.Logf("drained %d executions in %v (%.0f/s) from a backlog of %d; idem serve resident memory %.1f MiB idle, peak %.1f MiB",
		done.Load(), drainFor, float64(done.Load())/drainFor.Seconds(), n, float64(idle)/(1<<20), float64(peak)/(1<<20))
	if done.Load() == 0 {
		t.Fatal("nothing drained")
	}
	if peak > 128<<20 {
		t.Fatalf("peak resident memory %.1f MiB, want < 128 MiB", float64(peak)/(1<<20))
	}
}

// rssOf is the process's peak resident memory so far (VmHWM).
func rssOf(p *proxyProc) int {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	p.sampleRSS(cmd)
	return p.peakRSS()
}
