package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/idemhq/idem/store"
)

// claimAttempts bounds how often Claim runs its upsert. The upsert grants
// nothing and the record read after it is claimable only when another
// process changed the record in between; the next attempt then decides
// again.
const claimAttempts = 8

// Claim implements store.Store.
//
// It first reads the record without a lock. When that snapshot shows a
// record that the claim may not take (another fingerprint, DONE, or a live
// lease), Claim answers from it: a claim at that instant would have changed
// nothing, so the read is the whole atomic step and replays never wait for
// the write lock. Otherwise the decision is made by one conditional upsert
// (claim.sql) in its own implicit transaction, which re-checks every
// condition. When it grants nothing, the record that prevented it is read
// back; if that record is claimable again (another process released or
// changed it in between), the upsert runs again.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	now := s.clock()
	rec, err := readRecord(ctx, nil, s.stmts.read, p.Key)
	switch {
	case err == nil:
		if !claimable(rec, p.Fingerprint, now) {
			return store.ClaimResult{Record: rec, Now: now}, nil
		}
	case !errors.Is(err, store.ErrNotFound):
		return store.ClaimResult{}, opError("claim", p.Key, err)
	}
	for range claimAttempts {
		var (
			res  store.ClaimResult
			done bool
		)
		err := s.grouped(ctx, p.Key, p.Transactional, func(ctx context.Context, tx *sql.Tx) error {
			var err error
			res, done, err = s.claimOnce(ctx, tx, p)
			return err
		})
		if err != nil {
			return store.ClaimResult{}, opError("claim", p.Key, err)
		}
		if done {
			return res, nil
		}
	}
	return store.ClaimResult{}, opError("claim", p.Key,
		fmt.Errorf("no answer after %d attempts: the record keeps changing", claimAttempts))
}

// claimOnce runs the upsert once, holding this store's turn to write. done
// is false when the upsert granted nothing and the record read back is
// claimable after all (changed by another process in between).
func (s *Store) claimOnce(ctx context.Context, tx *sql.Tx, p store.ClaimParams) (res store.ClaimResult, done bool, err error) {
	now := s.clock() // read in our turn: lease times start when we decide
	fp := nonNil(p.Fingerprint)
	leaseUntil, expiresAt := addMicros(now, p.Lease), addMicros(now, p.Retention)
	var epoch int64
	err = s.stmts.claim.queryRow(ctx, tx,
		sql.Named("key", []byte(p.Key)),
		sql.Named("fingerprint", fp),
		sql.Named("owner", []byte(p.Owner)),
		sql.Named("lease_until", leaseUntil),
		sql.Named("expires_at", expiresAt),
		sql.Named("now", now.UnixMicro()),
	).Scan(&epoch)
	switch err = interpretError(err); err {
	case nil:
		return store.ClaimResult{
			Claimed: true,
			Record: store.Record{
				Key:         p.Key,
				Fingerprint: bytes.Clone(fp),
				State:       store.StateProcessing,
				Epoch:       epoch,
				Owner:       p.Owner,
				LeaseUntil:  fromMicros(leaseUntil),
				ExpiresAt:   fromMicros(expiresAt),
			},
			Now: now,
		}, true, nil
	case store.ErrNotFound: // the upsert granted nothing
		rec, err := readRecord(ctx, tx, s.stmts.read, p.Key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return store.ClaimResult{}, false, nil // deleted by another process meanwhile
		case err != nil:
			return store.ClaimResult{}, false, fmt.Errorf("reading the record that refused the claim: %w", err)
		case claimable(rec, fp, now):
			return store.ClaimResult{}, false, nil
		}
		return store.ClaimResult{Record: rec, Now: now}, true, nil
	default:
		return store.ClaimResult{}, false, err
	}
}

// claimable is the condition of claim.sql, for a record read without the
// lock: true when a claim now could change it.
func claimable(r store.Record, fingerprint []byte, now time.Time) bool {
	return !now.Before(r.ExpiresAt) ||
		r.State == store.StateReleased ||
		(r.State == store.StateProcessing && bytes.Equal(r.Fingerprint, fingerprint) && !now.Before(r.LeaseUntil))
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	return opError("complete", p.Key, s.grouped(ctx, p.Key, false, func(ctx context.Context, tx *sql.Tx) error { return s.complete(ctx, tx, p) }))
}

