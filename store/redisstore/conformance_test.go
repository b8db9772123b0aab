package redisstore

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// open returns a store under its own key prefix. Redis shares no
// transaction with business data: its TX is any, and it has no ledger.
func open(t *testing.T, now func() time.Time) storetest.Subject[any] {
	s, _ := newTestStore(t, now)
	return storetest.Subject[any]{Store: s}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, open)
}

func TestFlows(t *testing.T) {
	t.Parallel()
	flowtest.Exercise(t, open)
}
