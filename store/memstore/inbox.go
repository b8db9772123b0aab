package memstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Inbox is the in-memory reference model of store.InboxStore: every rule
// written as plainly as possible. Transactions run one at a time (InTx holds
// one lock for the whole transaction) and keep an undo log, so a rollback
// restores exactly what was there. Nothing survives
// the process; it is for tests and for checking the SQL stores.
type Inbox struct {
	mu      sync.Mutex // held by a transaction from begin to end
	events  map[store.EventKey]eventRow
	streams map[store.StreamKey]streamRow
	parked  map[store.StreamKey]map[int64][]byte
	gaps    []store.GapRecord
	dead    map[int64]store.DeadLetter
	lastID  int64
}

type eventRow struct {
	status store.EventStatus
	at     time.Time
}

type streamRow struct {
	state    []byte
	gapSince time.Time
}

var (
	_ store.InboxStore[*Tx]        = (*Inbox)(nil)
	_ store.InboxStreamSetter[*Tx] = (*Inbox)(nil)
)

// NewInbox returns an empty inbox.
func NewInbox() *Inbox {
	return &Inbox{
		events:  map[store.EventKey]eventRow{},
		streams: map[store.StreamKey]streamRow{},
		parked:  map[store.StreamKey]map[int64][]byte{},
		dead:    map[int64]store.DeadLetter{},
	}
}

// Tx is a transaction of an Inbox. Business writes kept elsewhere in memory
// join it by registering their undo with OnRollback.
type Tx struct {
	in   *Inbox
	undo []func()
	// atCommit are the writes queued to run when fn returns, before the
	// commit; the first that fails rolls everything back.
	atCommit []func() error
	done     bool
}

// OnRollback registers f to run if the transaction rolls back. Undo
// functions run in reverse order.
func (tx *Tx) OnRollback(f func()) { tx.undo = append(tx.undo, f) }

func (tx *Tx) rollbackTo(mark int) {
	for i := len(tx.undo) - 1; i >= mark; i-- {
		tx.undo[i]()
	}
	tx.undo = tx.undo[:mark]
}

func (tx *Tx) check() error {
	if tx == nil || tx.done {
		return fmt.Errorf("memstore: transaction is not open")
	}
	return nil
}

// InTx implements store.InboxStore.
func (in *Inbox) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	tx := &Tx{in: in}
	committed := false
	defer func() {
		if !committed {
			tx.rollbackTo(0)
		}
		tx.done = true
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	for _, f := range tx.atCommit {
		if err := f(); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err // a cancelled transaction does not commit
	}
	committed = true
	return nil
}

// RecordEventTx implements store.InboxStore.
func (in *Inbox) RecordEventTx(ctx context.Context, tx *Tx, key store.EventKey, at time.Time) (store.EventStatus, bool, error) {
	if err := tx.check(); err != nil {
		return 0, false, err
	}
	if r, ok := in.events[key]; ok {
		return r.status, false, nil
	}
	in.events[key] = eventRow{status: store.EventDone, at: at}
	tx.OnRollback(func() { delete(in.events, key) })
	return 0, true, nil
}

// LockStreamTx implements store.InboxStore (the transaction already holds
// the only lock).
func (in *Inbox) LockStreamTx(ctx context.Context, tx *Tx, key store.StreamKey) ([]byte, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	r, ok := in.streams[key]
	if !ok {
		return nil, nil
	}
	return bytes.Clone(r.state), nil
}

// PutStreamTx implements store.InboxStore.
func (in *Inbox) PutStreamTx(ctx context.Context, tx *Tx, key store.StreamKey, state []byte, gapSince time.Time) error {
	if err := tx.check(); err != nil {
		return err
	}
	old, had := in.streams[key]
	in.streams[key] = streamRow{state: bytes.Clone(state), gapSince: gapSince}
	tx.OnRollback(func() {
		if had {
			in.streams[key] = old
		} else {
			delete(in.streams, key)
		}
	})
	return nil
}

