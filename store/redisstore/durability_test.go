package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/testutil/testdb"
)

func TestDurability(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		appendonly, appendfsync string
		durable                 bool
		reason                  string
	}{
		{"yes", "always", true, ""},
		{"YES", "Always", true, ""},
		{"yes", "everysec", false, "appendfsync"},
		{"yes", "no", false, "appendfsync"},
		{"no", "always", false, "appendonly"},
		{"", "", false, "appendonly"},
	} {
		durable, reason := durability(tc.appendonly, tc.appendfsync)
		if durable != tc.durable || !strings.Contains(reason, tc.reason) {
			t.Errorf("durability(%q, %q) = %v, %q; want %v, mentioning %q",
				tc.appendonly, tc.appendfsync, durable, reason, tc.durable, tc.reason)
		}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RefusesNonDurable", func(t *testing.T) {
		t.Parallel()
		client := testdb.Redis(t)
		// The test server has appendonly no.
		_, err := New(ctx, client, nil)
		if !errors.Is(err, ErrNotDurable) {
			t.Fatalf("New without AllowNonDurable = %v, want ErrNotDurable", err)
		}
		if !strings.Contains(err.Error(), "appendonly") {
			t.Errorf("error %q does not name the missing setting", err)
		}
	})

	t.Run("AllowNonDurable", func(t *testing.T) {
		t.Parallel()
		client := testdb.Redis(t)
		s, err := New(ctx, client, &Config{AllowNonDurable: true})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		if s.Capabilities().Durable {
			t.Fatal("Durable = true on a server with appendonly no")
		}
		if s.prefix != DefaultPrefix {
			t.Errorf("prefix = %q, want %q", s.prefix, DefaultPrefix)
		}
	})

	t.Run("ConfigRefused", func(t *testing.T) {
		t.Parallel()
		client := testdb.Redis(t)
		client.AddHook(refuseConfig{})
		_, err := New(ctx, client, nil)
		if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "CONFIG") {
			t.Fatalf("New with CONFIG refused = %v, want ErrNotDurable naming CONFIG", err)
		}
		s, err := New(ctx, client, &Config{AllowNonDurable: true})
		if err != nil {
			t.Fatalf("New with CONFIG refused and AllowNonDurable: %v", err)
		}
		if s.Capabilities().Durable {
			t.Fatal("Durable = true though CONFIG was refused")
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		_, err := New(ctx, client, &Config{AllowNonDurable: true})
		if err == nil || errors.Is(err, ErrNotDurable) {
			t.Fatalf("New on a closed port = %v, want a connection error", err)
		}
	})

	t.Run("InvalidPrefix", func(t *testing.T) {
		t.Parallel()
		client := testdb.Redis(t)
		_, err := New(ctx, client, &Config{Prefix: strings.Repeat("p", maxPrefixLen+1), AllowNonDurable: true})
		if err == nil || !strings.Contains(err.Error(), "Config.Prefix") {
			t.Fatalf("New with a long prefix = %v, want an error naming Config.Prefix", err)
		}
	})
}

// refuseConfig answers CONFIG the way a managed Redis that disabled it does.
type refuseConfig struct{}

func (refuseConfig) DialHook(next redis.DialHook) redis.DialHook { return next }

func (refuseConfig) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "config" {
			cmd.SetErr(serverError("ERR unknown command 'CONFIG'"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (refuseConfig) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// serverError is an error reply from the server (a redis.Error).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}
