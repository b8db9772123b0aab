package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testAddr is the Redis server the tests use.
func testAddr() string {
	if addr := os.Getenv("IDEM_TEST_REDIS"); addr != "" {
		return addr
	}
	return "127.0.0.1:6379"
}

// testClient returns a client to the test server, closed at cleanup. It
// fails the test when the server cannot be reached: the store is only ever
// tested against a real Redis.
func testClient(tb testing.TB) *redis.Client {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: testAddr()})
	tb.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s (IDEM_TEST_REDIS) is unreachable: %v", testAddr(), err)
	}
	return client
}

// testPrefix returns a key prefix unique to this test and deletes every key
// under it at cleanup (registered after the client, so it runs before the
// client closes).
func testPrefix(tb testing.TB, client *redis.Client) string {
	tb.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "idemtest:" + hex.EncodeToString(b[:]) + ":"
	tb.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		keys := make([]string, 0, 1000)
		del := func() {
			if len(keys) == 0 {
				return
			}
			if err := client.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("delete %s*: %v", prefix, err)
			}
			keys = keys[:0]
		}
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == cap(keys) {
				del()
			}
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("scan %s*: %v", prefix, err)
		}
		del()
	})
	return prefix
}

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
	client := testClient(tb)
	prefix := testPrefix(tb, client)
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
