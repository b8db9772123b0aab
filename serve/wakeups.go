package serve

import (
	"context"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// signal wakes every waiter at once: waiters take the current channel, and
// wake closes it and starts a new one.
type signal struct {
	mu    sync.Mutex
	ready chan struct{}
}

// wait returns the channel the next wake closes. Take it before looking
// for work, so that a wake between the look and the wait is not missed.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready == nil {
		s.ready = make(chan struct{})
	}
	return s.ready
}

func (s *signal) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready != nil {
		close(s.ready)
		s.ready = nil
	}
}

// notifyTimeout bounds one NotifySteps.
const notifyTimeout = 5 * time.Second

// dispatched is called after a request or an expiry pass whose committed
// transaction dispatched steps: the claims waiting here try at once, and
// those of other processes on the store are told (by RunWakeups).
func (srv *Server[TX]) dispatched() {
	srv.stepsReady.wake()
	srv.runner.Wake()
	select {
	case srv.notify <- struct{}{}:
	default: // a notification is due already; it covers this one
	}
}

// RunWakeups, while ctx lasts, tells the other processes on the store when
// this one dispatched steps, and wakes the claims waiting here when another
// did, through the store's StepWaker (PostgreSQL: NOTIFY and LISTEN).
// Without it (or on a store without one), claims waiting here still wake
// when this process dispatches steps, and every Config.ClaimPoll.
func (srv *Server[TX]) RunWakeups(ctx context.Context) error {
	waker, ok := srv.s.(store.StepWaker)
	if !ok {
		<-ctx.Done()
		return ctx.Err()
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-srv.notify:
			}
			nctx, cancel := context.WithTimeout(ctx, notifyTimeout)
			if err := waker.NotifySteps(nctx); err != nil && ctx.Err() == nil {
				srv.cfg.Logger.WarnContext(ctx, "serve: telling other processes of new steps failed; they find them at their next poll", "error", err)
			}
			cancel()
		}
	}()
	for {
		ch, err := waker.StepWakeups(ctx)
		if err != nil && ctx.Err() == nil {
			srv.cfg.Logger.WarnContext(ctx, "serve: listening for other processes' steps failed; polling meanwhile", "error", err)
		}
		if err == nil {
			for range ch {
				srv.stepsReady.wake()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(srv.cfg.ClaimPoll):
			// Steps dispatched while no one listened are found by this wake.
			srv.stepsReady.wake()
		}
	}
}
