package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/store"
)

// Every write by a claim holder is one UPDATE whose WHERE is the fence
// (key, epoch, owner, state = processing); no row updated is ErrFenced.

// execer runs a statement on the pool or in a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	return s.complete(ctx, s.pool, p)
}

// CompleteTx implements store.TxStore: Complete inside tx, so that it
// commits or rolls back with the caller's own writes in tx. On ErrFenced
// the caller must roll tx back.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, p store.CompleteParams) error {
	return s.complete(ctx, tx, p)
}

func (s *Store) complete(ctx context.Context, db execer, p store.CompleteParams) error {
	return fenced(ctx, db, "complete", p.Fence, completeSQL, p.Response, p.Retention.Microseconds(), s.clock())
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return fenced(ctx, s.pool, "release", f, releaseSQL)
}

// MarkUnknown implements store.Store.
func (s *Store) MarkUnknown(ctx context.Context, f store.Fence) error {
	return fenced(ctx, s.pool, "mark unknown", f, markUnknownSQL)
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, f store.Fence, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := s.pool.QueryRow(ctx, extendSQL, fenceArgs(f, lease.Microseconds(), s.clock())...).Scan(&until)
	if err = interpretError(err); errors.Is(err, store.ErrNotFound) { // no row for this fence
		return time.Time{}, store.ErrFenced
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("idem/pgstore: extend %q: %w", f.Key, err)
	}
	return until.UTC(), nil
}

// fenced runs one fenced UPDATE, whose first parameters are the fence and
// the rest are more, and turns "no row updated" into ErrFenced.
func fenced(ctx context.Context, db execer, op string, f store.Fence, sql string, more ...any) error {
	tag, err := db.Exec(ctx, sql, fenceArgs(f, more...)...)
	if err != nil {
		return fmt.Errorf("idem/pgstore: %s %q: %w", op, f.Key, interpretError(err))
	}
	if tag.RowsAffected() == 0 {
		return store.ErrFenced
	}
	return nil
}

// fenceArgs returns the fence as the first parameters of a fenced statement
// ($1 key, $2 epoch, $3 owner), followed by more.
func fenceArgs(f store.Fence, more ...any) []any {
	return append([]any{[]byte(f.Key), f.Epoch, []byte(f.Owner)}, more...)
}
