package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/store"
)

// Batching (Config.Batch): events that Process gets while others are
// being processed share one transaction, each recorded, decided and
// applied in it as it would be in a transaction of its own, one after the
// other, and one commit (one sync) makes them all durable. It is an
// optimistic path laid over the usual one:
//
//   - An event that arrives while fewer than batchLeaders batches run is
//     taken at once, alone or with whatever waits: a lone event's batch is
//     its own transaction, as without batching. Events that arrive while
//     every leader is busy wait, and the next leader takes them together
//     (up to Config.Batch), oldest first.
//   - A batch holds at most one event per subject (source and subject:
//     an ordered event's stream; an event without a subject counts as its
//     own), the next waiting for a later batch, taken in the order they
//     came, and runs them in the order of their subjects. Each event takes
//     its inbox row and then its stream's lock, so every transaction takes
//     idem's rows in one order, subject by subject: two batches, or a
//     batch and an event processed alone, never wait on each other in a
//     cycle over them, nor over business rows that an apply locks for its
//     event's subject only.
//   - The batch commits only when every one of its events succeeded; the
//     results are given only after the commit.
//   - An event of no order is recorded before it is applied (a batching
//     processor sets Config.RecordFirst), so that a redelivery is
//     answered as a duplicate without failing its batch, and two
//     deliveries of one event, batched and alone, take its rows in one
//     order.
//   - When any of its events fails (an apply's error, a guessed stream
//     state that no longer holds, a panic of a callback), or the commit
//     fails, nothing of the batch committed, and every one of its events
//     runs again alone, in its caller's goroutine, with its retries,
//     backoff and dead letters as without batching. The event whose
//     apply failed goes on from that attempt, as if it had run alone
//     (counted, backed off, reported to OnRetry); the others start again,
//     their attempt in the batch not counted (a callback that panics
//     panics again in its own caller). A failure of idem's own statements
//     is no event's: it may be a write another event queued.
//
// A batch committed is its events' transactions committed one after the
// other in that order: the same statements, in one transaction. Since no
// two of them share a stream, each has the result it would have had alone.

// own reports whether err, met by an event's attempt in a batch, is that
// event's own doing: its apply's failure or its caller's context. Any
// other error may come from a write another event of the batch queued
// (it goes out with the next statement), and is no event's own.
func own(ctx context.Context, err error) bool {
	var (
		te errTransient
		ed errDoomed
	)
	return errors.As(err, &te) || errors.As(err, &ed) || ctx.Err() != nil
}

// batchKey is what no two events of a batch share, and orders them: the
// event's subject, or for an event without one, the event itself.
type batchKey struct{ source, subject, id string }

func keyOf(ev event.Event) batchKey {
	if ev.Subject == "" {
		return batchKey{source: ev.Source, id: ev.ID}
	}
	return batchKey{source: ev.Source, subject: ev.Subject}
}

func (k batchKey) compare(o batchKey) int {
	return cmp.Or(cmp.Compare(k.source, o.source), cmp.Compare(k.subject, o.subject), cmp.Compare(k.id, o.id))
}

// batchLeaders is how many batches may run at once: one alone would leave
// the database's other cores idle while its statements run one by one.
const batchLeaders = 2

// batchItem is one event waiting for a batch.
type batchItem struct {
	ctx context.Context
	ev  event.Event
	key batchKey
	res Result
	err error
	// alone is set when the event's batch did not commit: its caller
	// processes it again, alone, going on from first when the batch
	// failed on the event's own attempt.
	alone bool
	first *firstTry
	done  chan struct{}
}

// batcher holds the events waiting for a batch.
type batcher struct {
	max     int
	leaders chan struct{}

	mu    sync.Mutex
	queue []*batchItem
}

func newBatcher(max int) *batcher {
	if max <= 1 {
		return nil
	}
	return &batcher{max: max, leaders: make(chan struct{}, batchLeaders)}
}

