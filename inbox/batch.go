package inbox

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

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
//     (up to Config.Batch).
//   - A batch runs each event's first attempt, in the order of its stream
//     and ID, so that two batches take the inbox's and the streams' rows
//     in one order. The batch commits only when every one of its events
//     succeeded; the results are given only after the commit.
//   - When any of its events fails (an apply's error, a guessed stream
//     state that no longer holds, a duplicate recorded meanwhile), or the
//     commit fails, nothing of the batch committed, and every one of its
//     events runs again alone, in its caller's goroutine, with its retries,
//     backoff and dead letters as without batching. The batch only ever
//     adds one attempt that committed nothing.
//
// A batch committed is the events' transactions committed one after the
// other in that order: the same statements, in one transaction.

// batchLeaders is how many batches may run at once: one alone would leave
// the database's other cores idle while its statements run one by one.
const batchLeaders = 2

// batchItem is one event waiting for a batch.
type batchItem struct {
	ctx context.Context
	ev  event.Event
	res Result
	err error
	// alone is set when the event's batch did not commit: its caller
	// processes it again, alone.
	alone bool
	done  chan struct{}
}

// batcher holds the events waiting for a batch.
type batcher struct {
	max     int
	leaders chan struct{}

	mu    sync.Mutex
	queue []*batchItem

	// batches counts the batches of more than one event committed (for
	// tests and the benchmarks).
	batches atomic.Int64
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
	it := &batchItem{ctx: ctx, ev: ev, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, it)
	b.mu.Unlock()
	select {
	case <-it.done:
	case b.leaders <- struct{}{}:
		// This caller leads: it runs what waits, its own event among
		// them unless an earlier leader took it or the batch is full.
		for b.queued(it) {
			p.leadBatch()
		}
		<-b.leaders
		<-it.done
	case <-ctx.Done():
		if b.unqueue(it) {
			return Result{}, fmt.Errorf("inbox: %w", ctx.Err())
		}
		<-it.done // a leader took it: its batch decides
	}
	if it.alone {
		return p.run(ctx, ev, nil)
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
// leaving a second delivery of an event taken for a later batch (in one
// batch it would fail the batch on the first's inbox row).
func (b *batcher) take() []*batchItem {
	b.mu.Lock()
	defer b.mu.Unlock()
	var (
		taken []*batchItem
		left  []*batchItem
		keys  = map[store.EventKey]bool{}
	)
	for _, it := range b.queue {
		k := store.EventKey{Source: it.ev.Source, ID: it.ev.ID}
		if len(taken) == b.max || keys[k] {
			left = append(left, it)
			continue
		}
		keys[k] = true
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
	if len(live) > 0 && p.runBatch(live) {
		if len(live) > 1 {
			p.batch.batches.Add(1)
		}
	} else {
		for _, it := range live {
			it.alone = true
		}
	}
	for _, it := range live {
		close(it.done)
	}
}

// runBatch processes items in one transaction, each event's first
// attempt in the order of its stream and ID, and reports whether it
// committed; then each item holds its result.
func (p *Processor[TX]) runBatch(items []*batchItem) bool {
	slices.SortFunc(items, func(a, b *batchItem) int {
		return cmp.Or(cmp.Compare(a.ev.Source, b.ev.Source), cmp.Compare(a.ev.Subject, b.ev.Subject), cmp.Compare(a.ev.ID, b.ev.ID))
	})
	tries := make([]*try, len(items))
	// A lone event's transaction ends with its caller's context, as
	// without batching; a batch's outlives any one caller's, whose event
	// fails the batch instead when its context ends before its part ran.
	ctx := items[0].ctx
	if len(items) > 1 {
		ctx = context.WithoutCancel(ctx)
	}
	err := p.s.InTx(ctx, func(_ context.Context, tx TX) error {
		for i, it := range items {
			t := &try{n: 1, last: p.cfg.MaxAttempts <= 1, doomed: map[store.EventKey]doom{}}
			res, err := p.processTx(it.ctx, tx, it.ev, t, nil)
			if err == nil {
				err = it.ctx.Err()
			}
			if err != nil {
				return err
			}
			res.Attempts = 1
			it.res, tries[i] = res, t
		}
		return nil
	})
	if err != nil {
		return false
	}
	for i, it := range items {
		if t := tries[i]; t.known != nil {
			p.streams.put(t.known.after(t.prev, false))
		}
		p.hooks.committed(it.res)
	}
	return true
}
