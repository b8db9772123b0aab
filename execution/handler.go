package execution

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// Job is what an in-process handler gets: its step (with the downstream
// key every attempt sends), its task and its execution.
type Job struct {
	Step      store.Step
	Task      store.Task
	Execution store.Execution
}

// Result is what an in-process handler returns: the step's output, and
// the business writes to commit with its completion.
type Result[TX any] struct {
	// Output is the step's output (JSON, or empty).
	Output json.RawMessage
	// Writes, when set, runs in the transaction that completes the step:
	// its writes commit if and only if the completion does, so a local
	// effect happens exactly once, even when the claim was lost meanwhile
	// (the fenced completion rolls them back).
	Writes func(ctx context.Context, tx TX) error
}

// Handler runs one step in process. Its context is cancelled, with
// ErrFenced as its cause, when the claim is lost (its lease ended and the
// step was claimed again): stop then, the work belongs to another. Return
// an error wrapped by Permanent for a failure no retry can fix; any other
// error is retried within the type's budget.
type Handler[TX any] func(ctx context.Context, job Job) (Result[TX], error)

// permanent marks an error no retry fixes.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent wraps err so that the step fails for good instead of being
// retried.
func Permanent(err error) error { return permanent{err} }

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Poll is the wait between claims when no step is ready. Defaults to
	// 200 ms.
	Poll time.Duration
	// Heartbeat is how often a running step's lease is extended. Defaults
	// to a third of the type's lease.
	Heartbeat time.Duration
}

// Worker runs the steps of the task types it has handlers for, in
// process, one at a time (run several for more).
type Worker[TX any] struct {
	en       *Engine[TX]
	handlers map[string]Handler[TX]
	types    []string
	cfg      WorkerConfig
}

// NewWorker returns a worker with handlers by task type; every type must
// be declared in the engine's Config.
func (en *Engine[TX]) NewWorker(handlers map[string]Handler[TX], cfg *WorkerConfig) (*Worker[TX], error) {
	if len(handlers) == 0 {
		return nil, fmt.Errorf("%w: a worker needs at least one handler", ErrBadConfig)
	}
	w := &Worker[TX]{en: en, handlers: handlers}
	if cfg != nil {
		w.cfg = *cfg
	}
	if w.cfg.Poll < 0 || w.cfg.Heartbeat < 0 {
		return nil, fmt.Errorf("%w: negative Poll or Heartbeat", ErrBadConfig)
	}
	if w.cfg.Poll == 0 {
		w.cfg.Poll = 200 * time.Millisecond
	}
	for t := range handlers {
		if _, ok := en.cfg.Types[t]; !ok {
			return nil, fmt.Errorf("%w: handler for undeclared task type %q", ErrBadConfig, t)
		}
		w.types = append(w.types, t)
	}
	return w, nil
}

// Run claims and runs steps until ctx ends.
func (w *Worker[TX]) Run(ctx context.Context) error {
	for {
		ran, err := w.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			w.en.cfg.Logger.WarnContext(ctx, "execution: worker step failed", "error", err)
		}
		if !ran {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(w.cfg.Poll):
			}
		}
	}
}

// RunOnce claims one step and runs it to its end (completed, failed,
// retried later, or fenced). ran=false when no step was claimable.
func (w *Worker[TX]) RunOnce(ctx context.Context) (ran bool, err error) {
	var c Claimed
	var ok bool
	owner := rand.Text()
	if err := w.en.s.InTx(ctx, func(ctx context.Context, tx TX) error {
		var err error
		c, ok, err = w.en.ClaimTx(ctx, tx, w.types, owner, 0)
		return err
	}); err != nil || !ok {
		return false, err
	}
	res, herr := w.run(ctx, c)
	st := c.Step
	if herr != nil {
		retryable := !errors.As(herr, new(permanent))
		return true, w.en.s.InTx(context.WithoutCancel(ctx), func(ctx context.Context, tx TX) error {
			_, err := w.en.FailTx(ctx, tx, st.App, st.ID, st.Epoch, herr.Error(), retryable)
			return err
		})
	}
	return true, w.en.s.InTx(context.WithoutCancel(ctx), func(ctx context.Context, tx TX) error {
		if res.Writes != nil {
			if err := res.Writes(ctx, tx); err != nil {
				return err
			}
		}
		_, err := w.en.CompleteTx(ctx, tx, st.App, st.ID, st.Epoch, res.Output)
		return err
	})
}

// run calls the step's handler while a heartbeat extends its lease; a
// heartbeat that finds the claim lost cancels the handler's context with
// ErrFenced.
func (w *Worker[TX]) run(ctx context.Context, c Claimed) (res Result[TX], err error) {
	tc := w.en.cfg.Types[c.Step.Type]
	every := w.cfg.Heartbeat
	if every == 0 {
		every = tc.Lease / 3
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			err := w.en.s.InTx(hctx, func(ctx context.Context, tx TX) error {
				_, _, err := w.en.HeartbeatTx(ctx, tx, c.Step.App, c.Step.ID, c.Step.Epoch, 0)
				return err
			})
			if errors.Is(err, ErrFenced) || errors.Is(err, ErrIllegalTransition) {
				cancel(ErrFenced)
				return
			}
		}
	}()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("execution: handler panicked: %v", p)
		}
	}()
	return w.handlers[c.Step.Type](hctx, Job(c))
}
