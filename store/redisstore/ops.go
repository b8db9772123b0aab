package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// Claim grants the key as store.Store.Claim describes, in one script
// (claim.lua). An error other than a validation error may hide a granted
// claim: resolve it with Get (the record's Owner is p.Owner), never by
// running the operation.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := checkKey(p.Key); err != nil {
		return store.ClaimResult{}, err
	}
	lease, err := micros("Lease", p.Lease)
	if err != nil {
		return store.ClaimResult{}, err
	}
	retention, err := micros("Retention", p.Retention)
	if err != nil {
		return store.ClaimResult{}, err
	}
	v, err := claimScript.Run(ctx, s.client, s.redisKey(p.Key),
		s.clockArg(), p.Fingerprint, p.Owner, lease, retention).Slice()
	if err != nil {
		return store.ClaimResult{}, opError("claim", p.Key, err)
	}
	claimed, now, rec, err := parseRecord(p.Key, v)
	if err != nil {
		return store.ClaimResult{}, opError("claim", p.Key, err)
	}
	return store.ClaimResult{Claimed: claimed, Record: rec, Now: now}, nil
}

// Complete stores the response on a held record (complete.lua). Returns
// store.ErrFenced when the fence does not hold. Another error may hide a
// completion that happened: read the record again with Get.
//
// A Retention of zero or less keeps the response for no time: Redis deletes
// the record at once (the memory model's ExpiresAt = now).
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	err := completeScript.Run(ctx, s.client, s.redisKey(p.Key),
		s.clockArg(), p.Epoch, p.Owner, p.Response, p.Retention.Microseconds()).Err()
	if err != nil {
		return opError("complete", p.Key, err)
	}
	return nil
}

// Release gives a held claim back (release.lua). Returns store.ErrFenced
// when the fence does not hold.
func (s *Store) Release(ctx context.Context, f store.Fence) error {
	err := releaseScript.Run(ctx, s.client, s.redisKey(f.Key),
		s.clockArg(), f.Epoch, f.Owner).Err()
	if err != nil {
		return opError("release", f.Key, err)
	}
	return nil
}

// Extend renews a held lease to now+lease (extend.lua) and returns the new
// LeaseUntil. Returns store.ErrFenced when the fence does not hold.
func (s *Store) Extend(ctx context.Context, f store.Fence, lease time.Duration) (time.Time, error) {
	us, err := micros("lease", lease)
	if err != nil {
		return time.Time{}, err
	}
	until, err := extendScript.Run(ctx, s.client, s.redisKey(f.Key),
		s.clockArg(), f.Epoch, f.Owner, us).Int64()
	if err != nil {
		return time.Time{}, opError("extend", f.Key, err)
	}
	return fromMicros(until), nil
}

// MarkUnknown flags a held record's outcome as unknown, keeping its lease
// (mark_unknown.lua). Returns store.ErrFenced when the fence does not hold.
func (s *Store) MarkUnknown(ctx context.Context, f store.Fence) error {
	err := markUnknownScript.Run(ctx, s.client, s.redisKey(f.Key),
		s.clockArg(), f.Epoch, f.Owner).Err()
	if err != nil {
		return opError("mark unknown", f.Key, err)
	}
	return nil
}

// Get returns the live record for key (get.lua), or store.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	v, err := getScript.Run(ctx, s.client, s.redisKey(key), s.clockArg()).Slice()
	if err != nil {
		return store.Record{}, opError("get", key, err)
	}
	_, _, rec, err := parseRecord(key, v)
	if err != nil {
		return store.Record{}, opError("get", key, err)
	}
	return rec, nil
}

// checkKey enforces the contract's key length.
func checkKey(key string) error {
	if len(key) < 1 || len(key) > 255 {
		return fmt.Errorf("redisstore: key is %d bytes, want 1 to 255", len(key))
	}
	return nil
}

// micros converts a positive duration to whole microseconds, the unit of
// every stored time.
func micros(name string, d time.Duration) (int64, error) {
	us := d.Microseconds()
	if us < 1 {
		return 0, fmt.Errorf("redisstore: %s is %v, want at least 1µs", name, d)
	}
	return us, nil
}
