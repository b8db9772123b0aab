package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// A claim walks its indexes and stops at the first row it can lock, on a
// young table whose statistics still say it is empty (as every new
// deployment's is, and as the engine's benchmark found): with 1,000 steps
// claimed and completed and 1,000 waiting, in the custom and the generic
// plan alike (ClaimStepsTx runs the generic one), it walks its indexes,
// updates the rows by their ctid and reads a few dozen buffers per step
// it claims. A claim that joined its candidates to the table let the
// planner rescan them per row (9,000 buffers here for one step, and a
// claim's cost growing with every step run), and its generic plan hashed
// the whole table.
func TestClaimStepPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	now := b.clock.Now()
	eachInTx(t, s, 2000, func(ctx context.Context, tx pgx.Tx, i int) error {
		return s.AddStepTx(ctx, tx, store.Step{App: "app", ID: fmt.Sprintf("s%05d", i), ExecutionID: fmt.Sprintf("e%05d", i),
			Name: "export", Type: "export", Status: store.StepDispatched, DueAt: now.Add(time.Duration(i) * time.Millisecond),
			IdempotencyKey: fmt.Sprintf("k%d", i), CreatedAt: now})
	})
	b.clock.Advance(time.Hour)
	now = b.clock.Now()
	eachInTx(t, s, 1000, func(ctx context.Context, tx pgx.Tx, i int) error {
		steps, err := s.ClaimStepsTx(ctx, tx, store.StepClaim{Types: []string{"export"}, Owner: "w", Now: now, Lease: time.Minute})
		if err != nil || len(steps) != 1 {
			return fmt.Errorf("claim %d: %v %w", i, steps, err)
		}
		st := steps[0]
		if want := fmt.Sprintf("s%05d", i); st.ID != want {
			return fmt.Errorf("claimed %s, want %s (the oldest)", st.ID, want)
		}
		_, applied, err := s.UpdateStepTx(ctx, tx, store.StepUpdate{App: st.App, ID: st.ID, From: store.StepExecuting, Epoch: st.Epoch,
			Owner: st.Owner, Status: store.StepCompleted, ClearClaim: true, Output: []byte(`{}`)})
		if err == nil && !applied {
			err = errors.New("completion not applied")
		}
		return err
	})
	args := []any{"'{export}'::text[]", now, "'w2'", now.Add(time.Minute), 8}
	for _, analyzed := range []bool{false, true} {
		if analyzed { // and again with the statistics up to date
			if _, err := b.pool.Exec(ctx, "ANALYZE idem_steps"); err != nil {
				t.Fatal(err)
			}
		}
		for _, generic := range []bool{false, true} {
			checkClaimPlan(t, explain(t, b.pool, generic, readSQL(t, "step_claim.sql"), args...), fmt.Sprintf("analyzed %v, generic %v", analyzed, generic))
			// And the read of the claimed steps' executions that follows it.
			plan := explain(t, b.pool, generic, readSQL(t, "claimed_executions_get.sql"), now.Add(time.Minute), "'w2'")
			for _, bad := range []string{"Seq Scan", "Hash"} {
				if strings.Contains(plan, bad) {
					t.Errorf("analyzed %v, generic %v: the claim's read: %s in the plan:\n%s", analyzed, generic, bad, plan)
				}
			}
		}
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		var hit float64
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var out []struct {
				Plan struct {
					Hit  float64 `json:"Shared Hit Blocks"`
					Read float64 `json:"Shared Read Blocks"`
				}
			}
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "PREPARE claim AS "+readSQL(t, "step_claim.sql")); err != nil {
				return err
			}
			defer func() { _, _ = tx.Exec(ctx, "DEALLOCATE claim") }()
			if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE "+execute("claim", args)).Scan(&out); err != nil {
				return err
			}
			hit = out[0].Plan.Hit + out[0].Plan.Read
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		if hit == 0 || hit > 8*25 {
			t.Errorf("%s: a claim of 8 read %v buffers, want a few dozen per step it claims", mode, hit)
		}
		t.Logf("%s: a claim of 8 among 2,000 steps read %v buffers", mode, hit)
	}
}

