package pgstore

import (
	"time"

	"github.com/idemhq/idem/store"
)

// recordRow receives the record columns that claim.sql and get.sql return,
// in this order: fingerprint, state, unknown, epoch, owner, lease_until,
// expires_at, response.
type recordRow struct {
	fingerprint []byte
	state       int16
	unknown     bool
	epoch       int64
	owner       []byte
	leaseUntil  *time.Time
	expiresAt   time.Time
	response    []byte
}

// dest returns the scan destinations, after any given before them.
func (r *recordRow) dest(before ...any) []any {
	return append(before, &r.fingerprint, &r.state, &r.unknown, &r.epoch,
		&r.owner, &r.leaseUntil, &r.expiresAt, &r.response)
}

// record converts the row; times are returned in UTC.
func (r *recordRow) record(key string) store.Record {
	rec := store.Record{
		Key:         key,
		Fingerprint: r.fingerprint,
		State:       store.State(r.state),
		Epoch:       r.epoch,
		Owner:       string(r.owner),
		Unknown:     r.unknown,
		ExpiresAt:   r.expiresAt.UTC(),
		Response:    r.response,
	}
	if r.leaseUntil != nil {
		rec.LeaseUntil = r.leaseUntil.UTC()
	}
	return rec
}

// orEmpty keeps nil byte slices out of NOT NULL columns (pgx sends nil as
// NULL).
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