// processBatched processes ev in a batch of the events that arrive with it,
// or alone.
func (p *Processor[TX]) processBatched(ctx context.Context, ev event.Event) (Result, error) {
	b := p.batch
	it := &batchItem{ctx: ctx, ev: ev, key: keyOf(ev), done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, it)
	b.mu.Unlock()
	select {
	case <-it.done:
	case b.leaders <- struct{}{}:
		// This caller leads: it runs what waits, its own event among
		// them unless an earlier leader took it, the batch is full or
		// the batch holds its stream already.
		func() {
			defer func() {
				<-b.leaders
				if r := recover(); r != nil {
					b.unqueue(it) // a hook panicked: this caller will not wait for it
					panic(r)
				}
			}()
			for b.queued(it) {
				p.leadBatch()
			}
		}()
		<-it.done
	case <-ctx.Done():
		if b.unqueue(it) {
			return Result{}, fmt.Errorf("inbox: %w", ctx.Err())
		}
		<-it.done // a leader took it: its batch decides
	}
	switch {
	case it.alone:
		return p.runAfter(ctx, ev, nil, it.first)
	case it.err == nil:
		p.hooks.committed(it.res) // on the event's own goroutine, as without batching
	}
	return it.res, it.err
}

// queued reports whether it waits in the queue still.
func (b *batcher) queued(it *batchItem) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.queue, it)
}

// unqueue takes it off the queue, if no leader took it yet.
func (b *batcher) unqueue(it *batchItem) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.queue, it); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		return true
	}
	return false
}

// take removes up to max waiting events from the queue, oldest first,
// leaving for a later batch an event whose key (its subject) one taken
// has.
func (b *batcher) take() []*batchItem {
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		taken []*batchItem
		left  []*batchItem
		keys  = map[batchKey]bool{}
	)
	for _, it := range b.queue {
		if len(taken) == b.max || keys[it.key] {
			left = append(left, it)
			continue
		}
		keys[it.key] = true
		taken = append(taken, it)
	}
	b.queue = left
	return taken
}

// leadBatch runs the waiting events as one batch, or hands them back to
// their callers to run alone when it does not commit. The caller holds a
// leader's turn.
func (p *Processor[TX]) leadBatch() {
	items := p.batch.take()
	var live []*batchItem
	for _, it := range items {
		if err := it.ctx.Err(); err != nil {
			it.err = fmt.Errorf("inbox: %w", err)
			close(it.done)
			continue
		}
		live = append(live, it)
	}
	committed := false
	defer func() { // whatever happens, every taken event gets its answer
		for _, it := range live {
			it.alone = !committed
			close(it.done)
		}
	}()
	committed = len(live) > 0 && p.runBatch(live)
	if len(live) > 1 {
		p.hooks.OnBatch(len(live), committed)
	}
}

// runBatch processes items in one transaction, each event's first
// attempt in the order of its key, and reports whether it committed; then
// each item holds its result. When it did not, the item whose attempt
// failed, if it was its own doing, holds that attempt (first). A panic of a
// callback (ModeOf, ExecutionRank) gives the batch up: each event runs
// again alone, where it panics again in its own caller.
func (p *Processor[TX]) runBatch(items []*batchItem) (committed bool) {
	slices.SortFunc(items, func(a, b *batchItem) int { return a.key.compare(b.key) })
	tries := make([]*try, len(items))
	failed, failedErr := -1, error(nil)
	defer func() {
		if recover() != nil {
			committed, failed = false, -1
		}
		if committed {
			return
		}
		for _, t := range tries {
			if t != nil && t.guessFailed() {
				// As retry does: the stream's next events are decided
				// under its lock, its alone run's among them. The failure
				// may have met another event's statement: it is no event's
				// own.
				p.streams.missed(t.prev)
				failed = -1
			}
		}
		if failed >= 0 {
			items[failed].first = &firstTry{t: tries[failed], err: failedErr}
		}
	}()
	// A lone event's transaction ends with its caller's context, as
	// without batching; a batch's outlives any one caller's: an event
	// whose context ends while the batch runs fails the batch instead.
	ctx := items[0].ctx
	if len(items) > 1 {
		ctx = context.WithoutCancel(ctx)
	}
	err := p.s.InTx(ctx, func(_ context.Context, tx TX) error {
		for i, it := range items {
			t := &try{n: 1, last: p.cfg.MaxAttempts <= 1, doomed: map[store.EventKey]doom{}}
			tries[i] = t
			res, err := p.processTx(it.ctx, tx, it.ev, t, nil)
			if err == nil {
				err = it.ctx.Err()
			}
			if err != nil {
				if own(it.ctx, err) {
					failed, failedErr = i, err
				}
				return err
			}
			res.Attempts = 1
			it.res = res
		}
		return nil
	})
	if err != nil {
		return false
	}
	for _, t := range tries {
		if t.known != nil {
			p.streams.put(t.known.after(t.prev, false))
		}
	}
	return true
}
