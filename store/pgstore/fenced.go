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

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	return s.groupedFence(ctx, "complete", p.Fence, completeSQL, p.Response, p.Retention.Microseconds(), s.clock())
}

// CompleteTx implements store.TxStore: Complete inside tx, so that it
// commits or rolls back with the caller's own writes in tx. On ErrFenced
// the caller must roll tx back.
//
// In a transaction of BeginTx or InTx the completion is the statement
// that goes out with the next one or with the COMMIT (lazyTx), saving its
// round trip: CompleteTx then returns nil, and a fence that no longer
// holds fails that statement or the commit instead, with an error that
// matches store.ErrFenced, and the transaction rolls back whole. In
// another pgx.Tx it runs at once and returns ErrFenced itself.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, p store.CompleteParams) error {
	err := later(ctx, tx, completeTxSQL, fenceArgs(p.Fence, p.Response, p.Retention.Microseconds(), s.clock())...)
	if err != nil {
		return fmt.Errorf("idem/pgstore: complete %q: %w", p.Key, interpretError(err))
	}
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	return s.groupedFence(ctx, "release", f, releaseSQL)
}

// MarkUnknown implements store.Store.
func (s *Store) MarkUnknown(ctx context.Context, f store.Fence) error {
	return s.groupedFence(ctx, "mark unknown", f, markUnknownSQL)
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, f store.Fence, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := s.grouped(ctx, f.Key, extendSQL, fenceArgs(f, lease.Microseconds(), s.clock()), false, func(r groupResult) error {
		return r.QueryRow().Scan(&until)
	})
	if err = interpretError(err); errors.Is(err, store.ErrNotFound) { // no row for this fence
		return time.Time{}, store.ErrFenced
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("idem/pgstore: extend %q: %w", f.Key, err)
	}
	return until.UTC(), nil
}

// groupedFence runs one fenced UPDATE, whose first parameters are the
// fence and the rest are more, through the group (group.go): the writes of
// claim holders outside their own transactions. No row updated is
// ErrFenced.
func (s *Store) groupedFence(ctx context.Context, op string, f store.Fence, sql string, more ...any) error {
	var tag pgconn.CommandTag
	err := s.grouped(ctx, f.Key, sql, fenceArgs(f, more...), false, func(r groupResult) error {
		var err error
		tag, err = r.Exec()
		return err
	})
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
