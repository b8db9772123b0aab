package execution

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
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

// retryAfter asks for a retry after a wait.
type retryAfter struct {
	error
	wait time.Duration
}

func (r retryAfter) Unwrap() error { return r.error }

// RetryAfter wraps err so that the step's retry (within its type's
// budget) waits d instead of the type's backoff: the wait a target asked
// for (Retry-After), or a handler's own backoff.
func RetryAfter(err error, d time.Duration) error { return retryAfter{err, d} }

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Poll is the wait between claims when no step is ready. Defaults to
	// 200 ms.
	Poll time.Duration
	// Heartbeat is how often a running step's lease is extended. Defaults
	// to a third of the type's lease.
	Heartbeat time.Duration
	// Concurrency is how many handlers Run runs at once; as many outcomes
	// again may wait for their commit meanwhile, so the next steps run
	// while the last ones settle. Defaults to 1.
	Concurrency int
	// MaxBatch bounds the steps one transaction claims or settles.
	// Defaults to 64.
	MaxBatch int
	// SettleWait is how long the steps that ended wait for others still
	// running before they are settled together, so that a busy worker
	// pays one commit for many steps; a step that runs alone never waits.
	// Defaults to DefaultSettleWait; negative: no wait.
	SettleWait time.Duration
}

// Defaults of WorkerConfig.
const (
	DefaultMaxBatch   = 64
	DefaultSettleWait = 2 * time.Millisecond
)

// Worker runs the steps of the task types it has handlers for, in
// process, Concurrency at a time.
//
// Run claims as many steps as it has room for in one transaction, and the
// steps that end while a settling transaction commits share the next one
// (group commit: no wait is added, a lone step commits alone), so a busy
// worker pays one commit for many steps. Each step keeps its own outcome:
// a batch that fails (one step fenced, or its Writes failing) is rolled
// back whole and each of its steps settled again in a transaction of its
// own, so one step's failure never fails or leaks into another's. A
// step's Writes may thus run more than once; only the run whose
// transaction commits has effects.
type Worker[TX any] struct {
	en       *Engine[TX]
	handlers map[string]Handler[TX]
	types    []string
	cfg      WorkerConfig
	// kick wakes an idle Run when a settle may have dispatched a step (a
	// multi-step execution's next), so that it runs without a poll's wait.
	kick chan struct{}
}

// NewWorker returns a worker with handlers by task type; every type must
// be declared in the engine's Config.
func (en *Engine[TX]) NewWorker(handlers map[string]Handler[TX], cfg *WorkerConfig) (*Worker[TX], error) {
	if len(handlers) == 0 {
		return nil, fmt.Errorf("%w: a worker needs at least one handler", ErrBadConfig)
	}
	w := &Worker[TX]{en: en, handlers: handlers, kick: make(chan struct{}, 1)}
	if cfg != nil {
		w.cfg = *cfg
	}
	if w.cfg.Poll < 0 || w.cfg.Heartbeat < 0 || w.cfg.Concurrency < 0 || w.cfg.MaxBatch < 0 {
		return nil, fmt.Errorf("%w: negative Poll, Heartbeat, Concurrency or MaxBatch", ErrBadConfig)
	}
	if w.cfg.Poll == 0 {
		w.cfg.Poll = 200 * time.Millisecond
	}
	if w.cfg.Concurrency == 0 {
		w.cfg.Concurrency = 1
	}
	if w.cfg.MaxBatch == 0 {
		w.cfg.MaxBatch = DefaultMaxBatch
	}
	switch {
	case w.cfg.SettleWait == 0:
		w.cfg.SettleWait = DefaultSettleWait
	case w.cfg.SettleWait < 0:
		w.cfg.SettleWait = 0
	}
	for t := range handlers {
		if _, ok := en.cfg.Types[t]; !ok {
			return nil, fmt.Errorf("%w: handler for undeclared task type %q", ErrBadConfig, t)
		}
		w.types = append(w.types, t)
	}
	slices.Sort(w.types)
	return w, nil
}

