package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem/store"
)

// claimAttempts bounds how often Claim runs its statement. The statement
// returns no row only when the key's row was committed by someone else
// after the statement took its snapshot; the next run sees that row, so a
// second attempt answers unless the row is swept and inserted again in
// between, every time.
const claimAttempts = 8

// Claim implements store.Store in one statement (sql/claim.sql), through
// the group (group.go): a replay or an in-flight duplicate is answered by
// its plain read, and a grant is an INSERT ... ON CONFLICT DO UPDATE whose
// WHERE is the takeover rule.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	key, fingerprint, owner := []byte(p.Key), orEmpty(p.Fingerprint), []byte(p.Owner)
	for attempt := 1; attempt <= claimAttempts; attempt++ {
		var (
			row     recordRow
			claimed bool
			now     time.Time
		)
		err := s.grouped(ctx, p.Key, claimSQL, []any{key, fingerprint, owner,
			p.Lease.Microseconds(), p.Retention.Microseconds(), s.clock()}, p.Transactional, func(r groupResult) error {
			return r.QueryRow().Scan(append(row.dest(&claimed), &now)...)
		})
		if err == nil {
			return store.ClaimResult{Claimed: claimed, Record: row.record(p.Key), Now: now.UTC()}, nil
		}
		if err = interpretError(err); !errors.Is(err, store.ErrNotFound) {
			return store.ClaimResult{}, fmt.Errorf("idem/pgstore: claim %q: %w", p.Key, err)
		}
		s.logger.DebugContext(ctx, "idem/pgstore: claim met a row inserted concurrently, running it again",
			slog.Int("attempt", attempt))
	}
	return store.ClaimResult{}, fmt.Errorf("idem/pgstore: claim %q: no answer after %d attempts: the row keeps being deleted and inserted again", p.Key, claimAttempts)
}
