package key

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemhq/idem/store"
)

// TxGuard is a Guard whose operations can write to the store's database in
// the store's transaction. The operation's writes and the fenced completion
// commit together or not at all, so a local effect happens exactly once per
// key even if the process dies at any point: before the commit nothing
// happened (the lease expires and the next caller runs it), after it the key
// replays.
type TxGuard[TX any] struct {
	*Guard
	ts store.TxStore[TX]
}

// NewTx returns a transactional guard over ts (sqlitestore: *sql.Tx,
// pgstore: pgx.Tx). It also has Do, for operations without local writes.
func NewTx[TX any](ts store.TxStore[TX], cfg *Config) (*TxGuard[TX], error) {
	g, err := New(ts, cfg)
	if err != nil {
		return nil, err
	}
	return &TxGuard[TX]{Guard: g, ts: ts}, nil
}

// opError carries fn's own error out of the transaction, so that it is told
// apart from the store's.
type opError struct{ err error }

func (e opError) Error() string { return e.err.Error() }

// DoTx is Do with fn running inside a transaction: fn's writes through tx
// and the stored response commit together. Outcomes and errors are Do's,
// with one difference: whenever DoTx returns an error with OutcomeExecuted,
// fn's writes were rolled back (or, if the commit's answer was lost and the
// record could not be read back, their fate is unknown and the key stays
// claimed until its lease ends; the error then wraps ErrUnavailable).
func (g *TxGuard[TX]) DoTx(ctx context.Context, req Request, fn func(ctx context.Context, tx TX) ([]byte, error)) (Result, error) {
	c, res, err := g.claim(ctx, req)
	if c == nil {
		return res, err
	}
	p := store.CompleteParams{Fence: c.fence, Retention: g.cfg.Retention}
	err = func() error {
		hctx, stop := g.heartbeat(ctx, c)
		defer stop()
		defer func() {
			if r := recover(); r != nil {
				g.release(ctx, c)
				panic(r)
			}
		}()
		return g.ts.InTx(hctx, func(ctx context.Context, tx TX) error {
			resp, ferr := fn(ctx, tx)
			if ferr != nil {
				return opError{ferr}
			}
			p.Response = resp
			return g.ts.CompleteTx(ctx, tx, p)
		})
	}()
	var oe opError
	if !errors.As(err, &oe) {
		// Every path but fn's own error settles here: the commit landed,
		// was fenced, or (read back below) did not happen, or its fate is
		// unknown and the lease decides. None has an effect outside the
		// transaction to record, so the process stops holding the key.
		defer g.local.drop(c)
	}
	switch {
	case err == nil:
		res.Response = p.Response
		return res, nil
	case errors.As(err, &oe):
		return res, g.fail(ctx, c, oe.err)
	case errors.Is(err, store.ErrFenced):
		return res, fmt.Errorf("complete: %w", ErrFenced)
	}
	// Begin, CompleteTx or commit failed: the transaction may or may not
	// have committed. The record says which, even if the caller's context
	// has ended meanwhile.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	rec, gerr := g.store.Get(ctx, c.fence.Key)
	switch {
	case gerr != nil:
		return res, fmt.Errorf("%w: commit: %w (and reading back: %w)", ErrUnavailable, err, gerr)
	case rec.State == store.StateDone && rec.Epoch == c.fence.Epoch && rec.Owner == c.fence.Owner:
		res.Response = p.Response
		return res, nil
	case rec.Epoch != c.fence.Epoch || rec.Owner != c.fence.Owner:
		return res, fmt.Errorf("commit: %w", ErrFenced)
	}
	// Still ours and not done: nothing committed. Release is fenced on the
	// processing state, so it cannot undo a commit that lands late.
	g.release(ctx, c)
	return res, fmt.Errorf("%w: commit: %w", ErrUnavailable, err)
}