// ended is a step whose handler returned.
type ended[TX any] struct {
	c   Claimed
	res Result[TX]
	err error
}

// Run claims and runs steps until ctx ends, then waits for the steps it
// runs to end and settles them (a handler sees ctx's end through its own
// context). When idle it looks for steps every Poll, and at once when its
// store, a store.StepWaker, tells of new ones. A step whose handler fails
// once ctx has ended, as a handler stopped by it does, is not recorded as
// failed: it is left to its lease and claimed again when that ends, so
// that stopping a worker (a deploy) costs no step a retry of its budget.
func (w *Worker[TX]) Run(ctx context.Context) error {
	n := w.cfg.Concurrency
	// A step holds a slot from its claim until its handler returns, and
	// then a settling token until its outcome is committed: at most n
	// handlers run, and at most n outcomes wait for their commit while
	// the next steps already run (a store slower than the handlers holds
	// the handlers' slots, and claims stop).
	slots := make(chan struct{}, n)
	settling := make(chan struct{}, n)
	done := make(chan ended[TX], n)
	var handling atomic.Int64 // steps from their claim until they are about to reach the settle loop
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		w.settleLoop(context.WithoutCancel(ctx), done, settling, &handling)
	}()
	// One heartbeat for every step running, in one transaction.
	bs := &beats{running: map[*Claimed]context.CancelCauseFunc{}}
	hbCtx, stopBeats := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() { defer close(beating); w.heartbeat(hbCtx, bs) }()
	defer func() { stopBeats(); <-beating }()
	// A store that tells of new steps (PostgreSQL: NOTIFY from idem serve,
	// or from a caller's store.StepWaker.NotifySteps) wakes an idle worker
	// at once; otherwise it polls.
	waker, _ := w.en.s.(store.StepWaker)
	var wake <-chan struct{}
	var listenAt time.Time
	var running sync.WaitGroup
	defer func() {
		running.Wait()
		close(done)
		<-settled
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case slots <- struct{}{}:
		}
		room := 1
	more:
		for room < min(n, w.cfg.MaxBatch) {
			select {
			case slots <- struct{}{}:
				room++
			default:
				break more
			}
		}
		claimed, err := w.claim(ctx, room)
		for range room - len(claimed) {
			<-slots
		}
		for _, c := range claimed {
			running.Add(1)
			handling.Add(1)
			go func() {
				defer running.Done()
				res, err := w.run(ctx, c, bs)
				if err != nil && ctx.Err() != nil {
					handling.Add(-1)
					<-slots // stopped: the step waits for its lease to end
					return
				}
				settling <- struct{}{}
				<-slots
				// Counted until now, so that the settle loop waits for it;
				// not once it is sent, or the loop, holding it already,
				// would wait for it in vain.
				handling.Add(-1)
				done <- ended[TX]{c, res, err}
			}()
		}
		if len(claimed) > 0 {
			// Give the handlers just started a chance to run before the
			// next claim counts its room: one that returns at once (a
			// quick write) then frees its slot for that claim, not the one
			// after, so a busy worker claims full batches rather than
			// alternating halves.
			runtime.Gosched()
		}
		if err != nil && ctx.Err() == nil {
			w.en.cfg.Logger.WarnContext(ctx, "execution: worker claim failed", "error", err)
		}
		if len(claimed) == 0 {
			if wake == nil && waker != nil && !time.Now().Before(listenAt) {
				if wake = w.listen(ctx, waker); wake == nil {
					listenAt = time.Now().Add(relisten) // the store may be down: not at every poll
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case _, ok := <-wake:
				if !ok {
					wake, listenAt = nil, time.Now().Add(relisten) // the listener failed: poll, and listen again later
				}
			case <-w.kick:
			case <-time.After(w.cfg.Poll):
			}
		}
	}
}

