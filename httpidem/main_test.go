package httpidem_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a guard
// goroutine waiting for a handler, a heartbeat, a server, a pool).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
