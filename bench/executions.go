package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// workers is how many jobs each side's in-process worker runs at once, as
// in serve's BenchmarkExecutions and BenchmarkRiver; both poll every
// millisecond when idle.
const workers = 8

// outcome is what one create answered.
type outcome string

const (
	created   outcome = "created"   // a new task or job
	duplicate outcome = "duplicate" // the existing one, nothing new
	// refusedConflict is a create of a known key with another input,
	// refused: idem serve's 422, the library's key.OutcomeConflict.
	refusedConflict outcome = "refused (conflict)"
)

// executor creates tasks (jobs) under a key and works them in process.
type executor interface {
	// create asks for the work keyed by k with this amount; another
	// answer than created or duplicate is returned as an outcome of its
	// own (a refusal with its status).
	create(ctx context.Context, k string, amount int) (outcome, error)
	// completed counts the tasks (jobs) whose work is recorded completed.
	completed(ctx context.Context) (int64, error)
}

// execSetup is idem or River on a schema of its own. open returns an
// executor whose worker calls worked with each key it works until ctx
// ends; second returns another executor on the same schema, without a
// worker, as another process would insert.
type execSetup struct {
	name string
	idem bool
	// duplicateOnly setups are measured in the duplicate row only,
	// createOnly ones in the create row only.
	duplicateOnly, createOnly bool
	// inProcess setups (idem as a library) have rows of their own, named
	// with inProcessRow, beside the same peers' figures.
	inProcess bool
	open      func(ctx context.Context, e *env, worked func(k string)) (first executor, second func() (executor, error), err error)
}

var execSetups = []execSetup{
	{name: "idem serve (POST /v1/tasks with Idempotency-Key) + execution.Worker (default: 16 MiB replay cache)", idem: true, open: openIdemExec(nil)},
	{name: "idem serve, replay cache off", duplicateOnly: true, open: openIdemExec(&key.Config{ReplayCacheBytes: -1})},
	{name: "idem as a library (key.TxGuard + execution.Engine, one transaction) + execution.Worker", idem: true, createOnly: true, inProcess: true, open: openIdemLib},
	{name: "River (unique job by args) + River worker", open: openRiver},
}

// idemExec is idem serve's task service on PostgreSQL, called in process
// (ServeHTTP, no network), as serve's own benchmarks do.
type idemExec struct {
	srv  *serve.Server[pgx.Tx]
	pool *pgxpool.Pool
}

const benchToken = "bench-token"

// openIdemExec opens idem serve with the request keys of cfg (nil: the
// defaults).
func openIdemExec(cfg *key.Config) func(context.Context, *env, func(string)) (executor, func() (executor, error), error) {
	return func(ctx context.Context, e *env, worked func(string)) (executor, func() (executor, error), error) {
		return openIdemServe(ctx, e, worked, cfg)
	}
}

func openIdemServe(ctx context.Context, e *env, worked func(string), cfg *key.Config) (executor, func() (executor, error), error) {
	return openIdem(ctx, e, worked, func(pool *pgxpool.Pool, s *pgstore.Store) (executor, *execution.Engine[pgx.Tx], error) {
		srv, err := serve.New(s, &serve.Config{Types: map[string]execution.TypeConfig{"export": {}}, Key: cfg})
		if err != nil {
			return nil, nil, err
		}
		return &idemExec{srv: srv, pool: pool}, srv.Engine(), nil
	}, func(s *pgstore.Store) error {
		return s.CreateApp(ctx, store.App{Name: "bench", TokenHashes: [][]byte{serve.HashToken(benchToken)}, Scheme: "idem", CreatedAt: time.Now()})
	})
}