// checkClaimPlan checks a plan of step_claim.sql: the dispatched walk must
// be an index scan in order (a bitmap scan would sort the whole backlog
// per claim); the expired one may be either, as the planner weighs the
// few rows it finds; the update reaches the rows by their ctid; nothing
// scans the table.
func checkClaimPlan(t *testing.T, plan, what string) {
	t.Helper()
	if strings.Contains(plan, "Seq Scan") {
		t.Errorf("%s: a scan of the table:\n%s", what, plan)
	}
	for _, w := range []string{"Index Scan using idem_steps_dispatched", "idem_steps_executing", "Tid Scan on idem_steps s"} {
		if !strings.Contains(plan, w) {
			t.Errorf("%s: no %q in the plan:\n%s", what, w, plan)
		}
	}
}

// A transition (the execution, its event and its task's status in one
// statement) reads each row by its key, on a young table as on any: in the
// custom and the generic plan alike, no scan of a table.
func TestTransitionPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	now := b.clock.Now()
	eachInTx(t, s, 2000, func(ctx context.Context, tx pgx.Tx, i int) error {
		return s.CreateTaskTx(ctx, tx, store.NewTask{
			Task:        store.Task{App: "app", ID: fmt.Sprintf("t%05d", i), Type: "export", Input: []byte(`{}`), CreatedAt: now},
			ExecutionID: fmt.Sprintf("e%05d", i), Status: store.ExecutionCreated,
			Event: store.Event{Type: "idem.execution.created", Data: []byte(`{}`), Time: now},
		})
	})
	args := []any{"'app'", "'e00042'", 1, 2, "NULL::timestamptz", "NULL::timestamptz", "NULL::bytea", "''", 0,
		"'idem.execution.queued'", `'\x7b7d'::bytea`, now, false}
	for _, generic := range []bool{false, true} {
		plan := explain(t, b.pool, generic, readSQL(t, "execution_transition.sql"), args...)
		if strings.Contains(plan, "Seq Scan") || strings.Contains(plan, "Hash") {
			t.Errorf("generic %v: a scan of a table:\n%s", generic, plan)
		}
		for _, w := range []string{"idem_executions_pkey", "idem_tasks_pkey"} {
			if !strings.Contains(plan, w) {
				t.Errorf("generic %v: no %q in the plan:\n%s", generic, w, plan)
			}
		}
	}
	e, applied, err := transition(ctx, s, "e00042")
	if err != nil || !applied || e.Status != store.ExecutionQueued || e.LastSequence != 2 {
		t.Fatalf("transition: %+v %v %v", e, applied, err)
	}
	task, err := s.GetTask(ctx, "app", "t00042")
	if err != nil || task.Status != store.ExecutionQueued {
		t.Fatalf("the task follows its execution: %+v %v", task, err)
	}
}

// transition moves execution id from CREATED to QUEUED.
func transition(ctx context.Context, s *pgstore.Store, id string) (store.Execution, bool, error) {
	var e store.Execution
	var applied bool
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		e, applied, err = s.TransitionTx(ctx, tx, store.Transition{App: "app", ID: id, From: store.ExecutionCreated, To: store.ExecutionQueued,
			Event: store.Event{Type: "idem.execution.queued", Data: []byte(`{}`), Time: time.Now()}})
		return err
	})
	return e, applied, err
}

