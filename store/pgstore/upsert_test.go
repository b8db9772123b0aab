package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// The claim statement answers most refusals from its plain read (seen), so
// the upsert's own conditions only decide when the record changed after the
// statement's snapshot. This runs the statement with that read blind, as
// that race would, and requires it to refuse every record the contract
// protects.
func TestClaimStatementRefusesWhatItMustNot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		prepare func(s *pgstore.Store, b *testBundle, f store.Fence)
		fp      string
	}{
		{"LiveLease", func(*pgstore.Store, *testBundle, store.Fence) {}, "fp"},
		{"OtherFingerprintLeaseEnded", func(_ *pgstore.Store, b *testBundle, _ store.Fence) { b.clock.Advance(time.Minute) }, "other"},
		{"Done", func(s *pgstore.Store, b *testBundle, f store.Fence) {
			if err := s.Complete(ctx, store.CompleteParams{Fence: f, Response: []byte("r"), Retention: time.Hour}); err != nil {
				t.Fatal(err)
			}
			b.clock.Advance(time.Minute)
		}, "fp"},
		{"DoneOtherFingerprint", func(s *pgstore.Store, b *testBundle, f store.Fence) {
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
			var (
				claimed     bool
				epoch       int64
				owner       []byte
				state       int16
				ignore      any
				fingerprint []byte
			)
			err = b.pool.QueryRow(ctx, pgstore.ClaimSQL, []byte("k"), []byte(tt.fp), []byte("b"),
				int64(30e6), int64(3600e6), b.clock.Now()).
				Scan(&claimed, &fingerprint, &state, &ignore, &epoch, &owner, &ignore, &ignore, &ignore, &ignore)
			if err != nil || claimed || string(owner) != "a" || epoch != 1 {
				t.Fatalf("statement on a protected record: claimed=%v owner=%q epoch=%d err=%v", claimed, owner, epoch, err)
			}
		})
	}
}
