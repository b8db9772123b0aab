package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/testutil/testdb"
)

// testBundle is what setup returns next to the store.
type testBundle struct {
	client *redis.Client
	prefix string
}

// newTestStore returns a store isolated by its own key prefix, on the clock
// now (nil: the server's clock). The test server runs without AOF, so the
// store opts in to running non-durable.
func newTestStore(tb testing.TB, now func() time.Time) (*Store, testBundle) {
	tb.Helper()
	client := testdb.Redis(tb)
	prefix := testdb.RedisPrefix(tb)
	s, err := New(context.Background(), client, &Config{
		Prefix:          prefix,
		Now:             now,
		AllowNonDurable: true,
	})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return s, testBundle{client: client, prefix: prefix}
}