// TestGetExecutionsPlan: the read of a claim's executions and their tasks
// reaches each row through its primary key among 2,000, in every plan,
// before the tables are analyzed and after: never a scan or a hash of a
// whole table.
func TestGetExecutionsPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, b := setup(t)
	now := b.clock.Now()
	eachInTx(t, s, 20, func(ctx context.Context, tx pgx.Tx, i int) error {
		for j := range 100 {
			id := fmt.Sprintf("x%04d", 100*i+j)
			err := s.CreateTaskTx(ctx, tx, store.NewTask{
				Task:        store.Task{App: "app", ID: id, Type: "export", Input: []byte(`{}`), CreatedAt: now},
				ExecutionID: id, Status: store.ExecutionQueued,
				Event: store.Event{Type: "idem.execution.created", Data: []byte(`{}`), Time: now},
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	args := []any{"'{app,app,app}'::text[]", "'{x0007,x1000,x1999}'::text[]"}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := b.pool.Exec(ctx, "ANALYZE idem_executions; ANALYZE idem_tasks"); err != nil {
				t.Fatal(err)
			}
		}
		for _, generic := range []bool{false, true} {
			plan := explain(t, b.pool, generic, readSQL(t, "executions_get.sql"), args...)
			for _, bad := range []string{"Seq Scan", "Hash", "Bitmap"} {
				if strings.Contains(plan, bad) {
					t.Errorf("analyzed %v, generic %v: %s in the plan:\n%s", analyzed, generic, bad, plan)
				}
			}
		}
	}
}

// TestClaimStepsRead: ClaimStepsReadTx claims as ClaimStepsTx does and
// answers each step's execution and task as GetExecutionsTx does, across
// applications, in the claim's round trip; steps the same owner token
// took earlier in the transaction are not mixed in.
func TestClaimStepsRead(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	now := b.clock.Now()
	for i, app := range []string{"app-a", "app-b", "app-a", "app-b", "app-a"} {
		id := fmt.Sprintf("r%d", i)
		inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
			return s.CreateTaskTx(ctx, tx, store.NewTask{
				Task:        store.Task{App: app, ID: id, Type: "export", Input: []byte(`{}`), ExternalRef: "ref-" + id, CreatedAt: now},
				ExecutionID: id + "-e", Status: store.ExecutionQueued,
				Event: store.Event{Type: "idem.execution.created", Data: []byte(`{}`), Time: now},
				Step: &store.Step{App: app, ID: id + "-s", ExecutionID: id + "-e", Name: "export", Type: "export", Status: store.StepDispatched,
					DueAt: now.Add(time.Duration(i) * time.Second), CreatedAt: now},
			})
		})
	}
	b.clock.Advance(time.Minute)
	claim := store.StepClaim{Types: []string{"export"}, Owner: "w", Now: b.clock.Now(), Lease: time.Minute, Limit: 2}
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		first, err := s.ClaimStepsTx(ctx, tx, claim) // r0, r1, under the same owner
		if err != nil || len(first) != 2 {
			t.Fatalf("first claim: %v, %v", first, err)
		}
		claim.Limit = 3
		steps, execs, tasks, err := s.ClaimStepsReadTx(ctx, tx, claim)
		if err != nil || len(steps) != 3 || len(execs) != 3 || len(tasks) != 3 {
			t.Fatalf("ClaimStepsReadTx: %d steps, %d executions, %d tasks, %v; want 3 each", len(steps), len(execs), len(tasks), err)
		}
		refs := make([]store.ExecutionRef, len(steps))
		for i, st := range steps {
			if want := fmt.Sprintf("r%d-s", i+2); st.ID != want || st.Status != store.StepExecuting || st.Owner != "w" {
				t.Fatalf("step %d: %+v, want %s claimed by w", i, st, want)
			}
			refs[i] = store.ExecutionRef{App: st.App, ID: st.ExecutionID}
		}
		wantExecs, wantTasks, err := s.GetExecutionsTx(ctx, tx, refs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range steps {
			if !reflect.DeepEqual(execs[i], wantExecs[i]) || !reflect.DeepEqual(tasks[i], wantTasks[i]) {
				t.Fatalf("step %d: read %+v %+v, want %+v %+v", i, execs[i], tasks[i], wantExecs[i], wantTasks[i])
			}
		}
		return nil
	})
}

