package memstore_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, now func() time.Time) store.Store {
		return memstore.New(&memstore.Config{Now: now})
	})
}
