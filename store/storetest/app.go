package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"testing"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseApps checks store.AppStore by calling it directly: names and
// token hashes are unique, a token finds its application (and nothing
// once rotated out), updates keep the creation time, worker tokens are
// known or not.
func exerciseApps[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	hash := func(token string) []byte { h := sha256.Sum256([]byte(token)); return h[:] }
	app := func(name string, tokens ...string) store.App {
		a := store.App{Name: name, CallbackURL: "https://" + name + ".example/callbacks", Scheme: "idem",
			Secrets: []string{"secret-" + name}, CreatedAt: testclock.Epoch0}
		for _, tk := range tokens {
			a.TokenHashes = append(a.TokenHashes, hash(tk))
		}
		return a
	}
	t.Run("CreateFindRotateDisable", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.AppStore](t, open, nil)
		if err := s.CreateApp(ctx, app("orders", "tok-1")); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateApp(ctx, app("billing", "tok-b")); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateApp(ctx, app("orders", "tok-other")); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("same name: %v, want ErrDuplicate", err)
		}
		if err := s.CreateApp(ctx, app("shipping", "tok-1")); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("another application's token: %v, want ErrDuplicate", err)
		}
		if _, err := s.GetApp(ctx, "shipping"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the refused application was written: %v", err)
		}
		got, err := s.AppByToken(ctx, hash("tok-1"))
		if err != nil || got.Name != "orders" || got.CallbackURL != "https://orders.example/callbacks" || got.Scheme != "idem" ||
			!slices.Equal(got.Secrets, []string{"secret-orders"}) || got.Disabled || !got.CreatedAt.Equal(testclock.Epoch0) {
			t.Fatalf("by token: %+v %v", got, err)
		}
		if _, err := s.AppByToken(ctx, hash("unknown")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown token: %v", err)
		}
		// Rotate: both tokens work, then only the new one.
		got.TokenHashes = append(got.TokenHashes, hash("tok-2"))
		got.Secrets = []string{"secret-2", "secret-orders"}
		got.CreatedAt = testclock.Epoch0.AddDate(1, 0, 0) // ignored
		if err := s.UpdateApp(ctx, got); err != nil {
			t.Fatal(err)
		}
		for _, tk := range []string{"tok-1", "tok-2"} {
			if a, err := s.AppByToken(ctx, hash(tk)); err != nil || a.Name != "orders" || !slices.Equal(a.Secrets, []string{"secret-2", "secret-orders"}) {
				t.Fatalf("%s during the rotation: %+v %v", tk, a, err)
			}
		}
		got.TokenHashes = [][]byte{hash("tok-2")}
		got.Disabled = true
		if err := s.UpdateApp(ctx, got); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppByToken(ctx, hash("tok-1")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("rotated-out token: %v", err)
		}
		if a, err := s.AppByToken(ctx, hash("tok-2")); err != nil || !a.Disabled || !a.CreatedAt.Equal(testclock.Epoch0) {
			t.Fatalf("disabled: %+v %v", a, err)
		}
		b := app("billing", "tok-2") // another application's token
		if err := s.UpdateApp(ctx, b); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("taking another application's token: %v", err)
		}
		if err := s.UpdateApp(ctx, app("nobody")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("update unknown: %v", err)
		}
		apps, err := s.ListApps(ctx)
		if err != nil || len(apps) != 2 || apps[0].Name != "billing" || apps[1].Name != "orders" {
			t.Fatalf("list %+v %v", apps, err)
		}
	})
	t.Run("GetAppTx", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.AppStore](t, open, nil)
		ts, ok := s.(store.AppTxStore[TX])
		if !ok {
			return // reads outside transactions only
		}
		tr, ok := s.(store.Transactor[TX])
		if !ok {
			t.Fatalf("%T is an AppTxStore without transactions", s)
		}
		if err := s.CreateApp(ctx, app("orders", "tok")); err != nil {
			t.Fatal(err)
		}
		if err := tr.InTx(ctx, func(ctx context.Context, tx TX) error {
			a, err := ts.GetAppTx(ctx, tx, "orders")
			if err != nil || a.CallbackURL != "https://orders.example/callbacks" || len(a.TokenHashes) != 1 {
				t.Errorf("GetAppTx: %+v %v", a, err)
			}
			if _, err := ts.GetAppTx(ctx, tx, "nobody"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetAppTx of an unknown application: %v", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("WorkerTokens", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.AppStore](t, open, nil)
		if ok, err := s.WorkerToken(ctx, hash("w")); ok || err != nil {
			t.Fatalf("unknown worker token: %v %v", ok, err)
		}
		if err := s.AddWorkerToken(ctx, hash("w"), testclock.Epoch0); err != nil {
			t.Fatal(err)
		}
		if err := s.AddWorkerToken(ctx, hash("w"), testclock.Epoch0); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("same worker token: %v", err)
		}
		if ok, err := s.WorkerToken(ctx, hash("w")); !ok || err != nil {
			t.Fatalf("worker token: %v %v", ok, err)
		}
	})
}
