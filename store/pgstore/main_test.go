package pgstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a
// heartbeat timer, a pool, a store connection).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
