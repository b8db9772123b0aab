// Package memstore is the in-memory reference model of a request-key store.
//
// Every rule of store.Store is written here as plainly as possible, under
// one mutex; the conformance suite holds it, like every store, to the
// model of the record's state machine in package storetest. It
// keeps nothing across a restart (Capabilities.Durable is false) and serves
// one process only; its memory is bounded by the sweeper, which deletes
// expired records.
package memstore

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Config configures a Store. A nil *Config means all defaults.
type Config struct {
	// Now is the store's clock. Defaults to time.Now.
	Now func() time.Time
}

// Store is an in-memory store.Store. The zero value is not usable; use New.
type Store struct {
	now     func() time.Time
	mu      sync.Mutex
	records map[string]store.Record
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New(cfg *Config) *Store {
	s := &Store{now: time.Now, records: make(map[string]store.Record)}
	if cfg != nil && cfg.Now != nil {
		s.now = cfg.Now
	}
	return s
}

// Capabilities: not durable, no transactions, one process.
func (s *Store) Capabilities() store.Capabilities { return store.Capabilities{} }

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return store.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	rec, ok := s.records[p.Key]
	var epoch int64
	switch {
	case !ok:
	case !now.Before(rec.ExpiresAt):
		epoch = rec.Epoch
	case rec.State == store.StateReleased:
		epoch = rec.Epoch
	case !bytes.Equal(rec.Fingerprint, p.Fingerprint),
		rec.State == store.StateDone,
		now.Before(rec.LeaseUntil):
		return store.ClaimResult{Record: clone(rec), Now: now}, nil
	default: // processing, same fingerprint, lease ended: take over
		epoch = rec.Epoch
	}
	rec = store.Record{
		Key:         p.Key,
		Fingerprint: bytes.Clone(p.Fingerprint),
		State:       store.StateProcessing,
		Epoch:       epoch + 1,
		Owner:       p.Owner,
		LeaseUntil:  now.Add(p.Lease),
		ExpiresAt:   now.Add(p.Retention),
	}
	s.records[p.Key] = rec
	return store.ClaimResult{Claimed: true, Record: clone(rec), Now: now}, nil
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	return s.update(ctx, p.Fence, func(r *store.Record, now time.Time) {
		r.State = store.StateDone
		r.Response = bytes.Clone(p.Response)
		r.LeaseUntil = time.Time{}
		r.Unknown = false
		r.ExpiresAt = now.Add(p.Retention)
	})
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.update(ctx, f, func(r *store.Record, _ time.Time) {
		r.State = store.StateReleased
		r.LeaseUntil = time.Time{}
		r.Unknown = false
	})
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, f store.Fence, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := s.update(ctx, f, func(r *store.Record, now time.Time) {
		until = now.Add(lease)
		r.LeaseUntil = until
		if r.ExpiresAt.Before(until) {
			r.ExpiresAt = until
		}
	})
	return until, err
}

// MarkUnknown implements store.Store.
func (s *Store) MarkUnknown(ctx context.Context, f store.Fence) error {
	return s.update(ctx, f, func(r *store.Record, _ time.Time) { r.Unknown = true })
}

// update applies fn to the record if f still holds it: the compare-and-set
// every holder write goes through.
func (s *Store) update(ctx context.Context, f store.Fence, fn func(*store.Record, time.Time)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[f.Key]
	if !ok || rec.State != store.StateProcessing || rec.Epoch != f.Epoch || rec.Owner != f.Owner {
		return store.ErrFenced
	}
	fn(&rec, s.now())
	s.records[f.Key] = rec
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.records[key]
	if !ok || !s.now().Before(rec.ExpiresAt) {
		return store.Record{}, store.ErrNotFound
	}
	return clone(rec), nil
}

// Sweep implements store.Store.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for k, rec := range s.records {
		if n >= limit {
			break
		}
		if now.Before(rec.ExpiresAt) || (rec.State == store.StateProcessing && now.Before(rec.LeaseUntil)) {
			continue
		}
		delete(s.records, k)
		n++
	}
	return n, nil
}

// Len returns the number of records held, expired or not: the memory the
// sweeper bounds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

func clone(r store.Record) store.Record {
	r.Fingerprint = bytes.Clone(r.Fingerprint)
	r.Response = bytes.Clone(r.Response)
	return r
}
