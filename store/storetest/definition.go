package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseDefinitions checks store.DefinitionStore by calling it directly:
// versions count from 1 per application, kind and name; an unchanged body
// is no new version; a version never changes; concurrent puts get
// distinct versions, and concurrent puts of one body one version.
func exerciseDefinitions[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	t0 := testclock.Epoch0
	checkout := store.DefinitionKey{App: "shop", Kind: "workflow", Name: "checkout"}
	put := func(t *testing.T, s store.DefinitionStore, k store.DefinitionKey, body string) (store.Definition, bool) {
		t.Helper()
		d, created, err := s.PutDefinition(ctx, k, []byte(body), t0)
		if err != nil {
			t.Fatal(err)
		}
		return d, created
	}
	get := func(t *testing.T, s store.DefinitionStore, k store.DefinitionKey, version int) store.Definition {
		t.Helper()
		d, err := s.GetDefinition(ctx, k, version)
		if err != nil {
			t.Fatalf("get %v version %d: %v", k, version, err)
		}
		return d
	}

	t.Run("VersionsCountAndStay", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.DefinitionStore](t, open, nil)
		if _, err := s.GetDefinition(ctx, checkout, 0); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("before any put: %v, want ErrNotFound", err)
		}
		if d, created := put(t, s, checkout, `{"v":1}`); !created || d.Version != 1 || d.Name != "checkout" || !d.CreatedAt.Equal(t0) {
			t.Fatalf("first put: %+v created %v", d, created)
		}
		if d, created := put(t, s, checkout, `{"v":1}`); created || d.Version != 1 {
			t.Fatalf("the same body again: %+v created %v, want version 1, not created", d, created)
		}
		if d, created := put(t, s, checkout, `{"v":2}`); !created || d.Version != 2 {
			t.Fatalf("another body: %+v created %v", d, created)
		}
		if d, created := put(t, s, checkout, `{"v":1}`); !created || d.Version != 3 {
			t.Fatalf("the first body after another: %+v created %v, want version 3", d, created)
		}
		if d := get(t, s, checkout, 0); d.Version != 3 || string(d.Body) != `{"v":1}` {
			t.Fatalf("latest: %+v", d)
		}
		if d := get(t, s, checkout, 2); d.Version != 2 || string(d.Body) != `{"v":2}` {
			t.Fatalf("version 2: %+v", d)
		}
		for _, v := range []int{4, -1} {
			if _, err := s.GetDefinition(ctx, checkout, v); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("version %d: %v, want ErrNotFound", v, err)
			}
		}
	})

	t.Run("ScopedByApplicationKindAndName", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.DefinitionStore](t, open, nil)
		put(t, s, checkout, `{"v":1}`)
		for _, k := range []store.DefinitionKey{
			{App: "other", Kind: "workflow", Name: "checkout"},
			{App: "shop", Kind: "connection", Name: "checkout"},
			{App: "shop", Kind: "workflow", Name: "checkout2"},
		} {
			if _, err := s.GetDefinition(ctx, k, 0); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%+v sees another's definition: %v", k, err)
			}
			if d, created := put(t, s, k, `{"v":1}`); !created || d.Version != 1 {
				t.Fatalf("%+v: its own first version: %+v %v", k, d, created)
			}
		}
	})

	t.Run("LatestOfEachByApplicationAndName", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.DefinitionStore](t, open, nil)
		if ds, err := s.LatestDefinitions(ctx, "workflow"); err != nil || len(ds) != 0 {
			t.Fatalf("none stored: %v %v", ds, err)
		}
		put(t, s, checkout, `{"v":1}`)
		put(t, s, checkout, `{"v":2}`)
		put(t, s, store.DefinitionKey{App: "shop", Kind: "workflow", Name: "billing"}, `{"b":1}`)
		put(t, s, store.DefinitionKey{App: "other", Kind: "workflow", Name: "checkout"}, `{"o":1}`)
		put(t, s, store.DefinitionKey{App: "shop", Kind: "connection", Name: "payments"}, `{"c":1}`)
		ds, err := s.LatestDefinitions(ctx, "workflow")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range ds {
			got = append(got, fmt.Sprintf("%s/%s/%s v%d %s", d.App, d.Kind, d.Name, d.Version, d.Body))
		}
		want := []string{`other/workflow/checkout v1 {"o":1}`, `shop/workflow/billing v1 {"b":1}`, `shop/workflow/checkout v2 {"v":2}`}
		if !slices.Equal(got, want) {
			t.Fatalf("latest %v, want %v", got, want)
		}
	})

	t.Run("ConcurrentPutsGetDistinctVersions", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.DefinitionStore](t, open, nil)
		const n = 8
		got := make([]store.Definition, n)
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			got[i], _, errs[i] = s.PutDefinition(ctx, checkout, fmt.Appendf(nil, `{"v":%d}`, i), t0)
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		versions := make([]int, n)
		for i, d := range got {
			versions[i] = d.Version
			if back := get(t, s, checkout, d.Version); string(back.Body) != fmt.Sprintf(`{"v":%d}`, i) {
				t.Fatalf("version %d holds %s, written as %d", d.Version, back.Body, i)
			}
		}
		slices.Sort(versions)
		if !slices.Equal(versions, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
			t.Fatalf("versions %v, want 1 to 8 once each", versions)
		}
	})

	t.Run("ConcurrentIdenticalPutsMakeOneVersion", func(t *testing.T) {
		t.Parallel()
		s, _ := OpenAs[store.DefinitionStore](t, open, nil)
		const n = 8
		created := make([]bool, n)
		got := make([]store.Definition, n)
		errs := make([]error, n)
		Concurrently(n, func(i int) {
			got[i], created[i], errs[i] = s.PutDefinition(ctx, checkout, []byte(`{"v":1}`), t0)
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if c := len(slices.DeleteFunc(slices.Clone(created), func(b bool) bool { return !b })); c != 1 {
			t.Fatalf("%d puts created a version, want 1", c)
		}
		for _, d := range got {
			if d.Version != 1 {
				t.Fatalf("a put answered version %d, want 1", d.Version)
			}
		}
	})
}
