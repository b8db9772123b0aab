package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// Claim answers most refusals from its unlocked read, so the upsert's own
// conditions only decide when another process changed the record between
// the read and the write. This drives the upsert directly, as that race
// would, and requires it to refuse every record the contract protects.
func TestUpsertRefusesWhatItMustNot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		prepare func(s *Store, b *bundle, f store.Fence)
		fp      string
	}{
		{"LiveLease", func(*Store, *bundle, store.Fence) {}, "fp"},
		{"OtherFingerprintLeaseEnded", func(_ *Store, b *bundle, _ store.Fence) { b.clock.Advance(time.Minute) }, "other"},
		{"Done", func(s *Store, b *bundle, f store.Fence) {
			if err := s.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("r"), Retention: time.Hour}); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Minute)
		}, "fp"},
		{"DoneOtherFingerprint", func(s *Store, b *bundle, f store.Fence) {
			if err := s.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("r"), Retention: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}, "other"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			first, err := s.Claim(ctx, store.ClaimParams{Key: "k", Fingerprint: []byte("fp"), Owner: "a", Lease: 30 * time.Second, Retention: time.Hour})
			if err != nil || !first.Claimed {
				t.Fatal(first, err)
			}
			tt.prepare(s, b, store.Fence{Key: "k", Epoch: 1, Owner: "a"})
			before, _ := s.Get(ctx, "k")
			var res store.ClaimResult
			var done bool
			err = s.withWrite(ctx, func() error {
				var err error
				res, done, err = s.claimOnce(ctx, nil, store.ClaimParams{Key: "k", Fingerprint: []byte(tt.fp), Owner: "b", Lease: 30 * time.Second, Retention: time.Hour})
				return err
			})
			if err != nil || !done || res.Claimed {
				t.Fatalf("upsert on a protected record: %+v done=%v err=%v", res, done, err)
			}
			after, _ := s.Get(ctx, "k")
			if after.Owner != before.Owner || after.Epoch != before.Epoch || after.State != before.State {
				t.Fatalf("refused upsert changed the record: %+v -> %+v", before, after)
			}
		})
	}
}