// complete runs complete.sql in tx, or on the pool when tx is nil.
func (s *Store) complete(ctx context.Context, tx *sql.Tx, p store.CompleteParams) error {
	return s.fenced(ctx, tx, s.stmts.complete, p.Fence,
		sql.Named("response", nonNil(p.Response)),
		sql.Named("expires_at", addMicros(s.clock(), p.Retention)),
	)
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return opError("release", f.Key, s.grouped(ctx, f.Key, false, func(ctx context.Context, tx *sql.Tx) error {
		return s.fenced(ctx, tx, s.stmts.release, f)
	}))
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, f store.Fence, lease time.Duration) (time.Time, error) {
	var until int64
	err := s.grouped(ctx, f.Key, false, func(ctx context.Context, tx *sql.Tx) error {
		until = addMicros(s.clock(), lease)
		return s.fenced(ctx, tx, s.stmts.extend, f, sql.Named("lease_until", until))
	})
	if err != nil {
		return time.Time{}, opError("extend", f.Key, err)
	}
	return fromMicros(until), nil
}

// MarkUnknown implements store.Store.
func (s *Store) MarkUnknown(ctx context.Context, f store.Fence) error {
	return opError("mark unknown", f.Key, s.grouped(ctx, f.Key, false, func(ctx context.Context, tx *sql.Tx) error {
		return s.fenced(ctx, tx, s.stmts.markUnknown, f)
	}))
}

// fenced runs one compare-and-set statement of a holder, in tx or on the
// pool when tx is nil: it changes the record only WHERE key, epoch and
// owner match and the state is PROCESSING, and reports store.ErrFenced when
// no row matched.
func (s *Store) fenced(ctx context.Context, tx *sql.Tx, st stmt, f store.Fence, args ...any) error {
	args = append(args,
		sql.Named("key", []byte(f.Key)),
		sql.Named("epoch", f.Epoch),
		sql.Named("owner", []byte(f.Owner)),
	)
	res, err := st.exec(ctx, tx, args...)
	if err != nil {
		return interpretError(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return interpretError(err)
	}
	if n == 0 {
		return store.ErrFenced
	}
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	rec, err := readRecord(ctx, nil, s.stmts.get, key, sql.Named("now", s.clock().UnixMicro()))
	if err != nil {
		return store.Record{}, opError("get", key, err)
	}
	return rec, nil
}

// readRecord runs read.sql or get.sql for key, with the statement's other
// arguments, in tx or on the pool when tx is nil, and maps its row.
func readRecord(ctx context.Context, tx *sql.Tx, st stmt, key string, args ...any) (store.Record, error) {
	var (
		r                              store.Record
		state                          int64
		owner                          []byte
		unknown, leaseUntil, expiresAt int64
	)
	args = append(args, sql.Named("key", []byte(key)))
	err := st.queryRow(ctx, tx, args...).Scan(&r.Fingerprint, &state, &r.Epoch, &owner, &unknown, &leaseUntil, &expiresAt, &r.Response)
	if err != nil {
		return store.Record{}, interpretError(err)
	}
	r.Key = key
	r.State = store.State(state)
	r.Owner = string(owner)
	r.Unknown = unknown != 0
	r.LeaseUntil = fromMicros(leaseUntil)
	r.ExpiresAt = fromMicros(expiresAt)
	return r, nil
}

// Sweep implements store.Store. It deletes the records with the oldest
// expiry first, in one statement.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.withWrite(ctx, func() error {
		res, err := s.stmts.sweep.exec(ctx, nil,
			sql.Named("now", s.clock().UnixMicro()),
			sql.Named("limit", int64(limit)),
		)
		if err != nil {
			return interpretError(err)
		}
		n, err = res.RowsAffected()
		return interpretError(err)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: sweep: %w", err)
	}
	return int(n), nil
}

// clock reads the store's clock at the precision the store keeps:
// microseconds, in UTC.
func (s *Store) clock() time.Time {
	return time.UnixMicro(s.now().UnixMicro()).UTC()
}

// addMicros returns t+d in microseconds since the Unix epoch, saturating
// instead of wrapping for absurd durations.
func addMicros(t time.Time, d time.Duration) int64 {
	now, dm := t.UnixMicro(), d.Microseconds()
	switch {
	case dm > 0 && now > math.MaxInt64-dm:
		return math.MaxInt64
	case dm < 0 && now < math.MinInt64-dm:
		return math.MinInt64
	}
	return now + dm
}

// fromMicros is the inverse of the stored times; 0 is "no time" (a lease
// that is not running).
func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// nonNil returns b, or an empty slice for nil: the driver binds a nil slice
// as NULL, which would never compare equal.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
