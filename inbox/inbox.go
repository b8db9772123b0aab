package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalid marks an apply error as permanent: the event can never be
	// applied as it is (bad payload, unknown type, a business rule it
	// breaks). The event is dead-lettered at once and acknowledged. Wrap an
	// error in it with Invalid.
	ErrInvalid = errors.New("inbox: invalid event")

	// ErrUnavailable is returned (wrapping the store's error) when the store
	// could not answer or the commit's outcome is unknown. Nothing may be
	// acknowledged: the sender retries, and the inbox row settles the
	// redelivery either way.
	ErrUnavailable = errors.New("inbox: store unavailable")

	// ErrBackpressure is returned when a delta event would park more than
	// Config.MaxParked sequences on its stream. Nothing was recorded: do not
	// acknowledge it; the sender retries once the gap fills or is
	// compensated.
	ErrBackpressure = errors.New("inbox: too many events parked on the stream")

	// ErrBadConfig is returned by New for an invalid Config.
	ErrBadConfig = errors.New("inbox: invalid config")
)

// Invalid wraps err so that errors.Is(err, ErrInvalid) holds: return it from
// an ApplyFunc for an event that no retry can fix.
func Invalid(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// Outcome says what happened to an event. Every outcome is final and may be
// acknowledged: the transaction that produced it has committed.
type Outcome uint8

const (
	// OutcomeProcessed: the event was applied (with any parked events it
	// released), in the transaction that recorded it.
	OutcomeProcessed Outcome = iota + 1
	// OutcomeDuplicate: the event ID was already in the inbox, or its sequence was
	// already applied or parked; nothing ran.
	OutcomeDuplicate
	// OutcomeStale: a snapshot older than the one applied; dropped.
	OutcomeStale
	// OutcomeSuperseded: the event belongs to an execution older than the one the
	// stream follows; dropped.
	OutcomeSuperseded
	// OutcomeParked: a delta after a gap, stored until the gap fills.
	OutcomeParked
	// OutcomeDeadLettered: the event could not be applied (invalid, or a transient
	// failure outlasted the retry budget) and was stored as a dead letter.
	OutcomeDeadLettered
)

// String returns the outcome's name, as used in metrics and responses.
func (o Outcome) String() string {
	switch o {
	case OutcomeProcessed:
		return "processed"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomeStale:
		return "stale"
	case OutcomeSuperseded:
		return "superseded"
	case OutcomeParked:
		return "parked"
	case OutcomeDeadLettered:
		return "dead_lettered"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Result is what Process and Requeue report once their transaction has
// committed.
type Result struct {
	Outcome Outcome
	// Applied are the sequences applied in the transaction, in order: the
	// event's own and the parked ones it released (OutcomeProcessed); empty in
	// dedup-only mode.
	Applied []int64
	// Gap is the run of sequences the event revealed as missing, or nil.
	Gap *order.Gap
	// Reset is true when the event started a newer execution of its stream.
	Reset bool
	// DeadLetters are the IDs of the dead letters written: the event's own
	// (OutcomeDeadLettered), or a released parked event's that failed.
	DeadLetters []int64
	// Reason says why the event was dead-lettered or counted as a
	// duplicate of a dead letter.
	Reason string
	// Attempts is how many times the event was applied in this call.
	Attempts int

	mode    order.Mode // the stream's mode, for Hooks.OnGaps
	opened  int        // gaps recorded, for Hooks.OnGaps
	housekp bool       // a compensation, not an event: not counted as one
}

// ApplyFunc applies one event's business change in tx. It must only write
// through tx (so that its effect commits with the inbox row, or not at
// all). Return an error wrapped by Invalid for an event no retry can fix; any
// other error is transient and retried (the whole transaction) up to
// Config.MaxAttempts, then dead-lettered. A panic counts as a transient
// error.
type ApplyFunc[TX any] func(ctx context.Context, tx TX, ev event.Event) error

// CompensateFunc brings the facts of a delta gap into the projection by
// other means (refetch the missing events, or the source's state as of
// gap.To), in tx. Returning nil vouches for the facts: the stream moves past
// the gap and applies the parked events behind it.
type CompensateFunc[TX any] func(ctx context.Context, tx TX, stream store.StreamKey, gap order.Gap) error

// Config configures a Processor. A nil *Config means all defaults.
type Config struct {
	// Mode is how events are ordered per stream: order.ModeSnapshot,
	// order.ModeDelta, or 0 (the default) for dedup only, where the sequence is
	// not used.
	Mode order.Mode
	// ModeOf, when set, chooses the mode per event (for example by type)
	// and overrides Mode. Events of one stream must keep one mode.
	ModeOf func(ev event.Event) order.Mode
	// ExecutionRank ranks the execution that produced ev among the runs of
	// its stream's object (1 for the first run, 2 for the first rerun...),
	// from the caller's records. Defaults to 1 for every event: then every
	// event of a stream must carry the same executionid (or none), and one
	// from another execution is dead-lettered as a conflict.
	ExecutionRank func(ev event.Event) int64
	// RecordFirst makes an event of no order (dedup only) be recorded
	// before it is applied, on every store. By default, on a store that
	// can send the inbox row with the COMMIT (store.InboxCommitRecorder:
	// PostgreSQL), such an event is applied first and recorded at the
	// commit, one round trip less per event: a duplicate then runs the
	// apply function, which is rolled back with the transaction (nothing
	// of it commits), before it is answered; when apply fails on it (an
	// insert that cannot run twice), the event is recorded first and
	// answered at once, without a retry's backoff. Set RecordFirst when
	// apply is costly and duplicates come in floods. During a rollout that
	// changes it, two processors of different settings handling one event
	// at once may deadlock (PostgreSQL aborts one, whose event is
	// answered unavailable and redelivered). Ordered events are recorded
	// first, except the next event in order on a stream the processor
	// remembers (StreamCache), whose record goes out with the apply's
	// first statement. Defaults to false, and to true when Batch is on.
	RecordFirst bool
	// MaxParked bounds the parked sequences per delta stream (see
	// order.Config). Defaults to order.DefaultMaxParked (1024).
	MaxParked int
	// StreamCache is how many streams' order state the processor
	// remembers from the transactions it committed, on a store that can
	// compare and set a stream (store.InboxStreamSetter: PostgreSQL, and
	// memstore). An ordered event on a remembered stream, when it is the
	// next in order (applied, nothing parked, no gap), is decided before
	// its transaction and applied at once: its record and its stream's new
	// state go out in one statement, with the apply's first statement (or
	// the commit), so that the stream is neither locked nor written on its
	// own and the event costs two round trips where it costs three. The
	// store sets the stream only when it still holds the remembered state,
	// and fails the transaction otherwise (before any of the apply's
	// statements runs): the event is then decided again under the stream's
	// lock, a transaction more, after which the processor decides that
	// stream's next 8 events under its lock before it guesses again, so
	// that a stream whose events alternate between processes costs about
	// what it does without the cache. The apply function's Go code may
	// thus run for an event that turns out recorded already (none of its
	// statements then runs), which the ApplyFunc contract (write only
	// through tx) makes harmless. Negative turns it off. Defaults to
	// DefaultStreamCache (4096).
	StreamCache int
	// Batch is how many events Process may record and apply in one
	// transaction: group commit for the inbox. Events that arrive while
	// others are being processed wait for the next batch (at most two run
	// at once); one that arrives with a leader free is taken at once. A
	// batch holds at most one event per subject (an ordered event's
	// stream; an event without a subject counts as its own), the next
	// waiting for a later batch in the order they came, and runs each
	// event's first attempt in the shared transaction, one after another in
	// the order of their subjects, as that event would run alone; it
	// commits only when every one of them succeeded: one commit, and one
	// sync, for all of them, each with the result it would have had in a
	// transaction of its own. When one of them fails (its apply, a
	// remembered stream state that no longer holds, a panic of a
	// callback) or the commit does, nothing of the batch commits and each
	// event is processed again alone: the one whose attempt failed goes on
	// from that attempt with its usual retries, and the others start again
	// (their apply functions may thus run once more than MaxAttempts). A
	// batch of several events is reported to Hooks.OnBatch. A batching
	// processor records an event of no order before it applies it, in a
	// batch or alone (RecordFirst is set), so that a redelivery is
	// answered as a duplicate without failing its batch; turning Batch on
	// or off during a rollout is then a change of RecordFirst, with its
	// caveat.
	//
	// Turn it on when events arrive concurrently and each apply's
	// transaction is short: with 16 events in flight through the webhook
	// endpoint, an ordered event took about a quarter less time on
	// PostgreSQL and a third of the time on SQLite, an event of no order
	// under a third on SQLite and no less on PostgreSQL, where it sends
	// its inbox row with the commit unbatched (docs/performance.md).
	// Every transaction takes idem's own rows, and the rows an apply locks
	// for its event's subject only, subject by subject in one order, so
	// these never deadlock. Leave it off when an apply locks rows shared
	// across subjects (a counter, a parent row): two batches, or a batch
	// and an event processed alone, may then lock them in opposite orders,
	// and the database breaks the deadlock only after its timeout
	// (PostgreSQL's deadlock_timeout, 1 s by default) by failing one
	// side's statement: a transient failure of the event whose apply met
	// it (retried after a backoff), as without batching, the rest of its
	// batch running again alone. 0 or 1 (the default) processes each
	// event in a transaction of its own.
	Batch int
	// MaxAttempts is how many times a transient apply failure is tried in
	// one Process call before the event is dead-lettered. Defaults to 3.
	MaxAttempts int
	// Backoff is the wait before the second attempt; it doubles for each
	// further one (with jitter), up to 2 s. Defaults to 50 ms.
	Backoff time.Duration
	// Retention is how long inbox rows (and gap records) are kept: a
	// redelivery within it is a duplicate. It must cover the sender's retry
	// horizon and be at least twice the signature tolerance. Defaults to 72
	// hours.
	Retention time.Duration
	// GapDeadline is how long a delta gap may stay open before the
	// compensator handles it. Defaults to 5 minutes.
	GapDeadline time.Duration
	// CompensateInterval is how often RunCompensator looks for gaps past
	// GapDeadline. Defaults to GapDeadline/5, at least a second.
	CompensateInterval time.Duration
	// SweepInterval is how often RunSweeper deletes what is past
	// Retention. Defaults to DefaultSweepInterval (1 h).
	SweepInterval time.Duration
	// Now is the clock for received times and gaps. Defaults to time.Now.
	Now func() time.Time
	// Logger receives gaps, dead letters and retries. Defaults to a logger
	// that discards everything, as every idem package's does.
	Logger *slog.Logger
	// Hooks are told of outcomes, gaps, dead letters, retries and
	// refusals, for metrics (prom.Inbox makes Prometheus ones). Defaults to
	// none.
	Hooks Hooks
}

// Defaults.
const (
	DefaultMaxAttempts = 3
	DefaultBackoff     = 50 * time.Millisecond
	DefaultRetention   = 72 * time.Hour
	DefaultGapDeadline = 5 * time.Minute
	// DefaultSweepInterval is the default Config.SweepInterval.
	DefaultSweepInterval = time.Hour
	maxBackoff           = 2 * time.Second
)

// Processor is the inbox and order component: it records each event in the
// caller's store transaction together with its business change, decides its
// order, parks, releases, dead-letters and compensates. Safe for concurrent
// use.
type Processor[TX any] struct {
	s     store.InboxStore[TX]
	apply ApplyFunc[TX]
	cfg   Config
	ocfg  *order.Config
	log   *slog.Logger
	hooks Hooks
	// setter is s when it can compare and set a stream, else nil; streams
	// remembers the order state of the streams committed last
	// (Config.StreamCache), nil when off or without a setter.
	setter  store.InboxStreamSetter[TX]
	streams *streamCache
	// batch holds the events waiting for a batch (Config.Batch), nil when
	// batching is off.
	batch *batcher
}

// New returns a Processor over s that applies events with apply.
func New[TX any](s store.InboxStore[TX], apply ApplyFunc[TX], cfg *Config) (*Processor[TX], error) {
	if s == nil || apply == nil {
		return nil, fmt.Errorf("%w: store and apply function are required", ErrBadConfig)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	p := &Processor[TX]{s: s, apply: apply, cfg: c, ocfg: &order.Config{MaxParked: c.MaxParked}, log: c.Logger, hooks: c.Hooks,
		batch: newBatcher(c.Batch)}
	if p.setter, _ = s.(store.InboxStreamSetter[TX]); p.setter != nil {
		p.streams = newStreamCache(c.StreamCache)
	}
	return p, nil
}

// validate refuses a Config out of range; nil is all defaults.
func (c *Config) validate() error {
	if c == nil {
		return nil
	}
	switch {
	case c.Mode != 0 && c.Mode != order.ModeSnapshot && c.Mode != order.ModeDelta:
		return fmt.Errorf("%w: Mode %v", ErrBadConfig, c.Mode)
	case c.MaxParked < 0, c.MaxAttempts < 0, c.Backoff < 0, c.Retention < 0, c.GapDeadline < 0,
		c.CompensateInterval < 0, c.SweepInterval < 0, c.Batch < 0:
		return fmt.Errorf("%w: negative MaxParked, MaxAttempts, Backoff, Retention, GapDeadline, CompensateInterval, SweepInterval or Batch", ErrBadConfig)
	}
	return nil
}

// withDefaults returns a copy of c with every unset field at its default.
func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.Batch > 1 {
		// A batch records first (a redelivery must not fail it), and so
		// does every run alone of a batching processor, so that two
		// deliveries of one event never take its inbox row and its
		// business rows in opposite orders.
		out.RecordFirst = true
	}
	if out.StreamCache == 0 {
		out.StreamCache = DefaultStreamCache
	}
	if out.Backoff == 0 {
		out.Backoff = DefaultBackoff
	}
	if out.Retention == 0 {
		out.Retention = DefaultRetention
	}
	if out.GapDeadline == 0 {
		out.GapDeadline = DefaultGapDeadline
	}
	if out.CompensateInterval == 0 {
		out.CompensateInterval = max(out.GapDeadline/5, time.Second)
	}
	if out.SweepInterval == 0 {
		out.SweepInterval = DefaultSweepInterval
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.ExecutionRank == nil {
		out.ExecutionRank = func(event.Event) int64 { return 1 }
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.Hooks = out.Hooks.withDefaults()
	return out
}

// Config returns the configuration in effect, with defaults filled in.
func (p *Processor[TX]) Config() Config { return p.cfg }

// Process records ev and applies it in one transaction, retrying transient
// apply failures with backoff. It returns only after that transaction has
// committed (then the Result may be acknowledged) or with an error (then
// nothing may be acknowledged: ErrUnavailable, ErrBackpressure, the
// context's error).
func (p *Processor[TX]) Process(ctx context.Context, ev event.Event) (Result, error) {
	if p.batch != nil {
		return p.processBatched(ctx, ev)
	}
	return p.run(ctx, ev, nil)
}

// Requeue takes dead letter id and processes its event again, in the
// transaction that removes it: applied, parked, or dead-lettered again
// (with a new ID and its attempts added up). An event that was handled by
// other means meanwhile (its inbox row is no longer dead) is not run:
// OutcomeDuplicate. Returns store.ErrNotFound (wrapped) for an unknown id.
func (p *Processor[TX]) Requeue(ctx context.Context, id int64) (Result, error) {
	return p.run(ctx, event.Event{}, &id)
}

// errTransient carries a transient apply failure out of the transaction so
// that it rolls back and run tries again.
type errTransient struct{ err error }

func (e errTransient) Error() string { return e.err.Error() }
func (e errTransient) Unwrap() error { return e.err }

// errDoomed carries an event that failed for good out of the transaction:
// it rolls back (undoing the failed apply's writes, whatever state the
// transaction is in) and runs again at once with the event dead-lettered
// instead of applied. This costs a second transaction only when an event
// fails, where a savepoint around every apply would cost two statements on
// every event.
type errDoomed struct {
	key  store.EventKey
	doom doom
}

func (e errDoomed) Error() string { return "inbox: event " + e.key.ID + " failed: " + e.doom.reason }

// doom is why an event is dead-lettered in the next run, and after how
// many attempts.
type doom struct {
	reason   string
	attempts int
}

// try is one run of a transaction: its attempt number, whether it is the
// last, and the events known to fail for good.
type try struct {
	n      int
	last   bool
	doomed map[store.EventKey]doom
	// appliedFirst is set when an attempt applied an event of no order
	// before recording it (store.InboxCommitRecorder); recordFirst once
	// such an attempt failed, in its apply or at its commit: the event may
	// be a duplicate (recorded by another delivery) whose apply cannot run
	// twice, so the same attempt runs again recording first, which answers
	// a duplicate with its status, or meets the apply's failure and treats
	// it as usual.
	appliedFirst, recordFirst bool
	// applyErr is the failure of the apply in the attempt that applied
	// first: when recording first shows the event is new, it is that
	// attempt's outcome, and apply does not run a second time for it.
	applyErr error
	// known is the stream's state as this attempt leaves it, read or
	// written under the stream's lock: once the attempt commits, the
	// processor remembers it (Config.StreamCache). prev is what the
	// processor remembered of the stream when the attempt began.
	known, prev *knownStream
	// failed is set when the attempt decided its event on prev and
	// queued the stream's compare and set (setStreamTx): it reports that
	// statement's failure once it went out. noGuess is set once such a
	// guess failed (the stream had moved on, the event was recorded, or
	// the pipeline it went out with was refused), so that the same attempt
	// runs again deciding under the stream's lock.
	failed  func() error
	noGuess bool
}

// guessFailed reports whether the attempt's guess went out and failed:
// whatever the failure, the attempt committed nothing and is run again
// under the stream's lock, once, where an error of the apply's own is
// met again and treated as usual.
func (t *try) guessFailed() bool {
	return !t.noGuess && t.failed != nil && t.failed() != nil
}

// errRecordFirst is an apply that failed in an attempt that applied
// before recording: retry runs the attempt again recording first, with no
// backoff. A duplicate is then answered; a new event fails that attempt
// with the apply's error (try.applyErr), without running apply again.
type errRecordFirst struct{ err error }

func (e errRecordFirst) Error() string { return e.err.Error() }
func (e errRecordFirst) Unwrap() error { return e.err }

func (p *Processor[TX]) run(ctx context.Context, ev event.Event, requeue *int64) (Result, error) {
	return p.runAfter(ctx, ev, requeue, nil)
}

// firstTry is an event's first attempt, run in a batch that did not
// commit because of it: its try and its error (batch.go).
type firstTry struct {
	t   *try
	err error
}

// runAfter is run, whose first attempt, when first is set, already ran
// (in a batch) and failed with first.err: retry goes on from it as from
// an attempt of its own.
func (p *Processor[TX]) runAfter(ctx context.Context, ev event.Event, requeue *int64, first *firstTry) (Result, error) {
	return p.retry(ctx, ev, first, func(ctx context.Context, tx TX, t *try) (Result, error) {
		e := ev
		var prior *store.DeadLetter
		if requeue != nil {
			d, wasDead, err := p.s.TakeDeadLetterTx(ctx, tx, *requeue)
			if err != nil {
				return Result{}, err
			}
			if !wasDead {
				return Result{Outcome: OutcomeDuplicate, Reason: "the event was handled after it was dead-lettered"}, nil
			}
			if e, err = Decode(d.Event); err != nil {
				return Result{}, fmt.Errorf("%w: dead letter %d: %w", store.ErrCorrupt, d.ID, err)
			}
			prior = &d
		}
		return p.processTx(ctx, tx, e, t, prior)
	})
}

// retry runs attempt in a transaction, again (after a backoff) while it
// fails with a transient apply error and attempts remain.
// When first is set, its attempt ran already and failed: its error is the
// first attempt's outcome.
func (p *Processor[TX]) retry(ctx context.Context, ev event.Event, first *firstTry, attempt func(ctx context.Context, tx TX, t *try) (Result, error)) (Result, error) {
	t := &try{doomed: map[store.EventKey]doom{}}
	if first != nil {
		t = first.t
	}
	for n := 1; ; n++ {
		t.n, t.last = n, n >= p.cfg.MaxAttempts
		var (
			res Result
			err error
		)
		if first != nil {
			err, first = first.err, nil
		} else {
			t.known, t.prev, t.failed = nil, nil, nil
			err = p.s.InTx(ctx, func(ctx context.Context, tx TX) error {
				var err error
				res, err = attempt(ctx, tx, t)
				return err
			})
		}
		if err == nil {
			res.Attempts = n
			if t.known != nil {
				p.streams.put(t.known.after(t.prev, t.noGuess))
			}
			p.hooks.committed(res)
			return res, nil
		}
		var (
			te errTransient
			ed errDoomed
		)
		var rf errRecordFirst
		switch {
		case t.guessFailed():
			// The event was decided on a remembered stream state that the
			// store no longer holds, or it was recorded before, or the
			// driver refused the pipeline the statement went out with
			// (which an apply's statement of its own may cause): nothing
			// of the attempt committed. The same attempt again, under the
			// stream's lock, decides it on what the store holds.
			t.noGuess = true
			p.streams.missed(t.prev)
			n--
			continue
		case t.appliedFirst && !t.recordFirst && (errors.As(err, &rf) || errors.Is(err, store.ErrDuplicate)):
			// Applied before it was recorded, and rolled back: the apply
			// failed (perhaps on a duplicate's second run), or the commit
			// found the event recorded by another delivery. The same
			// attempt again, recording first, tells which.
			t.recordFirst = true
			n--
			continue
		case errors.As(err, &ed):
			if _, again := t.doomed[ed.key]; again {
				return Result{}, fmt.Errorf("%w: event %v doomed twice", store.ErrCorrupt, ed.key)
			}
			t.doomed[ed.key] = ed.doom
			n-- // the same attempt, with the event dead-lettered this time
			continue
		case errors.As(err, &te) && !t.last:
			wait := p.backoff(n)
			p.hooks.OnRetry()
			p.log.WarnContext(ctx, "inbox: transient apply failure, retrying", "source", ev.Source, "id", ev.ID, "attempt", n, "retry_in", wait, "error", te.err)
			select {
			case <-ctx.Done():
				return Result{}, fmt.Errorf("inbox: %w (last apply error: %w)", ctx.Err(), te.err)
			case <-time.After(wait):
			}
		case errors.Is(err, ErrBackpressure):
			p.hooks.OnBackpressure()
			return Result{}, err
		case errors.Is(err, store.ErrCorrupt), errors.Is(err, store.ErrNotFound):
			return Result{}, err
		case ctx.Err() != nil:
			return Result{}, fmt.Errorf("inbox: %w", ctx.Err())
		default:
			p.hooks.OnUnavailable()
			return Result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
}

func (p *Processor[TX]) backoff(attempt int) time.Duration {
	d := p.cfg.Backoff << (attempt - 1)
	if d <= 0 || d > maxBackoff {
		d = maxBackoff
	}
	// Full jitter on the upper half keeps retries of one burst apart.
	return d/2 + rand.N(d/2+1)
}

// processTx is one attempt, inside tx.
func (p *Processor[TX]) processTx(ctx context.Context, tx TX, ev event.Event, t *try, prior *store.DeadLetter) (Result, error) {
	now := p.cfg.Now()
	key := store.EventKey{Source: ev.Source, ID: ev.ID}
	mode := p.cfg.Mode
	if p.cfg.ModeOf != nil {
		mode = p.cfg.ModeOf(ev)
	}
	sk := store.StreamKey{Source: ev.Source, Subject: ev.Subject}
	if rec, ok := p.s.(store.InboxCommitRecorder[TX]); ok && mode == 0 && prior == nil && !t.recordFirst && !p.cfg.RecordFirst {
		if _, doomed := t.doomed[key]; !doomed {
			// Dedup only: apply first, and record the event with the
			// commit, in its round trip. An event recorded before fails
			// the commit (store.ErrDuplicate), rolling the apply back, and
			// retry runs this attempt again recording first.
			t.appliedFirst = true
			if _, _, err := p.applyOrDead(ctx, tx, ev, t, nil, now); err != nil {
				t.applyErr = err
				return Result{}, errRecordFirst{err}
			}
			if err := rec.RecordEventAtCommitTx(ctx, tx, key, now); err != nil {
				return Result{}, err
			}
			return Result{Outcome: OutcomeProcessed}, nil
		}
	}
	var in order.Incoming
	if mode != 0 {
		in = p.incoming(ev, now)
		t.prev, _ = p.streams.get(sk)
	}
	if ks := t.prev; ks != nil && ks.skip == 0 && prior == nil && len(t.doomed) == 0 && !t.noGuess {
		if d, err := order.Decide(mode, ks.state, in, p.ocfg); err == nil && inOrder(d) {
			return p.setStreamTx(ctx, tx, ev, t, mode, sk, ks, d, now)
		}
	}
	var status store.EventStatus
	var inserted bool
	var raw []byte
	var err error
	pl, pipelined := p.s.(store.InboxPipeliner[TX])
	if pipelined = pipelined && mode != 0; pipelined {
		// Ordered: the record and the stream's lock in one round trip.
		status, inserted, raw, err = pl.RecordEventLockStreamTx(ctx, tx, key, now, sk)
	} else {
		status, inserted, err = p.s.RecordEventTx(ctx, tx, key, now)
	}
	if err != nil {
		return Result{}, err
	}
	if !inserted {
		return duplicateOf(status), nil
	}
	if mode == 0 {
		if err := t.applyErr; err != nil {
			// New after all: the apply that failed when applied first is
			// this attempt's (retry backs off, or dead-letters it).
			t.applyErr = nil
			return Result{}, err
		}
		id, reason, err := p.applyOrDead(ctx, tx, ev, t, prior, now)
		if err != nil || id == 0 {
			return Result{Outcome: OutcomeProcessed}, err
		}
		return Result{Outcome: OutcomeDeadLettered, DeadLetters: []int64{id}, Reason: reason}, nil
	}

	if !pipelined {
		if raw, err = p.s.LockStreamTx(ctx, tx, sk); err != nil {
			return Result{}, err
		}
	}
	return p.orderedTx(ctx, tx, ev, t, prior, now, mode, sk, in, raw)
}

// duplicateOf is the result of an event whose inbox row was there, with
// status.
func duplicateOf(status store.EventStatus) Result {
	r := Result{Outcome: OutcomeDuplicate}
	if status == store.EventDead {
		r.Reason = "the event was dead-lettered earlier"
	}
	return r
}

// incoming is ev as package order sees it, received at now.
func (p *Processor[TX]) incoming(ev event.Event, now time.Time) order.Incoming {
	exec := ev.ExecutionID
	if exec == "" {
		exec = "-"
	}
	return order.Incoming{Execution: exec, ExecutionSeq: p.cfg.ExecutionRank(ev), Sequence: ev.Sequence, At: now}
}

// inOrder reports whether d applies its event alone and in order: no
// newer execution, no gap, nothing released, nothing parked after it (so
// nothing before it either, and no open gap: order.Stream's invariants).
// Such a decision changes the stream's state and nothing else of it, which
// setStreamTx can store with the event's record.
func inOrder(d order.Decision) bool {
	return d.Action == order.ActionApply && !d.Reset && d.Gap == nil && len(d.Released) == 0 && len(d.Next.Parked) == 0
}

// setStreamTx applies ev, decided as d on ks, the state this processor
// committed its stream with last (d is in order: inOrder), and queues its
// record and the stream's compare and set to d.Next to go out with the
// apply's first statement or the commit (store.InboxStreamSetter): the
// stream's lock is taken ahead of the apply's writes, as on the locked
// path, and neither costs a round trip of its own. When the store no
// longer holds ks, or holds ev's record, that statement fails and aborts
// the transaction, whatever apply made of the failure, and retry runs the
// attempt again under the stream's lock. Nothing is doomed in this call
// (the caller checks): an apply that fails rolls the transaction back,
// and retry runs the attempt again.
func (p *Processor[TX]) setStreamTx(ctx context.Context, tx TX, ev event.Event, t *try, mode order.Mode, sk store.StreamKey, ks *knownStream, d order.Decision, now time.Time) (Result, error) {
	next, err := json.Marshal(d.Next)
	if err != nil {
		return Result{}, err
	}
	key := store.EventKey{Source: ev.Source, ID: ev.ID}
	failed, err := p.setter.RecordEventSetStreamLaterTx(ctx, tx, key, now, sk, ks.raw, next)
	if err != nil {
		t.failed = func() error { return err } // it ran at once, and failed
		return Result{}, err
	}
	t.failed = failed
	err = p.applyOnce(ctx, tx, ev, t)
	if ferr := failed(); ferr != nil {
		// The statement went out with apply's first one and failed, or
		// the pipeline was refused: none of apply's statements ran, so
		// apply's outcome says nothing of ev.
		return Result{}, ferr
	}
	if err != nil {
		return Result{}, err
	}
	t.known = &knownStream{key: sk, raw: next, state: d.Next}
	return Result{Outcome: OutcomeProcessed, Applied: []int64{ev.Sequence}, mode: mode}, nil
}

// orderedTx decides a recorded ordered event, in, on its stream, whose
// state raw (nil for a new stream) was read under the stream's lock, and
// carries the decision out.
func (p *Processor[TX]) orderedTx(ctx context.Context, tx TX, ev event.Event, t *try, prior *store.DeadLetter, now time.Time, mode order.Mode, sk store.StreamKey, in order.Incoming, raw []byte) (Result, error) {
	var s order.Stream
	if raw != nil {
		if err := json.Unmarshal(raw, &s); err != nil {
			return Result{}, fmt.Errorf("%w: stream %v: %w", store.ErrCorrupt, sk, err)
		}
		t.known = &knownStream{key: sk, raw: raw, state: s}
	}
	d, err := order.Decide(mode, s, in, p.ocfg)
	switch {
	case errors.Is(err, order.ErrParkedLimit):
		return Result{}, fmt.Errorf("%w: %w", ErrBackpressure, err)
	case errors.Is(err, order.ErrBadStream), errors.Is(err, order.ErrBadMode), errors.Is(err, order.ErrBadConfig):
		return Result{}, fmt.Errorf("%w: stream %v: %w", store.ErrCorrupt, sk, err)
	case err != nil:
		// Bad sequence, no or conflicting execution: the event itself is at
		// fault, and no retry changes it.
		reason := err.Error()
		id, derr := p.deadLetter(ctx, tx, ev, reason, 0, prior, now)
		if derr != nil {
			return Result{}, derr
		}
		return Result{Outcome: OutcomeDeadLettered, DeadLetters: []int64{id}, Reason: reason}, nil
	}

	res := Result{Reset: d.Reset, Gap: d.Gap}
	switch d.Action {
	case order.ActionDuplicate, order.ActionStale, order.ActionSuperseded:
		res.Outcome = map[order.Action]Outcome{order.ActionDuplicate: OutcomeDuplicate, order.ActionStale: OutcomeStale, order.ActionSuperseded: OutcomeSuperseded}[d.Action]
		return res, nil
	case order.ActionPark:
		b, err := Encode(ev)
		if err != nil {
			return Result{}, err
		}
		if err := p.dropDiscarded(ctx, tx, sk, d); err != nil {
			return Result{}, err
		}
		if err := p.s.ParkTx(ctx, tx, sk, store.ParkedEvent{Sequence: ev.Sequence, Event: b}); err != nil {
			return Result{}, err
		}
		res.Outcome = OutcomeParked
		return res, p.commitStream(ctx, tx, t, sk, mode, s, d, d.Next, now, &res)
	}

	// Apply: the event first. If it fails for good, nothing of the decision
	// happens (no reset, no gap): it is dead-lettered and the stream stays.
	id, reason, err := p.applyOrDead(ctx, tx, ev, t, prior, now)
	if err != nil {
		return Result{}, err
	}
	if id != 0 {
		return Result{Outcome: OutcomeDeadLettered, DeadLetters: []int64{id}, Reason: reason}, nil
	}
	// Only now, with the event applied, does the reset happen.
	if err := p.dropDiscarded(ctx, tx, sk, d); err != nil {
		return Result{}, err
	}
	res.Outcome = OutcomeProcessed
	next, applied, dead, err := p.applyReleased(ctx, tx, sk, d, t, now)
	if err != nil {
		return Result{}, err
	}
	res.Applied = append([]int64{ev.Sequence}, applied...)
	res.DeadLetters = dead
	return res, p.commitStream(ctx, tx, t, sk, mode, s, d, next, now, &res)
}

// applyReleased applies the parked events d released, in order, each taken
// from the store just before it runs: a bad one halts the chain (it becomes
// a gap, see order.Decision.Halted) and its successors stay parked. It
// returns the stream to store, the sequences applied and the dead letters
// written.
func (p *Processor[TX]) applyReleased(ctx context.Context, tx TX, sk store.StreamKey, d order.Decision, t *try, now time.Time) (order.Stream, []int64, []int64, error) {
	var applied, dead []int64
	for _, seq := range d.Released {
		pe, err := p.s.UnparkTx(ctx, tx, sk, []int64{seq})
		if err != nil {
			return order.Stream{}, nil, nil, err
		}
		pev, err := Decode(pe[0].Event)
		if err != nil {
			return order.Stream{}, nil, nil, fmt.Errorf("%w: parked %v/%d: %w", store.ErrCorrupt, sk, seq, err)
		}
		id, _, err := p.applyOrDead(ctx, tx, pev, t, nil, now)
		if err != nil {
			return order.Stream{}, nil, nil, err
		}
		if id != 0 {
			next, err := d.Halted(seq, now)
			if err != nil {
				return order.Stream{}, nil, nil, fmt.Errorf("%w: %w", store.ErrCorrupt, err)
			}
			return next, applied, append(dead, id), nil
		}
		applied = append(applied, seq)
	}
	return d.Next, applied, dead, nil
}

// applyOrDead applies ev in tx and returns 0, or, when ev is doomed (it
// failed for good in an earlier run of this transaction), dead-letters it
// instead and returns the dead letter's ID and reason. When apply fails it
// returns errDoomed (an error wrapped by Invalid, or any error on the last
// attempt) or errTransient: either way the transaction rolls back, so the
// failed apply's writes never commit, and retry runs it again.
func (p *Processor[TX]) applyOrDead(ctx context.Context, tx TX, ev event.Event, t *try, prior *store.DeadLetter, now time.Time) (int64, string, error) {
	key := store.EventKey{Source: ev.Source, ID: ev.ID}
	if dm, ok := t.doomed[key]; ok {
		id, err := p.deadLetter(ctx, tx, ev, dm.reason, dm.attempts, prior, now)
		return id, dm.reason, err
	}
	return 0, "", p.applyOnce(ctx, tx, ev, t)
}

// applyOnce applies ev in tx. When apply fails it returns errDoomed (an
// error wrapped by Invalid, or any error on the last attempt) or
// errTransient (or the context's error): either way the transaction rolls
// back, and retry runs it again.
func (p *Processor[TX]) applyOnce(ctx context.Context, tx TX, ev event.Event, t *try) error {
	key := store.EventKey{Source: ev.Source, ID: ev.ID}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("apply panicked: %v\n%s", r, debug.Stack())
			}
		}()
		return p.apply(ctx, tx, ev)
	}()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err() // not the event's fault
	}
	switch {
	case errors.Is(err, ErrInvalid):
		return errDoomed{key, doom{reason: err.Error(), attempts: t.n}}
	case t.last:
		return errDoomed{key, doom{reason: fmt.Sprintf("failed %d times, last: %v", t.n, err), attempts: t.n}}
	}
	return errTransient{err}
}

// deadLetter stores ev as a dead letter in tx (its inbox row becomes dead).
func (p *Processor[TX]) deadLetter(ctx context.Context, tx TX, ev event.Event, reason string, attempts int, prior *store.DeadLetter, now time.Time) (int64, error) {
	b, err := Encode(ev)
	if err != nil {
		return 0, err
	}
	d := store.DeadLetter{
		Key:      store.EventKey{Source: ev.Source, ID: ev.ID},
		Stream:   store.StreamKey{Source: ev.Source, Subject: ev.Subject},
		Sequence: ev.Sequence, Reason: reason, Event: b, Attempts: attempts,
		FirstFailed: now, LastFailed: now,
	}
	if prior != nil && prior.Key == d.Key {
		d.Attempts += prior.Attempts
		d.FirstFailed = prior.FirstFailed
	}
	id, err := p.s.DeadLetterTx(ctx, tx, d)
	if err != nil {
		return 0, err
	}
	p.log.WarnContext(ctx, "inbox: event dead-lettered", "dead_letter", id, "source", ev.Source, "id", ev.ID,
		"subject", ev.Subject, "sequence", ev.Sequence, "attempts", d.Attempts, "reason", reason)
	return id, nil
}

// dropDiscarded deletes the parked events of the execution a reset left
// behind. It must run before the new execution parks anything: parked
// events are stored by (stream, sequence), and the new execution's sequences
// start again at 1.
func (p *Processor[TX]) dropDiscarded(ctx context.Context, tx TX, sk store.StreamKey, d order.Decision) error {
	if !d.Reset || len(d.Discarded) == 0 {
		return nil
	}
	if err := p.s.DropParkedTx(ctx, tx, sk, d.Discarded); err != nil {
		return err
	}
	p.log.InfoContext(ctx, "inbox: stream follows a newer execution; parked events of the old one dropped",
		"source", sk.Source, "subject", sk.Subject, "execution", d.Next.Execution, "dropped", len(d.Discarded))
	return nil
}

// commitStream stores the stream after a decision: the new state and the
// gap log. t.known becomes the new state.
func (p *Processor[TX]) commitStream(ctx context.Context, tx TX, t *try, sk store.StreamKey, mode order.Mode, before order.Stream, d order.Decision, next order.Stream, now time.Time, res *Result) error {
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	var since time.Time
	if len(next.Gaps) > 0 {
		since = next.Gaps[0].FirstSeen
	}
	if err := p.s.PutStreamTx(ctx, tx, sk, b, since); err != nil {
		return err
	}
	t.known = &knownStream{key: sk, raw: b, state: next}
	// Gaps this decision opened: a snapshot's skipped run, or delta gaps
	// the stream did not hold before (the event's own, one a halt opened).
	var opened []order.Gap
	if mode == order.ModeSnapshot && d.Gap != nil {
		opened = append(opened, *d.Gap)
	}
	old := before.Gaps
	if d.Reset {
		old = nil
	}
	for _, g := range next.Gaps {
		if !containsGap(old, g) {
			opened = append(opened, g)
		}
	}
	for _, g := range opened {
		if err := p.s.RecordGapTx(ctx, tx, store.GapRecord{Stream: sk, From: g.From, To: g.To, Delta: mode == order.ModeDelta, FirstSeen: now}); err != nil {
			return err
		}
		p.log.WarnContext(ctx, "inbox: gap in stream", "source", sk.Source, "subject", sk.Subject, "mode", mode, "from", g.From, "to", g.To)
	}
	if res != nil {
		res.mode, res.opened = mode, len(opened)
	}
	return nil
}

func containsGap(gaps []order.Gap, g order.Gap) bool {
	for _, o := range gaps {
		if o.From <= g.From && g.To <= o.To {
			return true
		}
	}
	return false
}

// Encode renders ev as stored in parked events and dead letters:
// structured-mode CloudEvents JSON (only the fields of event.Event), written
// by event.Encode.
func Encode(ev event.Event) ([]byte, error) {
	b, err := event.Encode(ev)
	if err != nil {
		return nil, fmt.Errorf("inbox: encode event %q: %w", ev.ID, err)
	}
	return b, nil
}

// Decode parses what Encode stored (event.Decode).
func Decode(b []byte) (event.Event, error) { return event.Decode(b) }
