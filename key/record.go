package key

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
)

// Backoff between attempts to record an outcome the store did not take.
const (
	recordBackoffMin = 50 * time.Millisecond
	recordBackoffMax = time.Second
)

// held is a key this process holds: its operation runs (write == nil), or
// it ran and its outcome waits to be recorded (write != nil).
type held struct {
	fingerprint Fingerprint
	fence       store.Fence

	mu    sync.Mutex
	until time.Time                       // the lease's end as last seen, on this process's clock
	write func(ctx context.Context) error // records the outcome; nil while running
	done  bool                            // recorded, fenced or given up
	// settled is closed when done is set while a background recorder
	// waits, so that it stops at once.
	settled chan struct{}
	// finished is closed when the process stops holding the key (drop):
	// duplicates waiting for the attempt (Config.WaitInFlight) ask again.
	finished chan struct{}
	dropped  sync.Once
}

// settle marks h done and wakes its background recorder. h.mu is held.
func (h *held) settle() {
	if !h.done {
		h.done = true
		if h.settled != nil {
			close(h.settled)
		}
	}
}

// localClaims is the set of keys this process holds, by store key. The
// store's lease protects a key across processes; this set protects it in
// the process even when the store cannot answer: while the operation runs,
// a duplicate here is told OutcomeInFlight without a claim (it only reads the
// record, to see whether the operation has just been settled), and while
// its outcome waits to be recorded, a duplicate first tries to record it
// and is refused (OutcomeUnavailable) until that succeeds. So a store outage
// longer than the lease cannot let a retry to this process run the
// operation again.
type localClaims struct {
	m       sync.Map // store key → *held
	waiting sync.WaitGroup
	n       atomic.Int64 // outcomes waiting to be recorded
}

// hold registers a granted claim whose lease has left to run.
func (l *localClaims) hold(c *claim, fp Fingerprint, left time.Duration) {
	c.held = &held{fingerprint: fp, fence: c.fence, until: time.Now().Add(left), finished: make(chan struct{})}
	l.m.Store(c.fence.Key, c.held)
}

// extended notes that c's lease was extended by lease.
func (c *claim) extended(lease time.Duration) {
	if c.held != nil {
		c.held.mu.Lock()
		c.held.until = time.Now().Add(lease)
		c.held.mu.Unlock()
	}
}

// drop forgets c's key once its outcome is settled.
func (l *localClaims) drop(c *claim) {
	if c.held != nil {
		l.m.CompareAndDelete(c.fence.Key, c.held)
		c.held.finish()
	}
}

// check decides a claim for key locally when this process holds it with the
// same fingerprint (another fingerprint goes to the store, which answers
// OutcomeConflict). decided=false means ask the store.
func (g *Guard) checkLocal(ctx context.Context, key string, fp Fingerprint) (res Result, err error, decided bool) {
	l := &g.local
	v, ok := l.m.Load(key)
	if !ok {
		return Result{}, nil, false
	}
	h := v.(*held)
	if !bytes.Equal(h.fingerprint, fp) {
		return Result{}, nil, false
	}
	h.mu.Lock()
	running, until := h.write == nil && !h.done, h.until
	h.mu.Unlock()
	if running {
		// The operation runs here, or has just finished and is being
		// settled. The record says which; if the store cannot say, this
		// process knows the key is held, whatever the lease.
		rec, err := g.store.Get(ctx, key)
		if err == nil && (rec.State != store.StateProcessing || rec.Epoch != h.fence.Epoch || rec.Owner != h.fence.Owner) {
			return Result{}, nil, false // settled meanwhile: the store answers
		}
		return Result{Outcome: OutcomeInFlight, RetryAfter: max(time.Until(until), 0)}, ErrInFlight, true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return Result{}, nil, false
	}
	// The outcome waits to be recorded: this retry tries first, so that
	// the store's next answer is the recorded outcome (a replay, or
	// OutcomeUnknown), never a second run.
	switch err := h.write(ctx); {
	case err == nil:
		g.cfg.Logger.InfoContext(ctx, "key: outcome recorded after the store recovered (by a retry)")
	case errors.Is(err, store.ErrFenced):
		g.cfg.Logger.WarnContext(ctx, "key: outcome not recorded by a retry: it landed earlier, or the key was taken over meanwhile")
	default:
		return Result{Outcome: OutcomeUnavailable}, fmt.Errorf("%w: %w: recording the first attempt's outcome: %w", ErrUnavailable, ErrRecording, err), true
	}
	h.settle()
	l.m.CompareAndDelete(key, h)
	h.finish()
	return Result{}, nil, false
}