// openIdem opens idem on a schema of its own: newX makes an executor on a
// pool (the first, with the worker, and the second's), setup runs once
// on the migrated schema.
func openIdem(ctx context.Context, e *env, worked func(string),
	newX func(*pgxpool.Pool, *pgstore.Store) (executor, *execution.Engine[pgx.Tx], error),
	setup func(*pgstore.Store) error,
) (executor, func() (executor, error), error) {
	pool, err := e.schema(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		return nil, nil, err
	}
	open := func(pool *pgxpool.Pool) (executor, *execution.Engine[pgx.Tx], error) {
		s, err := pgstore.New(pool, nil)
		if err != nil {
			return nil, nil, err
		}
		if setup != nil {
			if err := setup(s); err != nil {
				return nil, nil, err
			}
			setup = nil // once, on the first pool
		}
		return newX(pool, s)
	}
	first, en, err := open(pool)
	if err != nil {
		return nil, nil, err
	}
	w, err := en.NewWorker(map[string]execution.Handler[pgx.Tx]{"export": exportHandler(worked)},
		&execution.WorkerConfig{Concurrency: workers, Poll: time.Millisecond})
	if err != nil {
		return nil, nil, err
	}
	ran := make(chan struct{})
	go func() { defer close(ran); _ = w.Run(ctx) }()
	e.cleanups = append(e.cleanups, func() { <-ran }) // after ctx ends, before the pool closes
	second := func() (executor, error) {
		p, err := e.pool(ctx, pool)
		if err != nil {
			return nil, err
		}
		x, _, err := open(p)
		return x, err
	}
	return first, second, nil
}

func (x *idemExec) create(ctx context.Context, k string, amount int) (outcome, error) {
	body := fmt.Sprintf(`{"type":"export","input":{"order":%q,"amount":%d}}`, k, amount)
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/tasks", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+benchToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpidem.HeaderKey, k)
	rec := httptest.NewRecorder()
	x.srv.ServeHTTP(rec, req)
	switch {
	case rec.Code == http.StatusCreated && rec.Header().Get(httpidem.HeaderReplayed) == "true":
		return duplicate, nil
	case rec.Code == http.StatusCreated:
		return created, nil
	case rec.Code == http.StatusUnprocessableEntity:
		return refusedConflict, nil
	default:
		return outcome(fmt.Sprintf("refused (%d)", rec.Code)), nil
	}
}

func (x *idemExec) completed(ctx context.Context) (int64, error) { return completedSteps(ctx, x.pool) }

