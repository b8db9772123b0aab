package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: an
// upstream call, a heartbeat, an idle connection, a store pool.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
