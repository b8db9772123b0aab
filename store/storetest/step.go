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

// exerciseSteps checks store.StepStore by calling it directly: a claim is
// atomic and goes to one worker; only due steps of the worker's types are
// claimed; a repeatable step whose lease ended is claimed again with a
// higher epoch, a once-only one is not; every write under a claim is
// fenced by its epoch and owner.
func exerciseSteps[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	t0 := testclock.Epoch0
	lease := 10 * time.Second
	type both interface {
		store.ExecutionStore[TX]
		store.StepStore[TX]
	}
	setup := func(t *testing.T) both {
		t.Helper()
		s, _ := OpenAs[both](t, open, nil)
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			return s.CreateTaskTx(ctx, tx, store.NewTask{
				Task:        store.Task{App: "app-a", ID: "t1", Type: "export", Input: []byte(`{}`), CreatedAt: t0},
				ExecutionID: "e1", Status: store.ExecutionQueued, Event: store.Event{Type: "idem.execution.queued", Time: t0},
			})
		}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	add := func(t *testing.T, s both, st store.Step) {
		t.Helper()
		st.App, st.ExecutionID = "app-a", "e1"
		if st.Type == "" {
			st.Type = "export"
		}
		if st.Status == 0 {
			st.Status = store.StepDispatched
		}
		if st.CreatedAt.IsZero() {
			st.CreatedAt = t0
		}
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error { return s.AddStepTx(ctx, tx, st) }); err != nil {
			t.Fatal(err)
		}
	}
	// claimN claims up to limit steps in one transaction.
	claimN := func(t *testing.T, s both, owner string, now time.Time, limit int, types ...string) []store.Step {
		t.Helper()
		if len(types) == 0 {
			types = []string{"export"}
		}
		var got []store.Step
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			var err error
			got, err = s.ClaimStepsTx(ctx, tx, store.StepClaim{Types: types, Owner: owner, Now: now, Lease: lease, Limit: limit})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) > max(limit, 1) {
			t.Fatalf("a claim of %d took %d steps", limit, len(got))
		}
		return got
	}
	claim := func(t *testing.T, s both, owner string, now time.Time, types ...string) (store.Step, bool) {
		t.Helper()
		got := claimN(t, s, owner, now, 0, types...)
		if len(got) == 0 {
			return store.Step{}, false
		}
		return got[0], true
	}
	update := func(t *testing.T, s both, u store.StepUpdate) (store.Step, bool) {
		t.Helper()
		u.App = "app-a"
		var st store.Step
		var applied bool
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			var err error
			st, applied, err = s.UpdateStepTx(ctx, tx, u)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return st, applied
	}

	t.Run("CreateWritesMoreEventsAndTheFirstStep", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		step := store.Step{App: "app-a", ID: "s2", ExecutionID: "e2", Name: "export", Type: "export", Status: store.StepDispatched,
			DueAt: t0, IdempotencyKey: "e2:export", CreatedAt: t0}
		nt := store.NewTask{
			Task:        store.Task{App: "app-a", ID: "t2", Type: "export", Input: []byte(`{}`), CreatedAt: t0},
			ExecutionID: "e2", Status: store.ExecutionQueued,
			Event: store.Event{Type: "idem.execution.created", Data: []byte(`{"n":1}`), Time: t0},
			More:  []store.Event{{Type: "idem.execution.queued", Data: []byte(`{"n":2}`), Time: t0}},
			Step:  &step,
		}
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error { return s.CreateTaskTx(ctx, tx, nt) }); err != nil {
			t.Fatal(err)
		}
		e, err := s.GetExecution(ctx, "app-a", "e2")
		if err != nil || e.Status != store.ExecutionQueued || e.LastSequence != 2 {
			t.Fatalf("execution %+v %v, want QUEUED at sequence 2", e, err)
		}
		evs, err := s.ListEvents(ctx, "app-a", "e2", 0, 10)
		if err != nil || len(evs) != 2 || evs[0].Sequence != 1 || evs[0].Type != "idem.execution.created" ||
			evs[1].Sequence != 2 || evs[1].Type != "idem.execution.queued" || string(evs[1].Data) != `{"n":2}` {
			t.Fatalf("events %+v %v", evs, err)
		}
		if got, ok := claim(t, s, "w", t0); !ok || got.ID != "s2" || got.IdempotencyKey != "e2:export" {
			t.Fatalf("claimed %+v %v, want the step written with the task", got, ok)
		}
		// A step ID in use refuses the whole creation.
		again := nt
		again.Task.ID, again.ExecutionID = "t3", "e3"
		again.Step = &store.Step{App: "app-a", ID: "s2", ExecutionID: "e3", Name: "export", Type: "export", Status: store.StepDispatched, DueAt: t0, CreatedAt: t0}
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error { return s.CreateTaskTx(ctx, tx, again) }); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("a step ID in use: %v, want ErrDuplicate", err)
		}
		if _, err := s.GetTask(ctx, "app-a", "t3"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused task was written: %v", err)
		}
	})

	t.Run("ClaimGoesToOneWorker", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		add(t, s, store.Step{ID: "s1", Name: "export", IdempotencyKey: "export-t1"})
		const n = 16
		got := make([]bool, n)
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			errs[i] = s.InTx(ctx, func(ctx context.Context, tx TX) error {
				steps, err := s.ClaimStepsTx(ctx, tx, store.StepClaim{Types: []string{"export"}, Owner: fmt.Sprintf("w%d", i), Now: t0, Lease: lease})
				got[i] = len(steps) == 1
				return err
			})
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if n := len(slices.DeleteFunc(slices.Clone(got), func(b bool) bool { return !b })); n != 1 {
			t.Fatalf("%d claims granted, want 1", n)
		}
		st, err := s.GetStep(ctx, "app-a", "s1")
		if err != nil || st.Status != store.StepExecuting || st.Epoch != 1 || st.Attempts != 1 || st.Owner == "" ||
			!st.LeaseUntil.Equal(t0.Add(lease)) || st.IdempotencyKey != "export-t1" || st.Name != "export" {
			t.Fatalf("claimed step %+v %v", st, err)
		}
	})

	t.Run("ClaimsOnlyDueStepsOfItsTypes", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		add(t, s, store.Step{ID: "a-report", Type: "report"})
		add(t, s, store.Step{ID: "b-later", DueAt: t0.Add(time.Minute)})
		add(t, s, store.Step{ID: "c-pending", Status: store.StepPending})
		if st, ok := claim(t, s, "w1", t0); ok {
			t.Fatalf("claimed %+v: another type, not yet due, or pending", st)
		}
		if st, ok := claim(t, s, "w1", t0, "report", "export"); !ok || st.ID != "a-report" {
			t.Fatalf("claim by report: %+v %v", st, ok)
		}
		if st, ok := claim(t, s, "w1", t0.Add(time.Minute)); !ok || st.ID != "b-later" {
			t.Fatalf("claim once due: %+v %v", st, ok)
		}
		// Due first, then by ID.
		add(t, s, store.Step{ID: "z-early", DueAt: t0.Add(-time.Minute)})
		add(t, s, store.Step{ID: "y-late", DueAt: t0})
		add(t, s, store.Step{ID: "x-late", DueAt: t0})
		var order []string
		for {
			st, ok := claim(t, s, "w2", t0)
			if !ok {
				break
			}
			order = append(order, st.ID)
		}
		if !slices.Equal(order, []string{"z-early", "x-late", "y-late"}) {
			t.Fatalf("claim order %v", order)
		}
		// A step whose cancel was asked is never claimed again.
		add(t, s, store.Step{ID: "d-cancel"})
		if _, applied := update(t, s, store.StepUpdate{ID: "d-cancel", From: store.StepDispatched, Status: store.StepDispatched, CancelRequested: true}); !applied {
			t.Fatal("cancel request not applied")
		}
		if st, ok := claim(t, s, "w3", t0.Add(time.Second)); ok { // every other step is under a live lease
			t.Fatalf("claimed a step whose cancel was asked: %+v", st)
		}
	})

	t.Run("LeaseTakeoverFencesTheStaleWorker", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		add(t, s, store.Step{ID: "s1"})
		first, _ := claim(t, s, "w1", t0)
		if st, ok := claim(t, s, "w2", t0.Add(lease/2)); ok {
			t.Fatalf("claimed a step under a live lease: %+v", st)
		}
		second, ok := claim(t, s, "w2", t0.Add(lease+time.Second))
		if !ok || second.Epoch != 2 || second.Attempts != 2 || second.Owner != "w2" {
			t.Fatalf("takeover: %+v %v", second, ok)
		}
		// The stale worker's write changes nothing and sees the new epoch.
		st, applied := update(t, s, store.StepUpdate{ID: "s1", From: store.StepExecuting, Epoch: first.Epoch, Owner: "w1",
			Status: store.StepCompleted, Output: []byte(`"stale"`), ClearClaim: true})
		if applied || st.Epoch != 2 || st.Status != store.StepExecuting || st.Output != nil {
			t.Fatalf("stale complete: %+v applied %v", st, applied)
		}
		// The holder's write applies.
		st, applied = update(t, s, store.StepUpdate{ID: "s1", From: store.StepExecuting, Epoch: 2, Owner: "w2",
			Status: store.StepCompleted, Output: []byte(`{"url":"x"}`), ClearClaim: true})
		if !applied || st.Status != store.StepCompleted || string(st.Output) != `{"url":"x"}` || st.Owner != "" || !st.LeaseUntil.IsZero() || st.Epoch != 2 {
			t.Fatalf("complete: %+v applied %v", st, applied)
		}
		// Completed steps are never claimed again, and a repeat changes
		// nothing.
		if st, ok := claim(t, s, "w3", t0.Add(time.Hour)); ok {
			t.Fatalf("claimed a completed step: %+v", st)
		}
		if st, applied := update(t, s, store.StepUpdate{ID: "s1", From: store.StepExecuting, Epoch: 2, Owner: "w2", Status: store.StepFailed}); applied || st.Status != store.StepCompleted {
			t.Fatalf("fail after complete: %+v applied %v", st, applied)
		}
	})

	t.Run("OnceOnlyStepIsNotClaimedAgain", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		add(t, s, store.Step{ID: "s1", Once: true})
		add(t, s, store.Step{ID: "s2"})
		one, _ := claim(t, s, "w1", t0)
		two, _ := claim(t, s, "w1", t0.Add(time.Second))
		if one.ID != "s1" || two.ID != "s2" {
			t.Fatalf("claims %q %q", one.ID, two.ID)
		}
		late := t0.Add(time.Hour)
		if st, ok := claim(t, s, "w2", late); !ok || st.ID != "s2" {
			t.Fatalf("after both leases ended: %+v %v; want only the repeatable s2", st, ok)
		}
		expired, err := s.ExpiredSteps(ctx, late, 10)
		if err != nil || len(expired) != 1 || expired[0].ID != "s1" || !expired[0].Once {
			t.Fatalf("expired %+v %v", expired, err)
		}
		if st, applied := update(t, s, store.StepUpdate{ID: "s1", From: store.StepExecuting, Epoch: 1, Owner: "w1",
			Status: store.StepOutcomeUnknown, ClearClaim: true}); !applied || st.Status != store.StepOutcomeUnknown {
			t.Fatalf("to outcome unknown: %+v %v", st, applied)
		}
		if expired, err := s.ExpiredSteps(ctx, late.Add(lease+time.Second), 10); err != nil || len(expired) != 1 || expired[0].ID != "s2" {
			t.Fatalf("expired after settling s1: %+v %v", expired, err)
		}
	})

	t.Run("UpdatesApplyEachInOrder", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		add(t, s, store.Step{ID: "s1"})
		add(t, s, store.Step{ID: "s2"})
		got := claimN(t, s, "w1", t0, 2)
		if len(got) != 2 {
			t.Fatalf("claimed %v", stepIDs(got))
		}
		done := func(st store.Step, epoch int64) store.StepUpdate {
			return store.StepUpdate{App: "app-a", ID: st.ID, From: store.StepExecuting, Epoch: epoch, Owner: st.Owner,
				Status: store.StepCompleted, Output: []byte(`{"ok":true}`), ClearClaim: true}
		}
		var steps []store.Step
		var applied []bool
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			var err error
			steps, applied, err = s.UpdateStepsTx(ctx, tx, []store.StepUpdate{done(got[0], got[0].Epoch), done(got[1], got[1].Epoch+1)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(applied, []bool{true, false}) || steps[0].Status != store.StepCompleted || string(steps[0].Output) != `{"ok":true}` ||
			steps[1].Status != store.StepExecuting || steps[1].Epoch != got[1].Epoch {
			t.Fatalf("applied %v, steps %+v", applied, steps)
		}
	})

	t.Run("BatchClaimTakesTheOldestInOrder", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		for i, id := range []string{"e", "d", "c", "b", "a"} { // e is due first
			add(t, s, store.Step{ID: id, DueAt: t0.Add(time.Duration(i) * time.Second)})
		}
		add(t, s, store.Step{ID: "f-report", Type: "report"})
		add(t, s, store.Step{ID: "g-later", DueAt: t0.Add(time.Hour)})
		now := t0.Add(10 * time.Second)
		got := claimN(t, s, "w1", now, 3)
		if ids := stepIDs(got); !slices.Equal(ids, []string{"e", "d", "c"}) {
			t.Fatalf("a claim of 3 took %v, want [e d c]: the oldest due first, in that order", ids)
		}
		for _, st := range got {
			if st.Status != store.StepExecuting || st.Epoch != 1 || st.Owner != "w1" || !st.LeaseUntil.Equal(now.Add(lease)) {
				t.Fatalf("claimed %+v", st)
			}
		}
		if ids := stepIDs(claimN(t, s, "w2", now, 10)); !slices.Equal(ids, []string{"b", "a"}) {
			t.Fatalf("a claim of 10 took %v, want [b a]: only the due steps of its types left", ids)
		}
		if got := claimN(t, s, "w3", now, 10); len(got) != 0 {
			t.Fatalf("claimed %v from an empty queue", stepIDs(got))
		}
	})

	t.Run("ConcurrentBatchClaimsShareNothing", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		const steps, claimers = 24, 8
		for i := range steps {
			add(t, s, store.Step{ID: fmt.Sprintf("s%02d", i)})
		}
		got := make([][]store.Step, claimers)
		errs := make([]error, claimers)
		Concurrently(claimers, func(i int) {
			errs[i] = s.InTx(ctx, func(ctx context.Context, tx TX) error {
				var err error
				got[i], err = s.ClaimStepsTx(ctx, tx, store.StepClaim{Types: []string{"export"}, Owner: fmt.Sprintf("w%d", i), Now: t0, Lease: lease, Limit: 4})
				return err
			})
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for i, g := range got {
			for _, st := range g {
				if other, ok := seen[st.ID]; ok {
					t.Fatalf("step %s claimed by %s and w%d", st.ID, other, i)
				}
				seen[st.ID] = fmt.Sprintf("w%d", i)
			}
		}
		// What the claimers left is all still claimable: a step is claimed
		// once or waits for the next claim.
		rest := claimN(t, s, "late", t0, steps)
		if len(seen)+len(rest) != steps {
			t.Fatalf("%d claimed together and %d after, of %d steps", len(seen), len(rest), steps)
		}
	})

	t.Run("UpdatesRollBackWithTheTransaction", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		add(t, s, store.Step{ID: "s1"})
		_ = s.InTx(ctx, func(ctx context.Context, tx TX) error {
			if steps, err := s.ClaimStepsTx(ctx, tx, store.StepClaim{Types: []string{"export"}, Owner: "w1", Now: t0, Lease: lease}); err != nil || len(steps) != 1 {
				return fmt.Errorf("claim: %v %v", steps, err)
			}
			if st, err := s.GetStepTx(ctx, tx, "app-a", "s1"); err != nil || st.Status != store.StepExecuting || st.Owner != "w1" {
				t.Errorf("GetStepTx in the claiming transaction: %+v %v", st, err)
			}
			return errors.New("roll back")
		})
		if st, err := s.GetStep(ctx, "app-a", "s1"); err != nil || st.Status != store.StepDispatched || st.Epoch != 0 || st.Attempts != 0 {
			t.Fatalf("after a rolled-back claim: %+v %v", st, err)
		}
	})

	t.Run("StepsAreScopedAndListed", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		add(t, s, store.Step{ID: "s2", Name: "second", CreatedAt: t0.Add(time.Second)})
		add(t, s, store.Step{ID: "s1", Name: "first"})
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			return s.AddStepTx(ctx, tx, store.Step{App: "app-a", ID: "s1", ExecutionID: "e1", Type: "export", Status: store.StepDispatched, CreatedAt: t0})
		}); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("same step id: %v, want ErrDuplicate", err)
		}
		steps, err := s.ListSteps(ctx, "app-a", "e1")
		if err != nil || len(steps) != 2 || steps[0].ID != "s1" || steps[1].ID != "s2" || steps[0].Name != "first" {
			t.Fatalf("steps %+v %v", steps, err)
		}
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			steps, err := s.ListStepsTx(ctx, tx, "app-a", "e1")
			if err != nil || len(steps) != 2 || steps[0].ID != "s1" {
				return fmt.Errorf("ListStepsTx: %+v %v", steps, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetStep(ctx, "app-b", "s1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another application's step: %v, want ErrNotFound", err)
		}
		if _, err := s.ListSteps(ctx, "app-b", "e1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another application's steps: %v, want ErrNotFound", err)
		}
		if err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			_, _, err := s.UpdateStepTx(ctx, tx, store.StepUpdate{App: "app-b", ID: "s1", From: store.StepDispatched, Status: store.StepFailed})
			return err
		}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another application's update: %v, want ErrNotFound", err)
		}
	})
}

// stepIDs returns the steps' IDs in order.
func stepIDs(steps []store.Step) []string {
	ids := make([]string, len(steps))
	for i, st := range steps {
		ids[i] = st.ID
	}
	return ids
}
