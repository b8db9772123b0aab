package pgstore

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	var row recordRow
	err := s.pool.QueryRow(ctx, getSQL, []byte(key), s.clock()).Scan(row.dest()...)
	if err != nil {
		return store.Record{}, fmt.Errorf("idem/pgstore: get %q: %w", key, interpretError(err))
	}
	return row.record(key), nil
}

// Sweep implements store.Store. Records whose row is locked at that moment
// (a claim taking one over, another sweeper) are skipped, not waited for.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, sweepSQL, limit, s.clock())
	if err != nil {
		return 0, fmt.Errorf("idem/pgstore: sweep: %w", interpretError(err))
	}
	return int(tag.RowsAffected()), nil
}
