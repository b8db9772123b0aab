package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseSecrets checks store.SecretStore by calling it directly: a
// secret is set, replaced, listed by name and deleted per application, and
// one application never reads another's.
func exerciseSecrets[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	t0 := testclock.Epoch0
	t.Run("SetReplaceListDelete", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.SecretStore](t, open, nil)
		if names, err := s.SecretNames(ctx, "shop"); err != nil || len(names) != 0 || names == nil {
			t.Fatalf("no secrets: %#v %v, want an empty list", names, err)
		}
		for _, kv := range [][2]string{{"PAYMENTS_KEY", "sk_1"}, {"API", "a"}, {"PAYMENTS_KEY", "sk_2"}} {
			if err := s.PutSecret(ctx, "shop", kv[0], []byte(kv[1]), t0); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutSecret(ctx, "other", "PAYMENTS_KEY", []byte("theirs"), t0); err != nil {
			t.Fatal(err)
		}
		if v, err := s.GetSecret(ctx, "shop", "PAYMENTS_KEY"); err != nil || string(v) != "sk_2" {
			t.Fatalf("replaced: %q %v", v, err)
		}
		if v, err := s.GetSecret(ctx, "other", "PAYMENTS_KEY"); err != nil || string(v) != "theirs" {
			t.Fatalf("the other application's: %q %v", v, err)
		}
		if names, err := s.SecretNames(ctx, "shop"); err != nil || !slices.Equal(names, []string{"API", "PAYMENTS_KEY"}) {
			t.Fatalf("names %v %v", names, err)
		}
		if _, err := s.GetSecret(ctx, "shop", "NOPE"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown secret: %v", err)
		}
		if err := s.DeleteSecret(ctx, "shop", "API"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSecret(ctx, "shop", "API"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted twice: %v", err)
		}
		if _, err := s.GetSecret(ctx, "shop", "API"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a deleted secret: %v", err)
		}
		if err := s.PutSecret(ctx, "shop", "EMPTY", nil, t0); err != nil {
			t.Fatal(err)
		}
		if v, err := s.GetSecret(ctx, "shop", "EMPTY"); err != nil || len(v) != 0 {
			t.Fatalf("an empty value: %q %v", v, err)
		}
	})
}