// RecordEventSetStreamLaterTx implements store.InboxStreamSetter as its
// model: the record and the compare and set run at the commit, after
// everything else the transaction did (the latest a store may run them),
// and fail it with store.ErrDuplicate or store.ErrStreamMoved, which
// failed reports from then on.
func (in *Inbox) RecordEventSetStreamLaterTx(ctx context.Context, tx *Tx, key store.EventKey, at time.Time, stream store.StreamKey, expect, next []byte) (func() error, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	expect, next = bytes.Clone(expect), bytes.Clone(next)
	var failed error
	tx.atCommit = append(tx.atCommit, func() error {
		failed = in.recordEventSetStream(ctx, tx, key, at, stream, expect, next)
		return failed
	})
	return func() error { return failed }, nil
}

// recordEventSetStream records key and sets stream from expect to next,
// or fails with store.ErrDuplicate or store.ErrStreamMoved.
func (in *Inbox) recordEventSetStream(ctx context.Context, tx *Tx, key store.EventKey, at time.Time, stream store.StreamKey, expect, next []byte) error {
	if _, inserted, err := in.RecordEventTx(ctx, tx, key, at); err != nil || !inserted {
		return cmp.Or(err, fmt.Errorf("memstore: record event %v: %w", key, store.ErrDuplicate))
	}
	if r, ok := in.streams[stream]; !ok || !bytes.Equal(r.state, expect) {
		return fmt.Errorf("memstore: set stream %v: %w", stream, store.ErrStreamMoved)
	}
	return in.PutStreamTx(ctx, tx, stream, next, time.Time{})
}

// ParkTx implements store.InboxStore.
func (in *Inbox) ParkTx(ctx context.Context, tx *Tx, key store.StreamKey, ev store.ParkedEvent) error {
	if err := tx.check(); err != nil {
		return err
	}
	m := in.parked[key]
	if m == nil {
		m = map[int64][]byte{}
		in.parked[key] = m
	}
	if _, ok := m[ev.Sequence]; ok {
		return fmt.Errorf("%w: sequence %d of %v parked twice", store.ErrCorrupt, ev.Sequence, key)
	}
	m[ev.Sequence] = bytes.Clone(ev.Event)
	tx.OnRollback(func() { delete(m, ev.Sequence) })
	return nil
}

// UnparkTx implements store.InboxStore.
func (in *Inbox) UnparkTx(ctx context.Context, tx *Tx, key store.StreamKey, seqs []int64) ([]store.ParkedEvent, error) {
	if err := tx.check(); err != nil {
		return nil, err
	}
	m := in.parked[key]
	out := make([]store.ParkedEvent, 0, len(seqs))
	for _, seq := range seqs {
		b, ok := m[seq]
		if !ok {
			return nil, fmt.Errorf("%w: sequence %d of %v is not parked", store.ErrCorrupt, seq, key)
		}
		out = append(out, store.ParkedEvent{Sequence: seq, Event: bytes.Clone(b)})
	}
	in.dropParked(tx, key, seqs)
	return out, nil
}

// DropParkedTx implements store.InboxStore.
func (in *Inbox) DropParkedTx(ctx context.Context, tx *Tx, key store.StreamKey, seqs []int64) error {
	if err := tx.check(); err != nil {
		return err
	}
	in.dropParked(tx, key, seqs)
	return nil
}

func (in *Inbox) dropParked(tx *Tx, key store.StreamKey, seqs []int64) {
	m := in.parked[key]
	for _, seq := range seqs {
		b, ok := m[seq]
		if !ok {
			continue
		}
		delete(m, seq)
		tx.OnRollback(func() { m[seq] = b })
	}
}

// RecordGapTx implements store.InboxStore.
func (in *Inbox) RecordGapTx(ctx context.Context, tx *Tx, g store.GapRecord) error {
	if err := tx.check(); err != nil {
		return err
	}
	n := len(in.gaps)
	in.gaps = append(in.gaps, g)
	tx.OnRollback(func() { in.gaps = in.gaps[:n] })
	return nil
}

