package execution_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// stepUpdates is a memstore that records the step updates that extend a
// lease (EXECUTING to EXECUTING), one slice per store call.
type stepUpdates struct {
	*memstore.Executions
	mu    sync.Mutex
	calls [][]store.StepUpdate
}

func (s *stepUpdates) record(us []store.StepUpdate) {
	for _, u := range us {
		if u.From != store.StepExecuting || u.Status != store.StepExecuting {
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, us)
}

func (s *stepUpdates) UpdateStepTx(ctx context.Context, tx *memstore.Tx, u store.StepUpdate) (store.Step, bool, error) {
	s.record([]store.StepUpdate{u})
	return s.Executions.UpdateStepTx(ctx, tx, u)
}

func (s *stepUpdates) UpdateStepsTx(ctx context.Context, tx *memstore.Tx, us []store.StepUpdate) ([]store.Step, []bool, error) {
	s.record(us)
	return s.Executions.UpdateStepsTx(ctx, tx, us)
}

// TestWorkerHeartbeatsInOneTransaction: Run extends the leases of all the
// steps it runs together, in one store call per tick, not one transaction
// per step; and a step whose claim was taken over meanwhile has its
// handler's context cancelled with ErrFenced, while the others go on.
func TestWorkerHeartbeatsInOneTransaction(t *testing.T) {
	s := &stepUpdates{Executions: memstore.NewExecutions(memstore.NewInbox())}
	clock := testclock.New(testclock.Epoch0)
	en, err := execution.New[*memstore.Tx](s, &execution.Config{
		Types: map[string]execution.TypeConfig{"export": {Lease: 10 * time.Second}},
		Now:   clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 4
	for range n {
		if err := s.InTx(ctx, func(ctx context.Context, tx *memstore.Tx) error {
			_, _, err := en.CreateTx(ctx, tx, "app", execution.NewTask{Type: "export", Input: json.RawMessage(`{}`)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		started = make(chan execution.Job, n)
		release = make(chan struct{})
		causes  = make(chan error, n)
	)
	w, err := en.NewWorker(map[string]execution.Handler[*memstore.Tx]{
		"export": func(ctx context.Context, job execution.Job) (execution.Result[*memstore.Tx], error) {
			started <- job
			select {
			case <-release:
				return execution.Result[*memstore.Tx]{Output: json.RawMessage(`{}`)}, nil
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return execution.Result[*memstore.Tx]{}, context.Cause(ctx)
			}
		},
	}, &execution.WorkerConfig{Concurrency: n, Heartbeat: 5 * time.Millisecond, Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	var jobs []execution.Job
	for range n {
		jobs = append(jobs, <-started)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Heartbeats, once all four run: every call extends all four. The
	// heartbeat runs one call at a time, so only the call in flight now
	// may have read the running steps before the fourth started: skip it.
	s.mu.Lock()
	first := len(s.calls) + 1
	s.mu.Unlock()
	waitFor("three heartbeats", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.calls) >= first+3 })
	s.mu.Lock()
	for i, c := range s.calls[first:] {
		if len(c) != n {
			s.mu.Unlock()
			t.Fatalf("heartbeat %d extended %d steps in one call, want all %d", i, len(c), n)
		}
	}
	s.mu.Unlock()

	// One step's claim is taken over: its lease ended on the engine's
	// clock, and another worker claims it at the next epoch.
	lost := jobs[0].Step
	if err := s.InTx(ctx, func(ctx context.Context, tx *memstore.Tx) error {
		_, applied, err := s.Executions.UpdateStepTx(ctx, tx, store.StepUpdate{App: lost.App, ID: lost.ID, From: store.StepExecuting,
			Epoch: lost.Epoch, Owner: lost.Owner, Status: store.StepExecuting, LeaseUntil: clock.Now().Add(-time.Second)})
		if err == nil && !applied {
			err = errors.New("not applied")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.InTx(ctx, func(ctx context.Context, tx *memstore.Tx) error {
		c, ok, err := en.ClaimTx(ctx, tx, []string{"export"}, "other", 0)
		if err == nil && (!ok || c.Step.ID != lost.ID) {
			err = errors.New("the takeover claimed nothing")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, execution.ErrFenced) {
			t.Fatalf("the lost step's handler ended with %v, want ErrFenced", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lost step's handler was not cancelled")
	}
	// The other three are still extended, together.
	s.mu.Lock()
	from := len(s.calls)
	s.mu.Unlock()
	waitFor("a heartbeat after the loss", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.calls) > from+1 && len(s.calls[len(s.calls)-1]) == n-1
	})
	close(release)
	stop()
	<-ran
	if len(causes) != 0 {
		t.Fatalf("another handler was cancelled: %v", <-causes)
	}
}
