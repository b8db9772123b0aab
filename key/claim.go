package key

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
)

// ErrSettled is returned by a Claim's methods after the claim was already
// settled (completed, failed, released, marked unknown, committed or
// rolled back): a claim is settled once.
var ErrSettled = errors.New("key: claim already settled")

// Claim is a key this caller holds: the operation may run now, once. It is
// Do in two steps, for callers that cannot run the operation inside a
// closure (the HTTP middleware settles the key in the middle of a
// handler's response). Settle it exactly once, whatever happens: Complete
// with the response, or Fail with the operation's error (Release and
// MarkUnknown are Fail's two cases). Until then the claim's heartbeat
// extends its lease every Config.Heartbeat, and Context is cancelled with
// ErrFenced if the claim is lost to a newer owner. A claim never settled
// keeps its key until the lease ends, and then a retry runs the operation
// again. A Claim is for one goroutine.
type Claim struct {
	g       *Guard
	c       *claim
	res     Result
	ctx     context.Context
	stop    func()
	settled atomic.Bool
}

// Claim asks for req's key. When the caller now holds it, it returns the
// claim with Result.Outcome OutcomeExecuted; otherwise a nil claim and
// the result and error Do would return without running anything
// (OutcomeReplayed with the stored response, OutcomeInFlight,
// OutcomeUnknown, OutcomeConflict, OutcomeUnavailable). ctx is the parent
// of the claim's Context: when it ends, so does the heartbeat.
func (g *Guard) Claim(ctx context.Context, req Request) (*Claim, Result, error) {
	c, res, err := g.claim(ctx, req)
	if c == nil {
		return nil, res, err
	}
	hctx, stop := g.heartbeat(ctx, c)
	return &Claim{g: g, c: c, res: res, ctx: hctx, stop: stop}, res, nil
}

// Context is the operation's context: cancelled with ErrFenced (its
// context.Cause) if a heartbeat finds the claim lost, and when the claim
// is settled.
func (c *Claim) Context() context.Context { return c.ctx }

// Epoch is the claim's fencing epoch, for logs.
func (c *Claim) Epoch() int64 { return c.res.Epoch }

// settle stops the heartbeat, once.
func (c *Claim) settle() bool {
	if c.settled.Swap(true) {
		return false
	}
	c.stop()
	return true
}

// Complete records resp as the operation's response, fenced by the claim,
// even when ctx has ended (a client that went away: the operation ran).
// Its result and error are Do's once the operation succeeded: nil, or
// ErrFenced (the claim was lost meanwhile), or ErrUnavailable with
// ErrRecording (the store failed; the guard keeps the key held and keeps
// trying in the background, see Config.RecordTimeout). Result.Response is
// resp in every case.
func (c *Claim) Complete(ctx context.Context, resp []byte) (Result, error) {
	res := c.res
	res.Response = resp
	if !c.settle() {
		return res, ErrSettled
	}
	g := c.g
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	p := store.CompleteParams{Fence: c.c.fence, Response: resp, Retention: g.cfg.Retention}
	t0 := time.Now()
	err := g.store.Complete(ctx, p)
	if err == nil {
		g.completed(c.c, resp, t0)
		g.local.drop(c.c)
		return res, nil
	}
	if errors.Is(err, store.ErrFenced) {
		g.local.drop(c.c)
		return res, fmt.Errorf("complete: %w", ErrFenced)
	}
	// The completion may have been written although we saw an error. Read
	// it back; never run the operation again to find out.
	err = g.resolveComplete(ctx, p, err)
	if !errors.Is(err, ErrUnavailable) {
		g.local.drop(c.c)
		return res, err
	}
	// The store is failing and the effect happened: keep the key held and
	// keep trying, so that the first write after recovery records it.
	g.keepRecording(c.c, "complete", func(ctx context.Context) error { return g.store.Complete(ctx, p) }, g.cfg.Lease)
	return res, fmt.Errorf("%w (%w)", err, ErrRecording)
}

// completed caches the response c's completion recorded, the store having
// decided after t0: it expires, on this process's clock, no later than
// the record.
func (g *Guard) completed(c *claim, resp []byte, t0 time.Time) {
	if c.held != nil {
		g.replays.put(c.fence.Key, c.held.fingerprint, resp, c.fence.Epoch, t0.Add(g.cfg.Retention))
	}
}

// Fail settles the claim of an operation that failed with err, and
// returns err: the claim is released, so that a retry may run the
// operation again, unless err wraps ErrOutcomeUnknown (MarkUnknown): then
// the effect may have happened and the key stays held for
// Config.UnknownHold, answering OutcomeUnknown.
func (c *Claim) Fail(ctx context.Context, err error) error {
	if !c.settle() {
		return ErrSettled
	}
	return c.g.fail(ctx, c.c, err)
}

// Release hands the key back: the operation did nothing, and a retry may
// run it. Fail with an error that does not wrap ErrOutcomeUnknown does the
// same.
func (c *Claim) Release(ctx context.Context) error {
	if !c.settle() {
		return ErrSettled
	}
	c.g.release(ctx, c.c)
	return nil
}

// MarkUnknown settles the claim of an operation whose effect may have
// happened (its answer was lost): Fail with MarkUnknown(cause).
func (c *Claim) MarkUnknown(ctx context.Context, cause error) error {
	return c.Fail(ctx, MarkUnknown(cause))
}

