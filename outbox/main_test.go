package outbox_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the relay child of TestRelayChaos when asked to, and
// otherwise the tests, failing the package if one leaves a goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(envRelayDB) != "" {
		os.Exit(relayMain())
	}
	goleak.VerifyTestMain(m)
}
