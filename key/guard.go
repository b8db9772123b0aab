package key

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Defaults and bounds of Config.
const (
	DefaultLease     = 30 * time.Second
	DefaultRetention = 24 * time.Hour
	MaxLease         = 24 * time.Hour
	MaxRetention     = 366 * 24 * time.Hour
	// DefaultRecordTimeout is how long, by default, the guard keeps trying
	// to record an outcome that the store did not take (Config.RecordTimeout).
	DefaultRecordTimeout = time.Hour
	// cleanupTimeout bounds each store write made after the caller's context
	// has ended (release, unknown mark, completion): the claim must be
	// settled even when the client went away.
	cleanupTimeout = 5 * time.Second
)

// Config configures a Guard. A nil *Config means all defaults.
type Config struct {
	// Lease is how long a claim is held before another caller may take the
	// key over, measured on the store's clock. It must be longer than the
	// operation normally takes (the heartbeat extends it while the
	// operation runs) and at most Retention and MaxLease. Defaults to 30s.
	Lease time.Duration
	// Retention is how long a completed key replays its response; after it
	// the key is new again. At most MaxRetention. Defaults to 24h.
	Retention time.Duration
	// Heartbeat is how often the lease of a running operation is extended.
	// If an extension finds the claim lost (fenced), the operation's context
	// is cancelled with ErrFenced. Negative disables it. Defaults to Lease/3.
	Heartbeat time.Duration
	// UnknownHold is how long a claim stays held after its operation
	// reported an unknown outcome (MarkUnknown), from that moment: retries
	// get OutcomeUnknown until it ends, then the next one runs the operation again.
	// Set it well above the longest time the effect can still happen after
	// the caller gave up (an upstream that keeps working after its client's
	// timeout). At most MaxLease. Defaults to Lease.
	UnknownHold time.Duration
	// RecordTimeout is how long the guard keeps trying, in the background,
	// to record an outcome the store did not take: the response of an
	// operation that ran while the store was failing, or an unknown mark.
	// Meanwhile the key stays held (in this process at once; in the store
	// by lease extensions whenever it answers) and the first write that
	// reaches the store is the fenced completion, so a retry gets the
	// replay, never a second run. At most Retention. Defaults to
	// DefaultRecordTimeout (1h), or Retention if shorter.
	RecordTimeout time.Duration
	// WaitInFlight, when positive, is how long a duplicate waits for the
	// attempt in flight to settle before it is answered OutcomeInFlight:
	// when that attempt completes meanwhile, the duplicate gets its
	// replay, so a client's concurrent retry usually needs no second round
	// trip. In this process the duplicate wakes when the attempt settles;
	// across processes it reads the record at growing intervals (5 ms to
	// 100 ms). It never waits past its context. At most MaxLease. Defaults
	// to 0: a duplicate is answered OutcomeInFlight at once.
	WaitInFlight time.Duration
	// ReplayCacheBytes bounds an in-process cache of completed responses
	// that answers replays without a store round trip. A completed record
	// never changes until it expires, and a cached copy expires before it
	// does; a copy is served only to the same principal, operation, key and
	// fingerprint (another fingerprint asks the store, which answers the
	// conflict). Defaults to DefaultReplayCacheBytes (16 MiB); negative
	// turns it off.
	ReplayCacheBytes int64
	// Logger receives warnings about writes that failed after the operation
	// ran. Defaults to a logger that discards everything.
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Lease == 0 {
		out.Lease = DefaultLease
	}
	if out.Retention == 0 {
		out.Retention = DefaultRetention
	}
	if out.Heartbeat == 0 {
		out.Heartbeat = out.Lease / 3
	}
	if out.UnknownHold == 0 {
		out.UnknownHold = out.Lease
	}
	if out.RecordTimeout == 0 {
		out.RecordTimeout = min(DefaultRecordTimeout, out.Retention)
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.ReplayCacheBytes == 0 {
		out.ReplayCacheBytes = DefaultReplayCacheBytes
	}
	return out
}

func (c *Config) validate() error {
	switch {
	case c.Lease < time.Millisecond || c.Lease > MaxLease:
		return fmt.Errorf("%w: Config.Lease %v out of range [1ms, %v]", ErrBadConfig, c.Lease, MaxLease)
	case c.Retention < c.Lease || c.Retention > MaxRetention:
		return fmt.Errorf("%w: Config.Retention %v out of range [Lease=%v, %v]", ErrBadConfig, c.Retention, c.Lease, MaxRetention)
	case c.Heartbeat > 0 && c.Heartbeat >= c.Lease:
		return fmt.Errorf("%w: Config.Heartbeat %v must be shorter than Lease %v", ErrBadConfig, c.Heartbeat, c.Lease)
	case c.UnknownHold < time.Millisecond || c.UnknownHold > MaxLease:
		return fmt.Errorf("%w: Config.UnknownHold %v out of range [1ms, %v]", ErrBadConfig, c.UnknownHold, MaxLease)
	case c.WaitInFlight < 0 || c.WaitInFlight > MaxLease:
		return fmt.Errorf("%w: Config.WaitInFlight %v out of range [0, %v]", ErrBadConfig, c.WaitInFlight, MaxLease)
	case c.RecordTimeout < time.Millisecond || c.RecordTimeout > c.Retention:
		return fmt.Errorf("%w: Config.RecordTimeout %v out of range [1ms, Retention=%v]", ErrBadConfig, c.RecordTimeout, c.Retention)
	}
	return nil
}

// Request is one attempt at an operation.
type Request struct {
	// Scope names the operation and its caller.
	Scope Scope
	// Fingerprint identifies the request's content (FingerprintOf). Required.
	Fingerprint Fingerprint
	// FingerprintFor, if set, computes this request's fingerprint with
	// another algorithm version. When a stored fingerprint has another
	// version than Fingerprint, the guard compares against FingerprintFor
	// of that version, so that changing the algorithm never turns old keys
	// into conflicts.
	FingerprintFor func(version byte) (Fingerprint, bool)

	// tx is set by TxGuard.ClaimTx: the operation writes only in the
	// store's transaction that completes the claim
	// (store.ClaimParams.Transactional).
	tx bool
}

// Guard runs operations at most once per key and replays their results.
type Guard struct {
	store store.Store
	cfg   Config
	// local holds the keys this process holds: operations running, and
	// outcomes waiting to be recorded (see record.go).
	local localClaims
	// replays caches completed responses (nil when off).
	replays *replayCache
}

// New returns a guard over s.
func New(s store.Store, cfg *Config) (*Guard, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Guard{store: s, cfg: c, replays: newReplayCache(c.ReplayCacheBytes)}, nil
}

// claim is a granted claim.
type claim struct {
	fence store.Fence
	// held is this process's entry for the key while it is held here.
	held *held
}

// Do runs fn at most once for req's scope and fingerprint, and replays its
// response to later calls, until the retention ends.
//
// Outcomes and errors:
//   - OutcomeExecuted, nil: fn ran now and its response was stored.
//   - OutcomeReplayed, nil: a stored response is returned; fn did not run.
//   - OutcomeInFlight, ErrInFlight; OutcomeUnknown, ErrOutcomeUnknown: someone holds the
//     key; retry after Result.RetryAfter.
//   - OutcomeConflict, ErrConflict: same key, other fingerprint.
//   - OutcomeUnavailable, ErrUnavailable: the store did not confirm a claim; fn
//     did not run.
//   - OutcomeExecuted, fn's error: fn failed; the claim was released so a retry may
//     run it again (or kept until the lease ends if the error wraps
//     ErrOutcomeUnknown).
//   - OutcomeExecuted, another error: fn succeeded but its response could not be
//     recorded (ErrFenced: the claim was lost meanwhile; ErrUnavailable: the
//     store failed). Result.Response still holds fn's response.
//
// If fn panics, the claim is released and the panic continues.
func (g *Guard) Do(ctx context.Context, req Request, fn func(ctx context.Context) ([]byte, error)) (Result, error) {
	cl, res, err := g.Claim(ctx, req)
	if cl == nil {
		return res, err
	}
	resp, ferr := cl.run(fn)
	if ferr != nil {
		return res, cl.Fail(ctx, ferr)
	}
	// The operation ran: Complete records it even if the caller's context
	// has ended (a client that went away), or the key would stay held and
	// the next retry after the lease would run the operation again.
	return cl.Complete(ctx, resp)
}

// claim asks the store for the key. It returns a non-nil claim when the
// caller now holds the key, and otherwise the result and error to return.
// A duplicate of an attempt in flight waits up to Config.WaitInFlight for
// it to settle, and asks again.
func (g *Guard) claim(ctx context.Context, req Request) (*claim, Result, error) {
	c, res, err := g.claimOnce(ctx, req)
	if g.cfg.WaitInFlight <= 0 || res.Outcome != OutcomeInFlight {
		return c, res, err
	}
	deadline := time.Now().Add(g.cfg.WaitInFlight)
	k := req.Scope.StoreKey()
	for pause := 5 * time.Millisecond; time.Now().Before(deadline); pause = min(2*pause, 100*time.Millisecond) {
		wait := min(pause, time.Until(deadline))
		var settled <-chan struct{}
		if v, ok := g.local.m.Load(k); ok {
			settled = v.(*held).finished // held here: woken when it settles
			wait = time.Until(deadline)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return c, res, err
		case <-settled:
		case <-t.C:
		}
		t.Stop()
		if c, res, err = g.claimOnce(ctx, req); res.Outcome != OutcomeInFlight {
			return c, res, err
		}
	}
	return c, res, err
}

// claimOnce is one claim's round: the cache, this process's holds, the
// store.
func (g *Guard) claimOnce(ctx context.Context, req Request) (*claim, Result, error) {
	if err := req.Scope.Validate(); err != nil {
		return nil, Result{}, err
	}
	if len(req.Fingerprint) == 0 {
		return nil, Result{}, fmt.Errorf("%w: empty fingerprint", ErrInvalidRequest)
	}
	p := store.ClaimParams{
		Key:         req.Scope.StoreKey(),
		Fingerprint: req.Fingerprint,
		Owner:       rand.Text(),
		Lease:       g.cfg.Lease,
		Retention:   g.cfg.Retention,
		// A transactional operation's claim becomes durable with the
		// commit of its completion, at the latest: the store may skip the
		// claim's own sync.
		Transactional: req.tx,
	}
	t0 := time.Now()
	if e, ok := g.replays.get(p.Key, req.Fingerprint, t0); ok {
		return nil, Result{Outcome: OutcomeReplayed, Response: e.response, Epoch: e.epoch}, nil
	}
	if res, err, decided := g.checkLocal(ctx, p.Key, req.Fingerprint); decided {
		return nil, res, err
	}
	cr, err := g.store.Claim(ctx, p)
	if err != nil {
		// The claim may have been written although we saw an error. Our
		// owner token tells whether the record is ours.
		rec, gerr := g.store.Get(ctx, p.Key)
		if gerr != nil || rec.State != store.StateProcessing || rec.Owner != p.Owner {
			return nil, Result{Outcome: OutcomeUnavailable}, fmt.Errorf("%w: claim: %w", ErrUnavailable, err)
		}
		cr = store.ClaimResult{Claimed: true, Record: rec}
	}
	rec := cr.Record
	if cr.Claimed {
		g.replays.forget(p.Key) // the record it copied is gone
		c := &claim{fence: store.Fence{Key: p.Key, Epoch: rec.Epoch, Owner: p.Owner}}
		g.local.hold(c, req.Fingerprint, rec.LeaseUntil.Sub(cr.Now))
		return c, Result{Outcome: OutcomeExecuted, Epoch: rec.Epoch}, nil
	}
	if !bytes.Equal(rec.Fingerprint, req.Fingerprint) {
		v := Fingerprint(rec.Fingerprint).Version()
		if req.FingerprintFor != nil && v != req.Fingerprint.Version() {
			if alt, ok := req.FingerprintFor(v); ok && bytes.Equal(alt, rec.Fingerprint) {
				return g.claimOnce(ctx, Request{Scope: req.Scope, Fingerprint: alt, tx: req.tx})
			}
		}
		return nil, Result{Outcome: OutcomeConflict, Epoch: rec.Epoch}, ErrConflict
	}
	switch rec.State {
	case store.StateDone:
		// Expires, in this process's time, no later than the record: the
		// store's clock read cr.Now after t0.
		g.replays.put(p.Key, rec.Fingerprint, rec.Response, rec.Epoch, t0.Add(rec.ExpiresAt.Sub(cr.Now)))
		return nil, Result{Outcome: OutcomeReplayed, Response: rec.Response, Epoch: rec.Epoch}, nil
	case store.StateProcessing:
		res := Result{Outcome: OutcomeInFlight, Epoch: rec.Epoch, RetryAfter: max(rec.LeaseUntil.Sub(cr.Now), 0)}
		if rec.Unknown {
			res.Outcome = OutcomeUnknown
			return nil, res, ErrOutcomeUnknown
		}
		return nil, res, ErrInFlight
	}
	return nil, Result{Outcome: OutcomeUnavailable}, fmt.Errorf("%w: claim refused in state %v", ErrUnavailable, rec.State)
}

// heartbeat extends c's lease every Config.Heartbeat until stop is called.
// If the claim is lost, the returned context is cancelled with ErrFenced.
func (g *Guard) heartbeat(ctx context.Context, c *claim) (context.Context, func()) {
	if g.cfg.Heartbeat < 0 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(g.cfg.Heartbeat, func() {
		_, err := g.store.Extend(ctx, c.fence, g.cfg.Lease)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case stopped:
			return
		case errors.Is(err, store.ErrFenced):
			cancel(ErrFenced)
			return
		case err != nil:
			g.cfg.Logger.WarnContext(ctx, "key: lease extension failed", "epoch", c.fence.Epoch, "err", err)
		default:
			c.extended(g.cfg.Lease)
		}
		t.Reset(g.cfg.Heartbeat)
	})
	return ctx, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(nil)
	}
}