// Wake makes an idle Run look for steps at once, instead of at its next
// poll: call it after a transaction that dispatched steps commits (a
// store.StepWaker wakes it by itself).
func (w *Worker[TX]) Wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// relisten is how long a worker whose listener failed polls before it
// listens again.
const relisten = 5 * time.Second

// listen returns the store's step wake-ups, or nil when it cannot listen
// now (the worker polls meanwhile).
func (w *Worker[TX]) listen(ctx context.Context, waker store.StepWaker) <-chan struct{} {
	ch, err := waker.StepWakeups(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.en.cfg.Logger.WarnContext(ctx, "execution: worker cannot listen for new steps; polling", "error", err)
		}
		return nil
	}
	return ch
}

// claim claims up to n steps in one transaction, under a new owner token.
func (w *Worker[TX]) claim(ctx context.Context, n int) ([]Claimed, error) {
	var out []Claimed
	err := w.en.s.InTx(ctx, func(ctx context.Context, tx TX) error {
		var err error
		out, err = w.en.ClaimManyTx(ctx, tx, w.types, rand.Text(), 0, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// settleLoop settles the steps that end (those that ended while a batch
// committed, together) and returns their settling tokens once they are
// settled.
func (w *Worker[TX]) settleLoop(ctx context.Context, done <-chan ended[TX], settling <-chan struct{}, running *atomic.Int64) {
	for first := range done {
		batch := []ended[TX]{first}
		// Take what ended meanwhile; and while other steps still run, wait
		// up to SettleWait for them, so that a busy worker commits many
		// steps at once. A lone step waits for nothing.
		var wait <-chan time.Time
	more:
		for len(batch) < w.cfg.MaxBatch {
			select {
			case e, ok := <-done:
				if !ok {
					break more
				}
				batch = append(batch, e)
				continue
			default:
			}
			// Nothing else on its way (or what is on its way waits for
			// this batch's settling tokens): settle now.
			if running.Load() == 0 || w.cfg.SettleWait == 0 || len(batch) >= cap(settling) {
				break
			}
			if wait == nil {
				wait = time.After(w.cfg.SettleWait)
			}
			select {
			case e, ok := <-done:
				if !ok {
					break more
				}
				batch = append(batch, e)
			case <-wait:
				break more
			}
		}
		next := false
		for i, err := range w.settle(ctx, batch) {
			if err != nil {
				w.en.cfg.Logger.WarnContext(ctx, "execution: worker step failed", "step", batch[i].c.Step.ID, "error", err)
			}
			next = next || w.en.cfg.Types[batch[i].c.Step.Type].Next != nil
		}
		if next {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
		for range batch {
			<-settling
		}
	}
}

// settle records the outcomes of batch in one transaction or, when that
// fails, each in its own, and returns each step's error.
func (w *Worker[TX]) settle(ctx context.Context, batch []ended[TX]) []error {
	errs := make([]error, len(batch))
	if len(batch) > 1 {
		err := w.en.s.InTx(ctx, func(ctx context.Context, tx TX) error { return w.settleBatchTx(ctx, tx, batch) })
		if err == nil {
			return errs
		}
	}
	for i, e := range batch {
		errs[i] = w.en.s.InTx(ctx, func(ctx context.Context, tx TX) error { return w.settleTx(ctx, tx, e) })
	}
	return errs
}

// settleBatchTx records, in tx, how the steps of batch ended: failures one
// by one, then every completion's writes, then the completions together
// (completeClaimedManyTx). Any error fails the whole batch.
func (w *Worker[TX]) settleBatchTx(ctx context.Context, tx TX, batch []ended[TX]) error {
	var done []Claimed
	var outputs []json.RawMessage
	for _, e := range batch {
		if e.err != nil {
			if err := w.settleTx(ctx, tx, e); err != nil {
				return err
			}
			continue
		}
		if e.res.Writes != nil {
			if err := e.res.Writes(ctx, tx); err != nil {
				return err
			}
		}
		done, outputs = append(done, e.c), append(outputs, e.res.Output)
	}
	return w.en.completeClaimedManyTx(ctx, tx, done, outputs)
}

// settleTx records, in tx, how e's step ended: completed with its Writes,
// or failed (retried when its error is not Permanent).
func (w *Worker[TX]) settleTx(ctx context.Context, tx TX, e ended[TX]) error {
	st := e.c.Step
	if e.err != nil {
		var wait time.Duration
		if r, ok := errors.AsType[retryAfter](e.err); ok {
			wait = r.wait
		}
		_, err := w.en.failTx(ctx, tx, st.App, st.ID, st.Epoch, e.err.Error(), !errors.As(e.err, new(permanent)), wait)
		return err
	}
	if e.res.Writes != nil {
		if err := e.res.Writes(ctx, tx); err != nil {
			return err
		}
	}
	return w.en.completeClaimedTx(ctx, tx, e.c, e.res.Output)
}

// RunOnce claims one step and runs it to its end (completed, failed,
// retried later, or fenced). ran=false when no step was claimable.
func (w *Worker[TX]) RunOnce(ctx context.Context) (ran bool, err error) {
	claimed, err := w.claim(ctx, 1)
	if err != nil || len(claimed) == 0 {
		return false, err
	}
	res, herr := w.run(ctx, claimed[0], nil)
	return true, w.settle(context.WithoutCancel(ctx), []ended[TX]{{claimed[0], res, herr}})[0]
}

// run calls the step's handler while a heartbeat extends its lease; a
// heartbeat that finds the claim lost cancels the handler's context with
// ErrFenced. With beats, the step is extended by Run's heartbeat with the
// others that run (one transaction for all of them); without, by a
// heartbeat of its own.
func (w *Worker[TX]) run(ctx context.Context, c Claimed, beats *beats) (res Result[TX], err error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if beats != nil {
		defer beats.add(c, cancel)()
	} else {
		w.beatAlone(hctx, c, cancel)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("execution: handler panicked: %v", p)
		}
	}()
	return w.handlers[c.Step.Type](hctx, Job(c))
}

// every is how often a step of type typ is extended.
func (w *Worker[TX]) every(typ string) time.Duration {
	if w.cfg.Heartbeat > 0 {
		return w.cfg.Heartbeat
	}
	return w.en.cfg.Types[typ].Lease / 3
}

// beats holds the steps that Run's handlers are running, for its
// heartbeat.
type beats struct {
	mu      sync.Mutex
	running map[*Claimed]context.CancelCauseFunc
}

// add registers c while its handler runs; the returned func removes it.
func (b *beats) add(c Claimed, cancel context.CancelCauseFunc) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running[&c] = cancel
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.running, &c)
	}
}

// heartbeat extends, every tick, the leases of all the steps running in
// one transaction (one round trip where the store can), and cancels with
// ErrFenced the handlers whose claims were lost. It runs until ctx ends.
func (w *Worker[TX]) heartbeat(ctx context.Context, b *beats) {
	every := time.Duration(0)
	for _, t := range w.types {
		if e := w.every(t); every == 0 || e < every {
			every = e
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		cs := make([]Claimed, 0, len(b.running))
		cancels := make([]context.CancelCauseFunc, 0, len(b.running))
		for c, cancel := range b.running {
			cs, cancels = append(cs, *c), append(cancels, cancel)
		}
		b.mu.Unlock()
		if len(cs) == 0 {
			continue
		}
		var lost []bool
		err := w.en.s.InTx(ctx, func(ctx context.Context, tx TX) error {
			var err error
			lost, err = w.en.extendClaimedTx(ctx, tx, cs)
			return err
		})
		if err != nil {
			continue // the store may be down: the next tick tries again, within the lease
		}
		for i, l := range lost {
			if l {
				cancels[i](ErrFenced)
			}
		}
	}
}

// beatAlone extends c's lease every tick until ctx ends, on its own.
func (w *Worker[TX]) beatAlone(hctx context.Context, c Claimed, cancel context.CancelCauseFunc) {
	every := w.every(c.Step.Type)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
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
}