// run calls fn with the claim's context. A panic in fn releases the claim
// and continues.
func (c *Claim) run(fn func(context.Context) ([]byte, error)) ([]byte, error) {
	defer func() {
		if p := recover(); p != nil {
			_ = c.Release(c.ctx)
			panic(p)
		}
	}()
	return fn(c.ctx)
}

// TxClaim is a Claim whose operation writes in a transaction of the store
// (TxGuard.ClaimTx): Begin the transaction, write in it, then Commit it
// with the response (the completion commits with the writes) or Rollback
// it with the operation's error. Commit and Rollback settle the claim;
// Fail, Release and MarkUnknown remain for an operation that never began
// its transaction.
type TxClaim[TX any] struct {
	*Claim
	ts store.TxStore[TX]
}

// ClaimTx is Claim for an operation that writes in the store's
// transaction. Its claim need not be durable before ClaimTx returns (a
// store may skip the claim's own sync, store.ClaimParams.Transactional):
// the transaction that completes it makes it durable with the operation's
// writes. A crash of the database before that commit may forget the claim
// instead of leaving it to its lease; either way nothing of the operation
// committed, and the next attempt runs it. An operation that also has
// effects outside the transaction (and settles with Rollback and
// ErrOutcomeUnknown) may then find its claim gone and the key not held as
// unknown: such effects may run again, as after any lease that ends.
func (g *TxGuard[TX]) ClaimTx(ctx context.Context, req Request) (*TxClaim[TX], Result, error) {
	req.tx = true
	cl, res, err := g.Claim(ctx, req)
	if cl == nil {
		return nil, res, err
	}
	return &TxClaim[TX]{Claim: cl, ts: g.ts}, res, nil
}

// Begin begins the operation's transaction, bound to the claim's Context:
// a claim lost to a newer owner rolls it back. End it with Commit or
// Rollback. When Begin fails, the claim is released (nothing ran) and the
// error wraps ErrUnavailable.
func (c *TxClaim[TX]) Begin() (TX, error) {
	tx, err := c.ts.BeginTx(c.ctx)
	if err != nil {
		var zero TX
		if rerr := c.Release(c.ctx); rerr != nil {
			return zero, rerr
		}
		return zero, fmt.Errorf("%w: begin: %w", ErrUnavailable, err)
	}
	return tx, nil
}

// Commit writes the completion with resp in tx, fenced by the claim, and
// commits tx: the operation's writes and the stored response commit
// together or not at all. Its result and error are DoTx's once the
// operation succeeded: nil (committed), ErrFenced (the claim was lost:
// rolled back), or ErrUnavailable (nothing committed, and the claim was
// released; or the commit's answer was lost and the record could not be
// read back, and the lease decides). Result.Response is resp.
func (c *TxClaim[TX]) Commit(ctx context.Context, tx TX, resp []byte) (Result, error) {
	res := c.res
	res.Response = resp
	if c.settled.Load() {
		_ = c.ts.RollbackTx(ctx, tx)
		return res, ErrSettled
	}
	g := c.g
	p := store.CompleteParams{Fence: c.c.fence, Response: resp, Retention: g.cfg.Retention}
	// The heartbeat stops only after the commit: the transaction is bound
	// to the claim's context, which stopping it cancels.
	t0 := time.Now()
	err := c.ts.CompleteTx(c.ctx, tx, p)
	if err != nil {
		_ = c.ts.RollbackTx(ctx, tx)
	} else {
		err = c.ts.CommitTx(c.ctx, tx)
	}
	c.settle()
	// Every path settles here: the commit landed, was fenced, or (read back
	// below) did not happen, or its fate is unknown and the lease decides.
	// None has an effect outside the transaction to record, so the process
	// stops holding the key.
	defer g.local.drop(c.c)
	switch {
	case err == nil:
		g.completed(c.c, resp, t0)
		return res, nil
	case errors.Is(err, store.ErrFenced):
		return res, fmt.Errorf("complete: %w", ErrFenced)
	}
	// CompleteTx or the commit failed: the transaction may or may not have
	// committed. The record says which, even if ctx has ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	rec, gerr := g.store.Get(ctx, c.c.fence.Key)
	switch {
	case gerr != nil:
		return res, fmt.Errorf("%w: commit: %w (and reading back: %w)", ErrUnavailable, err, gerr)
	case rec.State == store.StateDone && rec.Epoch == c.c.fence.Epoch && rec.Owner == c.c.fence.Owner:
		return res, nil
	case rec.Epoch != c.c.fence.Epoch || rec.Owner != c.c.fence.Owner:
		return res, fmt.Errorf("commit: %w", ErrFenced)
	}
	// Still ours and not done: nothing committed. Release is fenced on the
	// processing state, so it cannot undo a commit that lands late.
	g.release(ctx, c.c)
	return res, fmt.Errorf("%w: commit: %w", ErrUnavailable, err)
}

// Rollback rolls tx back and settles the claim as Fail does with err,
// which it returns: released, or held as unknown when err wraps
// ErrOutcomeUnknown (an effect outside the transaction may have happened).
func (c *TxClaim[TX]) Rollback(ctx context.Context, tx TX, err error) error {
	_ = c.ts.RollbackTx(ctx, tx)
	return c.Fail(ctx, err)
}