// completedSteps counts idem's steps recorded completed in pool's schema.
func completedSteps(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_steps WHERE status = 4`).Scan(&n)
	return n, err
}

// idemLib is idem used as a Go library, as a service that embeds it would:
// a transactional request key (key.TxGuard) whose operation creates the
// task with execution.Engine in the key's transaction, so that the key's
// stored answer, the task, its execution, its events and its step commit
// together, as idem serve's POST /v1/tasks does, without its HTTP and its
// application tokens.
type idemLib struct {
	guard *key.TxGuard[pgx.Tx]
	en    *execution.Engine[pgx.Tx]
	pool  *pgxpool.Pool
}

func openIdemLib(ctx context.Context, e *env, worked func(string)) (executor, func() (executor, error), error) {
	return openIdem(ctx, e, worked, func(pool *pgxpool.Pool, s *pgstore.Store) (executor, *execution.Engine[pgx.Tx], error) {
		g, err := key.NewTx[pgx.Tx](s, nil)
		if err != nil {
			return nil, nil, err
		}
		en, err := execution.New[pgx.Tx](s, &execution.Config{Types: map[string]execution.TypeConfig{"export": {}}})
		if err != nil {
			return nil, nil, err
		}
		return &idemLib{guard: g, en: en, pool: pool}, en, nil
	}, nil)
}

func (x *idemLib) create(ctx context.Context, k string, amount int) (outcome, error) {
	input, err := json.Marshal(exportArgs{Order: k, Amount: amount})
	if err != nil {
		return "", err
	}
	req := key.Request{Scope: key.Scope{Principal: "bench", Operation: "create export", Key: k}, Fingerprint: key.FingerprintOf(input)}
	res, err := x.guard.DoTx(ctx, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		task, _, err := x.en.CreateTx(ctx, tx, "bench", execution.NewTask{Type: "export", Input: input})
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]string{"task": task.ID})
	})
	switch res.Outcome {
	case key.OutcomeExecuted:
		return created, err
	case key.OutcomeReplayed:
		return duplicate, err
	case key.OutcomeConflict:
		return refusedConflict, nil
	case key.OutcomeInFlight:
		return "refused (in flight)", nil
	default:
		return "", err
	}
}

func (x *idemLib) completed(ctx context.Context) (int64, error) { return completedSteps(ctx, x.pool) }

// exportHandler is idem's worker handler for an export task: it reports
// the order it works.
func exportHandler(worked func(string)) execution.Handler[pgx.Tx] {
	return func(_ context.Context, job execution.Job) (execution.Result[pgx.Tx], error) {
		var in exportArgs
		if err := json.Unmarshal(job.Task.Input, &in); err != nil {
			return execution.Result[pgx.Tx]{}, execution.Permanent(err)
		}
		worked(in.Order)
		return execution.Result[pgx.Tx]{Output: json.RawMessage(`{"ok":true}`)}, nil
	}
}

// exportArgs is River's job, and idem's task input: the order is the key.
type exportArgs struct {
	Order  string `json:"order" river:"unique"`
	Amount int    `json:"amount"`
}

func (exportArgs) Kind() string { return "export" }

type exportWorker struct {
	river.WorkerDefaults[exportArgs]
	worked func(string)
}

func (w *exportWorker) Work(_ context.Context, j *river.Job[exportArgs]) error {
	w.worked(j.Args.Order)
	return nil
}

// riverExec is River on PostgreSQL: a unique job by its args' unique
// fields (the order), River's documented way to make an insert idempotent.
type riverExec struct {
	client *river.Client[pgx.Tx]
	pool   *pgxpool.Pool
}

func openRiver(ctx context.Context, e *env, worked func(string)) (executor, func() (executor, error), error) {
	pool, err := e.schema(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, nil, err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &exportWorker{worked: worked})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Workers:       ws,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		FetchCooldown: time.Millisecond,
	})
	if err != nil {
		return nil, nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, nil, err
	}
	e.cleanups = append(e.cleanups, func() { // before the pool closes
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stop)
	})
	second := func() (executor, error) {
		p, err := e.pool(ctx, pool)
		if err != nil {
			return nil, err
		}
		c, err := river.NewClient(riverpgxv5.New(p), &river.Config{})
		if err != nil {
			return nil, err
		}
		return &riverExec{client: c, pool: p}, nil
	}
	return &riverExec{client: client, pool: pool}, second, nil
}

func (x *riverExec) create(ctx context.Context, k string, amount int) (outcome, error) {
	res, err := x.client.Insert(ctx, exportArgs{Order: k, Amount: amount}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
	if err != nil {
		return "", err
	}
	if res.UniqueSkippedAsDuplicate {
		return duplicate, nil
	}
	return created, nil
}

func (x *riverExec) completed(ctx context.Context) (int64, error) {
	var n int64
	err := x.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&n)
	return n, err
}

// tracker follows the keys a worker works: how often each ran, and the
// time from its create to its run.
type tracker struct {
	mu      sync.Mutex
	started map[string]time.Time
	runs    map[string]int
	lat     []time.Duration
	total   int64
}

func newTracker() *tracker {
	return &tracker{started: map[string]time.Time{}, runs: map[string]int{}}
}

func (t *tracker) start(k string) {
	t.mu.Lock()
	t.started[k] = time.Now()
	t.mu.Unlock()
}

func (t *tracker) worked(k string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.started[k]; ok {
		t.lat = append(t.lat, time.Since(s))
		delete(t.started, k)
	}
	t.runs[k]++
	t.total++
}

// latencies returns the latencies recorded since the last call.
func (t *tracker) latencies() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	lat := t.lat
	t.lat = nil
	return lat
}

// count is how many runs there were in all.
func (t *tracker) count() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

func (t *tracker) ran(k string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[k]
}

// drainTimeout bounds the wait for the workers to finish what was created.
const drainTimeout = 2 * time.Minute

// waitCompleted waits until x records want completed and the worker ran
// runs times in all.
func waitCompleted(ctx context.Context, x executor, t *tracker, want, runs int64) error {
	deadline := time.Now().Add(drainTimeout)
	for {
		n, err := x.completed(ctx)
		if err != nil {
			return err
		}
		ran := t.count()
		if n >= want && ran >= runs {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %d of %d completed, %d of %d runs", drainTimeout, n, want, ran, runs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// runExecutions measures, for idem and River: create+complete (clients
// create new keys for the duration while the worker completes them; the
// rate counts until the last is completed, the latency is from a create
// call to its run in the worker), and a duplicate create (each client
// creates, again and again, a key that was created and completed).
func runExecutions(ctx context.Context, e *env, opts options) ([]line, error) {
	var out []line
	for _, s := range execSetups {
		mark := e.mark()
		wctx, stop := context.WithCancel(ctx)
		lines, err := runExecSetup(wctx, e, opts, s)
		stop()          // the worker stops,
		e.release(mark) // then its pools close
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		out = append(out, lines...)
	}
	// The peers' figures again, in the rows of idem in process.
	inProc := map[string]bool{}
	for _, l := range out {
		if base, ok := strings.CutSuffix(l.row, inProcessRow); ok {
			inProc[base] = true
		}
	}
	for _, l := range slices.Clone(out) {
		if !l.idem && inProc[l.row] {
			l.row += inProcessRow
			out = append(out, l)
		}
	}
	return out, nil
}

// inProcessRow names the rows of idem used as a library: the work of the
// row's name, without idem serve's HTTP and application tokens.
const inProcessRow = ", idem in process"

// The rows of this group.
const (
	rowCreate    = "Execution create+complete, PostgreSQL"
	rowDuplicate = "Execution duplicate create (completed key), PostgreSQL"
)

func runExecSetup(ctx context.Context, e *env, opts options, s execSetup) ([]line, error) {
	t := newTracker()
	x, second, err := s.open(ctx, e, t.worked)
	if err != nil {
		return nil, err
	}
	check, err := checkExec(ctx, x, second, t)
	if err != nil {
		return nil, fmt.Errorf("checks: %w", err)
	}
	var out []line
	ks := newKeys()
	for _, n := range opts.clients {
		rows := []struct {
			name    string
			measure func(context.Context, executor, *tracker, *keys, int, time.Duration) (result, error)
		}{{rowCreate, measureCreate}, {rowDuplicate, measureDuplicate}}
		for _, row := range rows {
			if s.duplicateOnly && row.name != rowDuplicate || s.createOnly && row.name != rowCreate {
				continue
			}
			name := row.name
			if s.inProcess {
				name += inProcessRow
			}
			opts.logger.Info("measuring", "row", row.name, "peer", s.name, "clients", n)
			r, err := row.measure(ctx, x, t, ks, n, opts.duration)
			if err != nil {
				return nil, fmt.Errorf("%s, %d clients: %w", row.name, n, err)
			}
			out = append(out, line{row: name, peer: s.name, idem: s.idem, clients: n, result: r, unit: "ops/s",
				guarantees: check.String(), kept: check.ok()})
		}
	}
	return out, nil
}

// measureCreate has n clients create new keys for d while the worker
// works them. The rate counts until the last one is completed; the
// latencies are from a create call to its run in the worker.
func measureCreate(ctx context.Context, x executor, t *tracker, ks *keys, n int, d time.Duration) (result, error) {
	done, err := x.completed(ctx)
	if err != nil {
		return result{}, err
	}
	ran := t.count()
	t.latencies()
	var made atomic.Int64
	start := time.Now()
	if _, err := drive(ctx, n, d, func(ctx context.Context, _ int) error {
		k := ks.next()
		t.start(k)
		o, err := x.create(ctx, k, 100)
		if err == nil && o != created {
			err = fmt.Errorf("%w: %s", errUnexpected, o)
		}
		made.Add(1)
		return err
	}); err != nil {
		return result{}, err
	}
	if err := waitCompleted(ctx, x, t, done+made.Load(), ran+made.Load()); err != nil {
		return result{}, err
	}
	return summarize(t.latencies(), time.Since(start)), nil
}

// measureDuplicate has each of n clients create a key and wait for its
// work to complete, then create that key again and again for d: every
// create must answer duplicate.
func measureDuplicate(ctx context.Context, x executor, t *tracker, ks *keys, n int, d time.Duration) (result, error) {
	done, err := x.completed(ctx)
	if err != nil {
		return result{}, err
	}
	ran := t.count()
	own := make([]string, n)
	for c := range own {
		own[c] = ks.next()
		if o, err := x.create(ctx, own[c], 100); err != nil || o != created {
			return result{}, fmt.Errorf("first create: %s %v", o, err)
		}
	}
	if err := waitCompleted(ctx, x, t, done+int64(n), ran+int64(n)); err != nil {
		return result{}, err
	}
	return drive(ctx, n, d, func(ctx context.Context, c int) error {
		o, err := x.create(ctx, own[c], 100)
		if err == nil && o != duplicate {
			err = fmt.Errorf("%w: %s", errUnexpected, o)
		}
		return err
	})
}

// execCheck is what the guarantee checks observed of one executor.
type execCheck struct {
	// sent creates of one new key, half through each of two clients of
	// one database, at once: how many created, how often the work ran.
	sent, created, runs int
	// again is what a create of a completed key answered.
	again outcome
	// otherInput is what a create of a known key with another input
	// answered.
	otherInput outcome
}

// ok is true when the executor kept all three guarantees.
func (c execCheck) ok() bool {
	return c.created == 1 && c.runs == 1 && c.again == duplicate && c.otherInput == refusedConflict
}

func (c execCheck) String() string {
	again := "deduplicated"
	if c.again != duplicate {
		again = string(c.again)
	}
	other := string(c.otherInput)
	if c.otherInput == duplicate {
		other = "got the first one, no refusal"
	}
	return fmt.Sprintf("1 key ×%d at once from 2 clients: %d created, ran %d×; again once completed: %s; other input: %s",
		c.sent, c.created, c.runs, again, other)
}

// checkExec observes three things of x (with second, another client on
// the same database): (a) one new key created eight times at once, four
// through each: how many are created and how often does the work run? (b)
// the key created again once its work completed: deduplicated? (c) a key
// created with another input: refused, or answered with the first one?
// It returns once everything it created is completed.
func checkExec(ctx context.Context, x executor, second func() (executor, error), t *tracker) (execCheck, error) {
	const sent = 8
	y, err := second()
	if err != nil {
		return execCheck{}, err
	}
	done, err := x.completed(ctx)
	if err != nil {
		return execCheck{}, err
	}
	ran := t.count()
	ks := newKeys()
	c := execCheck{sent: sent}

	// (a) one key, at once, through two clients.
	k := ks.next()
	outcomes := make([]outcome, sent)
	errs := make([]error, sent)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sent {
		wg.Go(func() {
			via := x
			if i%2 == 1 {
				via = y
			}
			<-start
			outcomes[i], errs[i] = via.create(ctx, k, 100)
		})
	}
	close(start)
	wg.Wait()
	for i, o := range outcomes {
		if errs[i] != nil {
			return c, errs[i]
		}
		if o == created {
			c.created++
		}
	}
	made := int64(c.created)
	if err := waitCompleted(ctx, x, t, done+made, ran+made); err != nil {
		return c, err
	}
	c.runs = t.ran(k)

	// (b) the same key again, completed.
	if c.again, err = x.create(ctx, k, 100); err != nil {
		return c, err
	}
	if c.again == created {
		made++
	}

	// (c) a known key with another input.
	k = ks.next()
	if o, err := x.create(ctx, k, 100); err != nil || o != created {
		return c, fmt.Errorf("(c) first create: %s %v", o, err)
	}
	made++
	if c.otherInput, err = x.create(ctx, k, 999); err != nil {
		return c, err
	}
	if c.otherInput == created {
		made++
	}
	return c, waitCompleted(ctx, x, t, done+made, ran+made)
}
