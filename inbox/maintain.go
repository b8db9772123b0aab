package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/internal/loop"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
)

// compensateBatch is how many overdue streams one Compensate pass takes.
const compensateBatch = 100

// Compensate runs one pass of the compensator: for up to 100 streams whose
// oldest delta gap is older than Config.GapDeadline, it calls fn for that
// gap in a transaction that locks the stream; when fn returns nil the
// stream moves past the gap (order.Compensated) and the parked events behind
// it are applied in the same transaction. It returns how many gaps were
// compensated, and the errors of the streams it could not handle (each
// stream is its own transaction: one failure does not stop the others).
func (p *Processor[TX]) Compensate(ctx context.Context, fn CompensateFunc[TX]) (int, error) {
	if fn == nil {
		return 0, fmt.Errorf("%w: nil CompensateFunc", ErrBadConfig)
	}
	now := p.cfg.Now()
	keys, err := p.s.OverdueStreams(ctx, now.Add(-p.cfg.GapDeadline), compensateBatch)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	n := 0
	var errs []error
	for _, sk := range keys {
		res, err := p.retry(ctx, event.Event{Source: sk.Source, ID: "compensate:" + sk.Subject}, nil, func(ctx context.Context, tx TX, t *try) (Result, error) {
			return p.compensateTx(ctx, tx, sk, fn, t)
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %v: %w", sk, err))
			continue
		}
		if res.Outcome == OutcomeProcessed {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// compensateTx compensates the stream's first gap if it is still overdue
// (another process may have done it). OutcomeProcessed when it did.
func (p *Processor[TX]) compensateTx(ctx context.Context, tx TX, sk store.StreamKey, fn CompensateFunc[TX], t *try) (Result, error) {
	now := p.cfg.Now()
	raw, err := p.s.LockStreamTx(ctx, tx, sk)
	if err != nil || raw == nil {
		return Result{}, err
	}
	var s order.Stream
	if err := json.Unmarshal(raw, &s); err != nil {
		return Result{}, fmt.Errorf("%w: stream %v: %w", store.ErrCorrupt, sk, err)
	}
	due := order.Overdue(s, now, p.cfg.GapDeadline)
	if len(due) == 0 {
		return Result{}, nil
	}
	g := due[0]
	if err := fn(ctx, tx, sk, g); err != nil {
		// The whole transaction rolls back: the hook's writes with it, and
		// the gap stays open for the next pass.
		return Result{}, fmt.Errorf("compensating %d..%d: %w", g.From, g.To, err)
	}
	d, err := order.Compensated(s, g)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", store.ErrCorrupt, err)
	}
	next, applied, dead, err := p.applyReleased(ctx, tx, sk, d, t, now)
	if err != nil {
		return Result{}, err
	}
	res := Result{Outcome: OutcomeProcessed, Applied: applied, DeadLetters: dead, Gap: &g, housekp: true}
	if err := p.commitStream(ctx, tx, t, sk, order.ModeDelta, s, d, next, now, &res); err != nil {
		return Result{}, err
	}
	p.log.InfoContext(ctx, "inbox: gap compensated", "source", sk.Source, "subject", sk.Subject, "from", g.From, "to", g.To, "released", len(applied))
	return res, nil
}

// RunCompensator calls Compensate with fn every Config.CompensateInterval
// until ctx ends, and again at once after a pass that compensated something
// (a backlog drains without waiting). Errors are logged. It returns ctx's
// error.
func (p *Processor[TX]) RunCompensator(ctx context.Context, fn CompensateFunc[TX]) error {
	return loop.Every(ctx, p.cfg.CompensateInterval, func() bool {
		n, err := p.Compensate(ctx, fn)
		if err != nil && ctx.Err() == nil {
			p.log.ErrorContext(ctx, "inbox: compensation failed", "error", err)
		}
		return n > 0 && err == nil
	})
}

// sweepBatch is how many rows one SweepInbox call deletes.
const sweepBatch = 1000

// Sweep deletes inbox rows and gap records older than Config.Retention, in
// batches, and returns how many it deleted. Dead rows stay until requeued.
func (p *Processor[TX]) Sweep(ctx context.Context) (int, error) {
	before := p.cfg.Now().Add(-p.cfg.Retention)
	total := 0
	for {
		n, err := p.s.SweepInbox(ctx, before, sweepBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		if n < sweepBatch {
			return total, nil
		}
	}
}

// RunSweeper calls Sweep every Config.SweepInterval until ctx ends,
// logging errors. It returns ctx's error.
func (p *Processor[TX]) RunSweeper(ctx context.Context) error {
	return loop.Every(ctx, p.cfg.SweepInterval, func() bool {
		if _, err := p.Sweep(ctx); err != nil && ctx.Err() == nil {
			p.log.ErrorContext(ctx, "inbox: sweep failed", "error", err)
		}
		return false
	})
}

// DeadLetters lists up to limit dead letters with ID > after, by ID.
func (p *Processor[TX]) DeadLetters(ctx context.Context, after int64, limit int) ([]store.DeadLetter, error) {
	return p.s.ListDeadLetters(ctx, store.DeadLetterQuery{After: after, Limit: limit})
}

// Gaps lists up to limit recorded gaps of one stream (all when stream is
// nil), oldest first.
func (p *Processor[TX]) Gaps(ctx context.Context, stream *store.StreamKey, limit int) ([]store.GapRecord, error) {
	return p.s.ListGaps(ctx, stream, limit)
}
