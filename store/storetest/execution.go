package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseExecutions checks store.ExecutionStore by calling it directly:
// a task, its execution and its first event commit together with the
// caller's writes or not at all; transitions are conditional; sequences
// have no gap under concurrency; everything is scoped by application.
func exerciseExecutions[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	setup := func(t *testing.T) (store.ExecutionStore[TX], Ledger[TX]) {
		t.Helper()
		return OpenAs[store.ExecutionStore[TX]](t, open, nil)
	}
	t0 := testclock.Epoch0
	newTask := func(app, id string, at time.Time) store.NewTask {
		return store.NewTask{
			Task:        store.Task{App: app, ID: id, Type: "export", Input: []byte(`{"order":"o-1"}`), ExternalRef: "ref-" + id, CreatedAt: at},
			ExecutionID: id + "-e1", Status: store.ExecutionQueued,
			Event: store.Event{Type: "idem.execution.queued", Data: []byte(`{"status":"QUEUED"}`), Time: at},
		}
	}
	inTx := func(t *testing.T, s store.ExecutionStore[TX], fn func(ctx context.Context, tx TX) error) error {
		t.Helper()
		return s.InTx(ctx, fn)
	}
	create := func(t *testing.T, s store.ExecutionStore[TX], nt store.NewTask) {
		t.Helper()
		if err := inTx(t, s, func(ctx context.Context, tx TX) error { return s.CreateTaskTx(ctx, tx, nt) }); err != nil {
			t.Fatal(err)
		}
	}
	sequences := func(t *testing.T, s store.ExecutionStore[TX], app, id string) []int64 {
		t.Helper()
		evs, err := s.ListEvents(ctx, app, id, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, ev := range evs {
			seqs = append(seqs, ev.Sequence)
		}
		return seqs
	}
	upTo := func(n int64) []int64 {
		var out []int64
		for i := int64(1); i <= n; i++ {
			out = append(out, i)
		}
		return out
	}

	t.Run("CreateCommitsWithTheTransaction", func(t *testing.T) {
		t.Parallel()
		s, ledger := setup(t)
		nt := newTask("app-a", "t1", t0)
		err := inTx(t, s, func(ctx context.Context, tx TX) error {
			if err := ledger.Charge(ctx, tx, "t1"); err != nil {
				return err
			}
			if err := s.CreateTaskTx(ctx, tx, nt); err != nil {
				return err
			}
			return errors.New("business check failed")
		})
		if err == nil {
			t.Fatal("InTx succeeded")
		}
		if _, err := s.GetTask(ctx, "app-a", "t1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("task after rollback: %v", err)
		}
		if _, err := s.GetExecution(ctx, "app-a", "t1-e1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("execution after rollback: %v", err)
		}
		if _, err := s.ListEvents(ctx, "app-a", "t1-e1", 0, 10); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("events after rollback: %v", err)
		}
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			if err := ledger.Charge(ctx, tx, "t1"); err != nil {
				return err
			}
			if err := s.CreateTaskTx(ctx, tx, nt); err != nil {
				return err
			}
			// The transaction reads its own writes.
			if task, err := s.GetTaskTx(ctx, tx, "app-a", "t1"); err != nil || task.CurrentExecution != "t1-e1" {
				return fmt.Errorf("GetTaskTx in the creating transaction: %+v %v", task, err)
			}
			if e, err := s.GetExecutionTx(ctx, tx, "app-a", "t1-e1"); err != nil || e.Number != 1 {
				return fmt.Errorf("GetExecutionTx in the creating transaction: %+v %v", e, err)
			}
			if _, err := s.GetTaskTx(ctx, tx, "app-b", "t1"); !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("GetTaskTx of another application: %v, want ErrNotFound", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		task, err := s.GetTask(ctx, "app-a", "t1")
		if err != nil || task.Type != "export" || string(task.Input) != `{"order":"o-1"}` || task.ExternalRef != "ref-t1" ||
			task.CurrentExecution != "t1-e1" || task.Status != store.ExecutionQueued || !task.CreatedAt.Equal(t0) {
			t.Fatalf("task %+v, %v", task, err)
		}
		e, err := s.GetExecution(ctx, "app-a", "t1-e1")
		if err != nil || e.TaskID != "t1" || e.Number != 1 || e.Status != store.ExecutionQueued || e.LastSequence != 1 {
			t.Fatalf("execution %+v, %v", e, err)
		}
		evs, err := s.ListEvents(ctx, "app-a", "t1-e1", 0, 10)
		if err != nil || len(evs) != 1 || evs[0].Sequence != 1 || evs[0].Type != "idem.execution.queued" ||
			string(evs[0].Data) != `{"status":"QUEUED"}` || evs[0].ExecutionID != "t1-e1" || !evs[0].Time.Equal(t0) {
			t.Fatalf("events %+v, %v", evs, err)
		}
		if charges(t, ledger, "t1") != 1 {
			t.Fatalf("charges %d", charges(t, ledger, "t1"))
		}
	})

	t.Run("IDsAreUniquePerApplication", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		create(t, s, newTask("app-a", "t1", t0))
		again := newTask("app-a", "t1", t0)
		again.ExecutionID = "other"
		if err := inTx(t, s, func(ctx context.Context, tx TX) error { return s.CreateTaskTx(ctx, tx, again) }); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("same task id: %v, want ErrDuplicate", err)
		}
		sameExec := newTask("app-a", "t2", t0)
		sameExec.ExecutionID = "t1-e1"
		if err := inTx(t, s, func(ctx context.Context, tx TX) error { return s.CreateTaskTx(ctx, tx, sameExec) }); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("same execution id: %v, want ErrDuplicate", err)
		}
		if _, err := s.GetTask(ctx, "app-a", "t2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused task was written: %v", err)
		}
		// Another application has IDs of its own, and sees none of app-a's.
		create(t, s, newTask("app-b", "t1", t0))
		b, err := s.GetTask(ctx, "app-b", "t1")
		if err != nil || b.App != "app-b" {
			t.Fatalf("app-b's task: %+v %v", b, err)
		}
		if _, err := s.GetTask(ctx, "app-c", "t1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another application's task: %v, want ErrNotFound", err)
		}
		if _, err := s.GetExecution(ctx, "app-c", "t1-e1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another application's execution: %v, want ErrNotFound", err)
		}
		if _, err := s.ListEvents(ctx, "app-c", "t1-e1", 0, 10); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another application's events: %v, want ErrNotFound", err)
		}
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			_, _, err := s.TransitionTx(ctx, tx, store.Transition{App: "app-c", ID: "t1-e1", From: store.ExecutionQueued, To: store.ExecutionRunning})
			return err
		}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another application's transition: %v, want ErrNotFound", err)
		}
		if tasks, err := s.ListTasks(ctx, store.TaskQuery{App: "app-c", Limit: 10}); err != nil || len(tasks) != 0 {
			t.Fatalf("another application's list: %v %v", tasks, err)
		}
	})

	t.Run("TransitionsAreConditional", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		create(t, s, newTask("app-a", "t1", t0))
		move := func(from, to store.ExecutionStatus, tr store.Transition) (store.Execution, bool) {
			t.Helper()
			tr.App, tr.ID, tr.From, tr.To = "app-a", "t1-e1", from, to
			tr.Event = store.Event{Type: fmt.Sprintf("to-%d", to), Time: t0}
			var e store.Execution
			var applied bool
			if err := inTx(t, s, func(ctx context.Context, tx TX) error {
				var err error
				e, applied, err = s.TransitionTx(ctx, tx, tr)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return e, applied
		}
		// Decided on a status the execution is no longer in: nothing.
		if e, applied := move(store.ExecutionRunning, store.ExecutionSucceeded, store.Transition{}); applied || e.Status != store.ExecutionQueued || e.LastSequence != 1 {
			t.Fatalf("stale transition: %+v applied %v", e, applied)
		}
		started := t0.Add(time.Second)
		if e, applied := move(store.ExecutionQueued, store.ExecutionRunning, store.Transition{StartedAt: started}); !applied ||
			e.Status != store.ExecutionRunning || e.LastSequence != 2 || !e.StartedAt.Equal(started) {
			t.Fatalf("start: %+v applied %v", e, applied)
		}
		finished := t0.Add(time.Minute)
		e, applied := move(store.ExecutionRunning, store.ExecutionSucceeded, store.Transition{FinishedAt: finished, Output: []byte(`{"url":"x"}`), Progress: 100})
		if !applied || e.Status != store.ExecutionSucceeded || e.LastSequence != 3 || !e.FinishedAt.Equal(finished) ||
			string(e.Output) != `{"url":"x"}` || e.Progress != 100 || !e.StartedAt.Equal(started) {
			t.Fatalf("finish: %+v applied %v", e, applied)
		}
		if got, err := s.GetExecution(ctx, "app-a", "t1-e1"); err != nil || got.Status != store.ExecutionSucceeded || got.LastSequence != 3 {
			t.Fatalf("read back %+v %v", got, err)
		}
		if task, err := s.GetTask(ctx, "app-a", "t1"); err != nil || task.Status != store.ExecutionSucceeded {
			t.Fatalf("task status follows its execution: %+v %v", task, err)
		}
		if got := sequences(t, s, "app-a", "t1-e1"); !slices.Equal(got, upTo(3)) {
			t.Fatalf("sequences %v", got)
		}
		// A transition whose transaction rolls back leaves no event.
		_ = inTx(t, s, func(ctx context.Context, tx TX) error {
			if _, _, err := s.TransitionTx(ctx, tx, store.Transition{App: "app-a", ID: "t1-e1", From: store.ExecutionSucceeded,
				To: store.ExecutionFailed, Event: store.Event{Type: "x", Time: t0}}); err != nil {
				return err
			}
			return errors.New("roll back")
		})
		if got, err := s.GetExecution(ctx, "app-a", "t1-e1"); err != nil || got.Status != store.ExecutionSucceeded || got.LastSequence != 3 {
			t.Fatalf("after a rolled-back transition: %+v %v", got, err)
		}
		if got := sequences(t, s, "app-a", "t1-e1"); !slices.Equal(got, upTo(3)) {
			t.Fatalf("sequences after a rolled-back transition %v", got)
		}
	})

	t.Run("ConcurrentTransitionsApplyOnce", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		create(t, s, newTask("app-a", "t1", t0))
		const n = 16
		applied := make([]bool, n)
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			errs[i] = s.InTx(ctx, func(ctx context.Context, tx TX) error {
				_, ok, err := s.TransitionTx(ctx, tx, store.Transition{App: "app-a", ID: "t1-e1", From: store.ExecutionQueued,
					To: store.ExecutionRunning, Event: store.Event{Type: "idem.execution.running", Time: t0}})
				applied[i] = ok
				return err
			})
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if n := len(slices.DeleteFunc(slices.Clone(applied), func(b bool) bool { return !b })); n != 1 {
			t.Fatalf("%d transitions applied, want 1", n)
		}
		if got := sequences(t, s, "app-a", "t1-e1"); !slices.Equal(got, upTo(2)) {
			t.Fatalf("sequences %v, want [1 2]", got)
		}
	})

	t.Run("ConcurrentEventsHaveNoGap", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		create(t, s, newTask("app-a", "t1", t0))
		const n = 24
		seqs := make([]int64, n)
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			errs[i] = s.InTx(ctx, func(ctx context.Context, tx TX) error {
				var err error
				seqs[i], err = s.AppendEventTx(ctx, tx, "app-a", "t1-e1", store.Event{Type: "idem.execution.progress", Time: t0}, i)
				return err
			})
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		slices.Sort(seqs)
		if !slices.Equal(seqs, upTo(n + 1)[1:]) {
			t.Fatalf("sequences handed out %v, want 2..%d once each", seqs, n+1)
		}
		if got := sequences(t, s, "app-a", "t1-e1"); !slices.Equal(got, upTo(n+1)) {
			t.Fatalf("stored sequences %v", got)
		}
		if evs, err := s.ListEvents(ctx, "app-a", "t1-e1", 20, 3); err != nil || len(evs) != 3 || evs[0].Sequence != 21 || evs[2].Sequence != 23 {
			t.Fatalf("a page after 20: %+v %v", evs, err)
		}
	})

	t.Run("TransitionsApplyEachInOrder", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		for _, id := range []string{"t1", "t2", "t3"} {
			create(t, s, newTask("app-a", id, t0))
		}
		start := func(id string, from store.ExecutionStatus) store.Transition {
			return store.Transition{App: "app-a", ID: id, From: from, To: store.ExecutionRunning, StartedAt: t0.Add(time.Second),
				Event: store.Event{Type: "idem.execution.running", Data: []byte(`{}`), Time: t0.Add(time.Second)}}
		}
		var execs []store.Execution
		var applied []bool
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			var err error
			execs, applied, err = s.TransitionsTx(ctx, tx, []store.Transition{
				start("t1-e1", store.ExecutionQueued), start("t2-e1", store.ExecutionCreated), start("t3-e1", store.ExecutionQueued)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(applied, []bool{true, false, true}) {
			t.Fatalf("applied %v, want [true false true]", applied)
		}
		for i, want := range []store.ExecutionStatus{store.ExecutionRunning, store.ExecutionQueued, store.ExecutionRunning} {
			if execs[i].Status != want {
				t.Fatalf("execution %d answered %v, want %v", i, execs[i].Status, want)
			}
		}
		for id, want := range map[string][]int64{"t1-e1": {1, 2}, "t2-e1": {1}, "t3-e1": {1, 2}} {
			if got := sequences(t, s, "app-a", id); !slices.Equal(got, want) {
				t.Fatalf("%s: events %v, want %v", id, got, want)
			}
		}
		err := inTx(t, s, func(ctx context.Context, tx TX) error {
			_, _, err := s.TransitionsTx(ctx, tx, []store.Transition{start("nope", store.ExecutionQueued)})
			return err
		})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown execution: %v, want ErrNotFound", err)
		}
	})

	t.Run("GetExecutionsReadsManyInOrder", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		for _, k := range []struct{ app, id string }{{"app-a", "t1"}, {"app-a", "t2"}, {"app-b", "t1"}} {
			create(t, s, newTask(k.app, k.id, t0))
		}
		refs := []store.ExecutionRef{{App: "app-b", ID: "t1-e1"}, {App: "app-a", ID: "t2-e1"}, {App: "app-a", ID: "t1-e1"}}
		var execs []store.Execution
		var tasks []store.Task
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			var err error
			execs, tasks, err = s.GetExecutionsTx(ctx, tx, refs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(execs) != 3 || len(tasks) != 3 {
			t.Fatalf("read %d executions and %d tasks, want 3 each", len(execs), len(tasks))
		}
		for i, r := range refs {
			e, task := execs[i], tasks[i]
			if e.App != r.App || e.ID != r.ID || e.Status != store.ExecutionQueued || e.Number != 1 ||
				task.App != r.App || task.ID != e.TaskID || task.CurrentExecution != r.ID || task.ExternalRef != "ref-"+task.ID {
				t.Fatalf("ref %d %+v: execution %+v, task %+v", i, r, e, task)
			}
		}
		for _, bad := range [][]store.ExecutionRef{{{App: "app-a", ID: "t1-e1"}, {App: "app-b", ID: "t2-e1"}}, {{App: "app-c", ID: "t1-e1"}}} {
			err := inTx(t, s, func(ctx context.Context, tx TX) error {
				_, _, err := s.GetExecutionsTx(ctx, tx, bad)
				return err
			})
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%+v: %v, want ErrNotFound", bad, err)
			}
		}
	})

	t.Run("RerunMovesTheTask", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		create(t, s, newTask("app-a", "t1", t0))
		var e2 store.Execution
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			var err error
			e2, err = s.RerunTx(ctx, tx, store.Rerun{App: "app-a", TaskID: "t1", ExecutionID: "t1-e2", Status: store.ExecutionQueued,
				Workflow: "checkout", Version: 3, Event: store.Event{Type: "idem.execution.queued", Time: t0.Add(time.Hour)}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if e2.Number != 2 || e2.TaskID != "t1" || e2.LastSequence != 1 || e2.Status != store.ExecutionQueued || e2.Workflow != "checkout" || e2.Version != 3 {
			t.Fatalf("rerun %+v", e2)
		}
		if got, err := s.GetExecution(ctx, "app-a", "t1-e2"); err != nil || got.Workflow != "checkout" || got.Version != 3 || got.Number != 2 {
			t.Fatalf("rerun read back: %+v %v", got, err)
		}
		task, err := s.GetTask(ctx, "app-a", "t1")
		if err != nil || task.CurrentExecution != "t1-e2" {
			t.Fatalf("task %+v %v", task, err)
		}
		// The old execution keeps its history; its late changes no longer
		// set the task's status.
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			_, _, err := s.TransitionTx(ctx, tx, store.Transition{App: "app-a", ID: "t1-e1", From: store.ExecutionQueued,
				To: store.ExecutionCanceled, Event: store.Event{Type: "idem.execution.canceled", Time: t0}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if task, err := s.GetTask(ctx, "app-a", "t1"); err != nil || task.Status != store.ExecutionQueued {
			t.Fatalf("task status after the old run moved: %+v %v", task, err)
		}
		if got := sequences(t, s, "app-a", "t1-e1"); !slices.Equal(got, upTo(2)) {
			t.Fatalf("old execution's sequences %v", got)
		}
		if got := sequences(t, s, "app-a", "t1-e2"); !slices.Equal(got, upTo(1)) {
			t.Fatalf("new execution's sequences %v", got)
		}
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			_, err := s.RerunTx(ctx, tx, store.Rerun{App: "app-a", TaskID: "nope", ExecutionID: "x", Status: store.ExecutionQueued, Event: store.Event{Time: t0}})
			return err
		}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("rerun of an unknown task: %v", err)
		}
	})

	t.Run("ListTasksPages", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		var want []string // newest first
		for i := range 7 {
			id := fmt.Sprintf("t%d", i)
			nt := newTask("app-a", id, t0.Add(time.Duration(i/2)*time.Second)) // pairs share a time: the ID breaks the tie
			if i%3 == 0 {
				nt.Task.Type = "report"
			}
			create(t, s, nt)
			want = append([]string{id}, want...)
		}
		create(t, s, newTask("app-b", "t9", t0))
		var got []string
		q := store.TaskQuery{App: "app-a", Limit: 3}
		for range 10 {
			page, err := s.ListTasks(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range page {
				got = append(got, task.ID)
			}
			if len(page) < q.Limit {
				break
			}
			last := page[len(page)-1]
			q.AfterTime, q.AfterID = last.CreatedAt, last.ID
		}
		if !slices.Equal(got, want) {
			t.Fatalf("pages %v, want %v", got, want)
		}
		reports, err := s.ListTasks(ctx, store.TaskQuery{App: "app-a", Type: "report", Limit: 10})
		if err != nil || len(reports) != 3 {
			t.Fatalf("by type: %+v %v", reports, err)
		}
		if running, err := s.ListTasks(ctx, store.TaskQuery{App: "app-a", Status: store.ExecutionRunning, Limit: 10}); err != nil || len(running) != 0 {
			t.Fatalf("by status: %+v %v", running, err)
		}
		if others, err := s.ListTasks(ctx, store.TaskQuery{App: "app-a", ExcludeType: "report", Limit: 10}); err != nil || len(others) != 4 ||
			slices.ContainsFunc(others, func(t store.Task) bool { return t.Type == "report" }) {
			t.Fatalf("without one type: %+v %v", others, err)
		}
	})

	t.Run("WorkflowExecutionsAndReopen", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		nt := newTask("app-a", "w1", t0)
		nt.Workflow, nt.Version = "checkout", 2
		create(t, s, nt)
		e, err := s.GetExecution(ctx, "app-a", nt.ExecutionID)
		if err != nil || e.Workflow != "checkout" || e.Version != 2 {
			t.Fatalf("workflow execution %+v %v", e, err)
		}
		move := func(tr store.Transition) store.Execution {
			t.Helper()
			tr.App, tr.ID, tr.Event = "app-a", nt.ExecutionID, store.Event{Type: "idem.execution.x", Time: t0}
			var got store.Execution
			if err := inTx(t, s, func(ctx context.Context, tx TX) error {
				var applied bool
				var err error
				if got, applied, err = s.TransitionTx(ctx, tx, tr); err == nil && !applied {
					err = fmt.Errorf("%+v did not apply", tr)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return got
		}
		failed := move(store.Transition{From: nt.Status, To: store.ExecutionFailed, FinishedAt: t0.Add(time.Second), Error: "boom", Output: []byte(`{"x":1}`)})
		if failed.FinishedAt.IsZero() || failed.Error != "boom" || failed.Workflow != "checkout" || failed.Version != 2 {
			t.Fatalf("failed %+v", failed)
		}
		// An operator's retry reopens it: no finish, output or error.
		reopened := move(store.Transition{From: store.ExecutionFailed, To: store.ExecutionQueued, Reopen: true})
		if !reopened.FinishedAt.IsZero() || reopened.Error != "" || reopened.Output != nil || reopened.Status != store.ExecutionQueued {
			t.Fatalf("reopened %+v", reopened)
		}
		if got, err := s.GetExecution(ctx, "app-a", nt.ExecutionID); err != nil || !got.FinishedAt.IsZero() || got.Error != "" || got.Output != nil || got.Version != 2 {
			t.Fatalf("reopened, read back: %+v %v", got, err)
		}
	})

	t.Run("OverdueExecutions", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		for i, d := range []time.Duration{2 * time.Minute, time.Minute, 0, 30 * time.Second} {
			nt := newTask("app-a", fmt.Sprintf("t%d", i), t0)
			if d > 0 {
				nt.Task.Deadline = t0.Add(d)
			}
			create(t, s, nt)
		}
		// t3 finished before its deadline: not overdue.
		if err := inTx(t, s, func(ctx context.Context, tx TX) error {
			_, _, err := s.TransitionTx(ctx, tx, store.Transition{App: "app-a", ID: "t3-e1", From: store.ExecutionQueued,
				To: store.ExecutionSucceeded, Event: store.Event{Type: "x", Time: t0}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		ids := func(now time.Time, limit int) []string {
			t.Helper()
			es, err := s.OverdueExecutions(ctx, now, limit)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range es {
				if e.App != "app-a" || e.Status != store.ExecutionQueued {
					t.Fatalf("overdue %+v", e)
				}
				out = append(out, e.ID)
			}
			return out
		}
		if got := ids(t0.Add(time.Minute), 10); len(got) != 0 {
			t.Fatalf("at the first deadline: %v, want none (strictly before)", got)
		}
		if got := ids(t0.Add(90*time.Second), 10); !slices.Equal(got, []string{"t1-e1"}) {
			t.Fatalf("at 90 s: %v", got)
		}
		if got := ids(t0.Add(time.Hour), 10); !slices.Equal(got, []string{"t1-e1", "t0-e1"}) {
			t.Fatalf("an hour on: %v, want earliest deadline first", got)
		}
		if got := ids(t0.Add(time.Hour), 1); !slices.Equal(got, []string{"t1-e1"}) {
			t.Fatalf("limit 1: %v", got)
		}
	})
}
