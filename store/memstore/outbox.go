package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemhq/idem/store"
)

// Outbox is the in-memory reference model of store.OutboxStore. It shares
// the transactions of the Inbox it was made from (EnqueueTx joins them), and
// its other methods, like the Inbox's, must not be called inside one.
type Outbox struct {
	in        *Inbox
	rows      map[int64]store.Intent
	lastID    int64
	streamSeq map[string]int64
	disabled  map[string]string
}

var _ store.OutboxStore[*Tx] = (*Outbox)(nil)

// NewOutbox returns an empty outbox whose EnqueueTx joins in's transactions.
func NewOutbox(in *Inbox) *Outbox {
	return &Outbox{in: in, rows: map[int64]store.Intent{}, streamSeq: map[string]int64{}, disabled: map[string]string{}}
}

// InTx runs fn in a transaction of the underlying Inbox.
func (o *Outbox) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	return o.in.InTx(ctx, fn)
}

// EnqueueTx implements store.OutboxStore.
func (o *Outbox) EnqueueTx(ctx context.Context, tx *Tx, in store.Intent) (int64, int64, error) {
	if err := tx.check(); err != nil {
		return 0, 0, err
	}
	if in.Target == "" || in.Method == "" {
		return 0, 0, fmt.Errorf("memstore: enqueue: target and method are required")
	}
	lastID, oldSeq := o.lastID, o.streamSeq[in.Stream]
	o.lastID++
	in.ID = o.lastID
	in.Sequence = 0
	if in.Stream != "" {
		o.streamSeq[in.Stream]++
		in.Sequence = o.streamSeq[in.Stream]
	}
	in.State, in.Attempts, in.Epoch, in.Owner, in.LeaseUntil = store.IntentPending, 0, 0, "", time.Time{}
	in.LastError, in.Status, in.DoneAt = "", 0, time.Time{}
	in.Body = slices.Clone(in.Body)
	in.Headers, in.Metadata = maps.Clone(in.Headers), maps.Clone(in.Metadata)
	if in.EnqueuedAt.IsZero() {
		in.EnqueuedAt = in.DueAt
	}
	o.rows[in.ID] = in
	tx.OnRollback(func() {
		delete(o.rows, in.ID)
		o.lastID = lastID
		if in.Stream != "" {
			o.streamSeq[in.Stream] = oldSeq
		}
	})
	return in.ID, in.Sequence, nil
}

