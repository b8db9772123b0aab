package redisstore

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest"
)

// TestConformance runs the shared suite, each store under its own key
// prefix. Redis shares no transaction with business data, so there is no
// ExerciseTx.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T, now func() time.Time) store.Store {
		s, _ := newTestStore(t, now)
		return s
	})
}