// DeadLetterTx implements store.InboxStore.
func (in *Inbox) DeadLetterTx(ctx context.Context, tx *Tx, d store.DeadLetter) (int64, error) {
	if err := tx.check(); err != nil {
		return 0, err
	}
	old, had := in.events[d.Key]
	row := old
	if !had {
		row.at = d.LastFailed
	}
	row.status = store.EventDead
	in.events[d.Key] = row
	lastID := in.lastID
	in.lastID++
	d.ID = in.lastID
	d.Event = bytes.Clone(d.Event)
	in.dead[d.ID] = d
	tx.OnRollback(func() {
		delete(in.dead, d.ID)
		in.lastID = lastID
		if had {
			in.events[d.Key] = old
		} else {
			delete(in.events, d.Key)
		}
	})
	return d.ID, nil
}

// TakeDeadLetterTx implements store.InboxStore.
func (in *Inbox) TakeDeadLetterTx(ctx context.Context, tx *Tx, id int64) (store.DeadLetter, bool, error) {
	if err := tx.check(); err != nil {
		return store.DeadLetter{}, false, err
	}
	d, ok := in.dead[id]
	if !ok {
		return store.DeadLetter{}, false, fmt.Errorf("memstore: dead letter %d: %w", id, store.ErrNotFound)
	}
	delete(in.dead, id)
	tx.OnRollback(func() { in.dead[id] = d })
	row, had := in.events[d.Key]
	wasDead := had && row.status == store.EventDead
	if wasDead {
		delete(in.events, d.Key)
		tx.OnRollback(func() { in.events[d.Key] = row })
	}
	d.Event = bytes.Clone(d.Event)
	return d, wasDead, nil
}

// ListDeadLetters implements store.InboxStore.
func (in *Inbox) ListDeadLetters(ctx context.Context, q store.DeadLetterQuery) ([]store.DeadLetter, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("memstore: dead letter limit %d: must be at least 1", q.Limit)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	ids := slices.Sorted(maps.Keys(in.dead))
	var out []store.DeadLetter
	for _, id := range ids {
		if id <= q.After {
			continue
		}
		d := in.dead[id]
		d.Event = bytes.Clone(d.Event)
		out = append(out, d)
		if len(out) == q.Limit {
			break
		}
	}
	return out, nil
}

// ListGaps implements store.InboxStore.
func (in *Inbox) ListGaps(ctx context.Context, key *store.StreamKey, limit int) ([]store.GapRecord, error) {
	if limit < 1 {
		return nil, fmt.Errorf("memstore: gap limit %d: must be at least 1", limit)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []store.GapRecord
	for _, g := range in.gaps {
		if key != nil && g.Stream != *key {
			continue
		}
		out = append(out, g)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// OverdueStreams implements store.InboxStore.
func (in *Inbox) OverdueStreams(ctx context.Context, before time.Time, limit int) ([]store.StreamKey, error) {
	if limit < 1 {
		return nil, fmt.Errorf("memstore: stream limit %d: must be at least 1", limit)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	type due struct {
		key   store.StreamKey
		since time.Time
	}
	var all []due
	for k, r := range in.streams {
		if !r.gapSince.IsZero() && !r.gapSince.After(before) {
			all = append(all, due{k, r.gapSince})
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].since.Equal(all[j].since) {
			return all[i].since.Before(all[j].since)
		}
		if all[i].key.Source != all[j].key.Source {
			return all[i].key.Source < all[j].key.Source
		}
		return all[i].key.Subject < all[j].key.Subject
	})
	out := make([]store.StreamKey, 0, min(limit, len(all)))
	for _, d := range all[:min(limit, len(all))] {
		out = append(out, d.key)
	}
	return out, nil
}

// SweepInbox implements store.InboxStore.
func (in *Inbox) SweepInbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("memstore: sweep limit %d: must be at least 1", limit)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for k, r := range in.events {
		if n == limit {
			break
		}
		if r.status == store.EventDone && r.at.Before(before) {
			delete(in.events, k)
			n++
		}
	}
	kept := in.gaps[:0]
	g := 0
	for _, r := range in.gaps {
		if g < limit && r.FirstSeen.Before(before) {
			g++
			continue
		}
		kept = append(kept, r)
	}
	in.gaps = kept
	return n + g, nil
}

// Len reports how many inbox rows, parked events and dead letters the inbox
// holds, for tests that check what was kept.
func (in *Inbox) Len() (events, parked, dead int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range in.parked {
		parked += len(m)
	}
	return len(in.events), parked, len(in.dead)
}
