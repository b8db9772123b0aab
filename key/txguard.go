package key

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

// TxGuard is a Guard whose operations can write to the store's database in
// the store's transaction. The operation's writes and the fenced completion
// commit together or not at all, so a local effect happens exactly once per
// key even if the process dies at any point: before the commit nothing
// happened (the lease expires and the next caller runs it), after it the key
// replays. Because of that, its claims need not be durable on their own
// (see ClaimTx): with a store that uses it (pgstore), a transactional
// request waits for the disk once, at its commit, instead of twice.
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

// DoTx is Do with fn running inside a transaction: fn's writes through tx
// and the stored response commit together. Outcomes and errors are Do's,
// with one difference: whenever DoTx returns an error with OutcomeExecuted,
// fn's writes were rolled back (or, if the commit's answer was lost and the
// record could not be read back, their fate is unknown and the key stays
// claimed until its lease ends; the error then wraps ErrUnavailable).
func (g *TxGuard[TX]) DoTx(ctx context.Context, req Request, fn func(ctx context.Context, tx TX) ([]byte, error)) (Result, error) {
	cl, res, err := g.ClaimTx(ctx, req)
	if cl == nil {
		return res, err
	}
	tx, err := cl.Begin()
	if err != nil {
		return res, err
	}
	resp, ferr := cl.runTx(tx, fn)
	if ferr != nil {
		return res, cl.Rollback(ctx, tx, ferr)
	}
	return cl.Commit(ctx, tx, resp)
}

// runTx calls fn in tx with the claim's context. A panic in fn rolls tx
// back, releases the claim, and continues.
func (c *TxClaim[TX]) runTx(tx TX, fn func(context.Context, TX) ([]byte, error)) ([]byte, error) {
	defer func() {
		if p := recover(); p != nil {
			_ = c.Rollback(c.ctx, tx, fmt.Errorf("key: operation panicked: %v", p))
			panic(p)
		}
	}()
	return fn(c.ctx, tx)
}