// fail handles fn's error: release the claim so a retry may run, or keep it
// for UnknownHold when the outcome is unknown. It returns ferr.
func (g *Guard) fail(ctx context.Context, c *claim, ferr error) error {
	if !errors.Is(ferr, ErrOutcomeUnknown) {
		g.release(ctx, c)
		return ferr
	}
	// The effect may have happened: hold the key for UnknownHold (a lease
	// extension), then mark it unknown. If the store does not take both,
	// keep trying in the background; the process holds the key meanwhile.
	mark := func(ctx context.Context) error {
		if _, err := g.store.Extend(ctx, c.fence, g.cfg.UnknownHold); err != nil {
			return err
		}
		return g.store.MarkUnknown(ctx, c.fence)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := mark(wctx); err != nil && !errors.Is(err, store.ErrFenced) {
		g.cfg.Logger.WarnContext(ctx, "key: marking outcome unknown failed; still trying, the key stays held",
			"epoch", c.fence.Epoch, "err", err)
		g.keepRecording(c, "mark unknown", mark, g.cfg.UnknownHold)
		return ferr
	}
	g.local.drop(c)
	return ferr
}

// release hands the claim back, even if ctx has ended. If the store does not
// take it, the key frees when its lease ends: nothing happened, so nothing
// needs recording.
func (g *Guard) release(ctx context.Context, c *claim) {
	defer g.local.drop(c)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := g.store.Release(ctx, c.fence); err != nil {
		g.cfg.Logger.WarnContext(ctx, "key: release failed; the key frees when its lease ends",
			"epoch", c.fence.Epoch, "err", err)
	}
}

// resolveComplete decides, by reading, whether a completion whose answer was
// an error took effect, and retries it once if it certainly did not.
func (g *Guard) resolveComplete(ctx context.Context, p store.CompleteParams, cerr error) error {
	for range 2 {
		rec, err := g.store.Get(ctx, p.Key)
		switch {
		case err != nil:
			return fmt.Errorf("%w: complete: %w (and reading back: %w)", ErrUnavailable, cerr, err)
		case rec.Epoch != p.Epoch || rec.Owner != p.Owner:
			return fmt.Errorf("complete: %w", ErrFenced)
		case rec.State == store.StateDone:
			return nil
		}
		// Still ours and processing: the completion did not apply.
		if cerr = g.store.Complete(ctx, p); cerr == nil {
			return nil
		} else if errors.Is(cerr, store.ErrFenced) {
			return fmt.Errorf("complete: %w", ErrFenced)
		}
	}
	return fmt.Errorf("%w: complete: %w", ErrUnavailable, cerr)
}