// SettleStepsTx applies a transition only once its step's update did: a
// settle whose step was taken over neither moves the step's execution nor
// locks it, so it never waits for, or holds up, the transactions of the
// step's new owner.
func TestSettleStepsTxRefusedLocksNothing(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := context.Background()
	now := b.clock.Now()
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		return s.CreateTaskTx(ctx, tx, store.NewTask{
			Task:        store.Task{App: "app", ID: "t", Type: "export", Input: []byte(`{}`), CreatedAt: now},
			ExecutionID: "e", Status: store.ExecutionRunning,
			Event: store.Event{Type: "idem.execution.running", Data: []byte(`{}`), Time: now},
			Step: &store.Step{App: "app", ID: "s", ExecutionID: "e", Name: "export", Type: "export", Status: store.StepDispatched,
				DueAt: now, CreatedAt: now},
		})
	})
	var st store.Step
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		steps, err := s.ClaimStepsTx(ctx, tx, store.StepClaim{Types: []string{"export"}, Owner: "w", Now: now, Lease: time.Minute, Limit: 1})
		if err == nil && len(steps) != 1 {
			err = fmt.Errorf("claimed %v", steps)
		}
		if err == nil {
			st = steps[0]
		}
		return err
	})
	settle := func(ctx context.Context, tx pgx.Tx, epoch int64) ([]bool, []store.Execution, []bool, error) {
		us := []store.StepUpdate{{App: "app", ID: "s", From: store.StepExecuting, Epoch: epoch, Owner: st.Owner,
			Status: store.StepCompleted, Output: []byte(`{}`), ClearClaim: true}}
		ts := []store.Transition{{App: "app", ID: "e", From: store.ExecutionRunning, To: store.ExecutionSucceeded, FinishedAt: now,
			Event: store.Event{Type: "idem.execution.succeeded", Data: []byte(`{}`), Time: now}}}
		_, applied, execs, moved, err := s.SettleStepsTx(ctx, tx, us, ts, []int{0})
		return applied, execs, moved, err
	}

	// A stale claim's settle, its transaction left open.
	tx, err := s.BeginTx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.RollbackTx(ctx, tx) }()
	applied, execs, moved, err := settle(ctx, tx, st.Epoch+1)
	if err != nil || applied[0] || moved[0] || execs[0].Status != store.ExecutionRunning {
		t.Fatalf("stale settle: applied %v, moved %v, %+v, %v", applied, moved, execs, err)
	}
	// The execution's row is free: another transaction writes it at once.
	if err := pgx.BeginFunc(ctx, b.pool, func(other pgx.Tx) error {
		if _, err := other.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
			return err
		}
		_, err := other.Exec(ctx, "UPDATE idem_executions SET progress = progress WHERE app = 'app' AND id = 'e'")
		return err
	}); err != nil {
		t.Fatalf("the stale settle holds the execution's row: %v", err)
	}
	if err := s.RollbackTx(ctx, tx); err != nil {
		t.Fatal(err)
	}

	// The claim's own settle moves it.
	inTx(t, s, func(ctx context.Context, tx pgx.Tx) error {
		applied, execs, moved, err := settle(ctx, tx, st.Epoch)
		if err == nil && (!applied[0] || !moved[0] || execs[0].Status != store.ExecutionSucceeded) {
			err = fmt.Errorf("settle: applied %v, moved %v, %+v", applied, moved, execs)
		}
		return err
	})
}

// eachInTx runs fn n times, each in a transaction of its own.
func eachInTx(t *testing.T, s *pgstore.Store, n int, fn func(ctx context.Context, tx pgx.Tx, i int) error) {
	t.Helper()
	for i := range n {
		if err := s.InTx(context.Background(), func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx, i) }); err != nil {
			t.Fatal(err)
		}
	}
}

// NotifySteps wakes the StepWakeups of every store on the schema, and only
// of that schema; the listener hands its connection back when ctx ends.
func TestStepWakeups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := setup(t)
	pool := singleConnPool(t, b.pool)
	s := newStore(t, pool, nil)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake, err := s.StepWakeups(wctx)
	if err != nil {
		t.Fatal(err)
	}
	other := newStore(t, b.pool, nil) // another process's store on the schema
	noWakeup(t, wake, "before any notification")
	if err := other.NotifySteps(ctx); err != nil {
		t.Fatal(err)
	}
	wakeup(t, wake, "after NotifySteps")
	_, elsewhere := setup(t)
	if err := newStore(t, elsewhere.pool, nil).NotifySteps(ctx); err != nil {
		t.Fatal(err)
	}
	noWakeup(t, wake, "after a notification in another schema")
	cancel()
	closed(t, wake)
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the channel closed", n)
	}
}
