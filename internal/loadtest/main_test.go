package loadtest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (a
// server, a client connection, a history writer).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