// finish wakes the duplicates waiting for h's attempt: the process no
// longer holds the key.
func (h *held) finish() { h.dropped.Do(func() { close(h.finished) }) }

// keepRecording retries write in the background until the store takes it,
// fences it, or RecordTimeout passes. Whenever a write fails, it also tries
// to extend the lease by lease, so that the store keeps the key held as long
// as it answers anything. The key stays in the process's set meanwhile.
func (g *Guard) keepRecording(c *claim, what string, write func(context.Context) error, lease time.Duration) {
	h := c.held // every granted claim is registered (claim calls hold)
	h.mu.Lock()
	h.write = write
	h.settled = make(chan struct{})
	h.mu.Unlock()
	g.local.n.Add(1)
	g.local.waiting.Add(1)
	go func() {
		defer g.local.waiting.Done()
		defer g.local.n.Add(-1)
		deadline := time.Now().Add(g.cfg.RecordTimeout)
		t := time.NewTimer(recordBackoffMin)
		defer t.Stop()
		for backoff, attempt := recordBackoffMin, 1; ; attempt++ {
			select {
			case <-t.C:
			case <-h.settled: // a retry recorded it
				return
			}
			if g.recordOnce(c, h, what, lease, attempt) {
				return
			}
			if time.Now().After(deadline) {
				g.cfg.Logger.Error("key: gave up recording an outcome; the key frees when its lease ends and a retry may run the operation again",
					"what", what, "epoch", c.fence.Epoch, "attempts", attempt, "after", g.cfg.RecordTimeout)
				h.mu.Lock()
				h.settle()
				h.mu.Unlock()
				g.local.drop(c)
				return
			}
			backoff = min(2*backoff, recordBackoffMax)
			t.Reset(backoff)
		}
	}()
}

// recordOnce makes one attempt; it reports whether the outcome is settled.
func (g *Guard) recordOnce(c *claim, h *held, what string, lease time.Duration, attempt int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done { // a retry recorded it first
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := h.write(ctx)
	switch {
	case err == nil:
		g.cfg.Logger.Info("key: outcome recorded after the store recovered", "what", what, "epoch", c.fence.Epoch, "attempts", attempt)
	case errors.Is(err, store.ErrFenced):
		// Either an earlier attempt landed although its answer was lost, or
		// the key was taken over after the lease ended. The record says.
		rec, gerr := g.store.Get(ctx, c.fence.Key)
		if gerr == nil && rec.Epoch == c.fence.Epoch && rec.Owner == c.fence.Owner {
			break
		}
		g.cfg.Logger.Warn("key: outcome not recorded: the key was taken over meanwhile", "what", what, "epoch", c.fence.Epoch)
	default:
		// Keep the store's lease alive whenever it answers at all; a
		// fenced extension means our write landed or the key was taken
		// over, which the next write attempt tells apart.
		_, _ = g.store.Extend(ctx, c.fence, lease)
		return false
	}
	h.settle()
	g.local.drop(c)
	return true
}

// Recording returns how many outcomes the guard is still trying to record
// (see Config.RecordTimeout), for metrics and readiness.
func (g *Guard) Recording() int { return int(g.local.n.Load()) }

// Drain waits until every outcome the guard is trying to record has been
// recorded or given up, or ctx ends. Call it at shutdown, after the last
// request has returned: a process that exits while outcomes wait loses
// them, and a retry after the lease may run those operations again.
func (g *Guard) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.local.waiting.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