// ClaimIntents implements store.OutboxStore.
func (o *Outbox) ClaimIntents(ctx context.Context, c store.OutboxClaim) ([]store.Intent, error) {
	if c.Limit < 1 || c.Owner == "" || c.Lease <= 0 {
		return nil, fmt.Errorf("memstore: claim: limit %d, owner %q, lease %v: want limit >= 1, an owner and a lease", c.Limit, c.Owner, c.Lease)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	blocked := map[string]bool{} // streams with an earlier row not ended
	var out []store.Intent
	for _, id := range slices.Sorted(maps.Keys(o.rows)) {
		r := o.rows[id]
		ended := r.State == store.IntentDone || r.State == store.IntentDead
		if r.Stream != "" && !ended {
			if blocked[r.Stream] {
				continue
			}
			blocked[r.Stream] = true
		}
		if len(out) == c.Limit || slices.Contains(c.Skip, r.Target) {
			continue
		}
		due := (r.State == store.IntentPending && !r.DueAt.After(c.Now)) ||
			(r.State == store.IntentInFlight && !r.LeaseUntil.After(c.Now))
		if !due {
			continue
		}
		r.State, r.Epoch, r.Owner, r.LeaseUntil, r.Attempts = store.IntentInFlight, r.Epoch+1, c.Owner, c.Now.Add(c.Lease), r.Attempts+1
		o.rows[id] = r
		out = append(out, cloneIntent(r))
	}
	return out, nil
}

func cloneIntent(r store.Intent) store.Intent {
	r.Body = slices.Clone(r.Body)
	r.Headers, r.Metadata = maps.Clone(r.Headers), maps.Clone(r.Metadata)
	return r
}

// fenced runs change on the row if f matches an in-flight row.
func (o *Outbox) fenced(ctx context.Context, f store.IntentFence, change func(r *store.Intent)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	r, ok := o.rows[f.ID]
	if !ok || r.State != store.IntentInFlight || r.Epoch != f.Epoch || r.Owner != f.Owner {
		return fmt.Errorf("memstore: intent %d epoch %d: %w", f.ID, f.Epoch, store.ErrFenced)
	}
	change(&r)
	o.rows[f.ID] = r
	return nil
}

// CompleteIntent implements store.OutboxStore.
func (o *Outbox) CompleteIntent(ctx context.Context, f store.IntentFence, status int, at time.Time) error {
	return o.fenced(ctx, f, func(r *store.Intent) {
		r.State, r.Status, r.DoneAt, r.LeaseUntil = store.IntentDone, status, at, time.Time{}
	})
}

// CompleteIntents implements store.OutboxBatcher.
func (o *Outbox) CompleteIntents(ctx context.Context, fences []store.IntentFence, statuses []int, at time.Time) ([]error, error) {
	if len(fences) != len(statuses) {
		return nil, fmt.Errorf("memstore: complete intents: %d fences and %d statuses", len(fences), len(statuses))
	}
	errs := make([]error, len(fences))
	for i, f := range fences {
		errs[i] = o.CompleteIntent(ctx, f, statuses[i], at)
	}
	return errs, nil
}

// RetryIntent implements store.OutboxStore.
func (o *Outbox) RetryIntent(ctx context.Context, f store.IntentFence, dueAt time.Time, lastErr string) error {
	return o.fenced(ctx, f, func(r *store.Intent) {
		r.State, r.DueAt, r.LastError, r.LeaseUntil = store.IntentPending, dueAt, lastErr, time.Time{}
	})
}

// KillIntent implements store.OutboxStore.
func (o *Outbox) KillIntent(ctx context.Context, f store.IntentFence, reason string, at time.Time) error {
	return o.fenced(ctx, f, func(r *store.Intent) {
		r.State, r.LastError, r.DoneAt, r.LeaseUntil = store.IntentDead, reason, at, time.Time{}
	})
}

// GetIntent implements store.OutboxStore.
func (o *Outbox) GetIntent(ctx context.Context, id int64) (store.Intent, error) {
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	r, ok := o.rows[id]
	if !ok {
		return store.Intent{}, fmt.Errorf("memstore: intent %d: %w", id, store.ErrNotFound)
	}
	return cloneIntent(r), nil
}

// ListIntents implements store.OutboxStore.
func (o *Outbox) ListIntents(ctx context.Context, state store.IntentState, after int64, limit int) ([]store.Intent, error) {
	if limit < 1 {
		return nil, fmt.Errorf("memstore: list intents: limit %d: must be at least 1", limit)
	}
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	var out []store.Intent
	for _, id := range slices.Sorted(maps.Keys(o.rows)) {
		if r := o.rows[id]; id > after && r.State == state {
			out = append(out, cloneIntent(r))
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// RequeueIntent implements store.OutboxStore.
func (o *Outbox) RequeueIntent(ctx context.Context, id int64, now time.Time) error {
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	r, ok := o.rows[id]
	if !ok || r.State != store.IntentDead {
		return fmt.Errorf("memstore: intent %d is not dead: %w", id, store.ErrNotFound)
	}
	r.State, r.DueAt, r.Attempts, r.DoneAt = store.IntentPending, now, 0, time.Time{}
	o.rows[id] = r
	return nil
}

// DisableTarget implements store.OutboxStore.
func (o *Outbox) DisableTarget(ctx context.Context, target, reason string, at time.Time) error {
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	o.disabled[target] = reason
	return nil
}

// EnableTarget implements store.OutboxStore.
func (o *Outbox) EnableTarget(ctx context.Context, target string) error {
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	delete(o.disabled, target)
	return nil
}

// DisabledTargets implements store.OutboxStore.
func (o *Outbox) DisabledTargets(ctx context.Context) ([]string, error) {
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	return slices.Sorted(maps.Keys(o.disabled)), nil
}

// SweepIntents implements store.OutboxStore.
func (o *Outbox) SweepIntents(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("memstore: sweep intents: limit %d: must be at least 1", limit)
	}
	o.in.mu.Lock()
	defer o.in.mu.Unlock()
	n := 0
	for _, id := range slices.Sorted(maps.Keys(o.rows)) {
		if r := o.rows[id]; r.State == store.IntentDone && r.DoneAt.Before(before) {
			delete(o.rows, id)
			if n++; n == limit {
				break
			}
		}
	}
	return n, nil
}
