package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/store"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "idem:"

// maxPrefixLen bounds Config.Prefix; with a key of up to 255 bytes a record's
// Redis key stays small.
const maxPrefixLen = 256

// Config configures a Store. A nil *Config means all defaults.
type Config struct {
	// Prefix is put before every key to form the record's Redis key, so that
	// idem shares a server with other data (and tests isolate themselves).
	// Defaults to "idem:".
	Prefix string

	// Now is the clock that leases and retention are measured on. Nil means
	// the Redis server's clock (TIME, read inside each script, so that every
	// process sharing the server agrees); tests set it to control time.
	// Records are still deleted by Redis after the remaining retention in
	// real time. Defaults to nil (the server's clock).
	Now func() time.Time

	// AllowNonDurable lets New succeed when the server does not fsync every
	// write (appendonly yes and appendfsync always) or does not let the store
	// check. Claims may then be lost in a crash, and an operation may run
	// twice; Capabilities().Durable reports false. Defaults to false.
	AllowNonDurable bool

	// Logger receives a warning when the store runs without durability.
	// Defaults to a logger that discards everything.
	Logger *slog.Logger
}

// ErrBadConfig is wrapped by the error New returns when a Config field is
// missing or out of range; the message names the field.
var ErrBadConfig = errors.New("redisstore: bad config")

// validate names the offending field.
func (c *Config) validate() error {
	if len(c.Prefix) > maxPrefixLen {
		return fmt.Errorf("%w: Config.Prefix is %d bytes, at most %d", ErrBadConfig, len(c.Prefix), maxPrefixLen)
	}
	return nil
}

// Store is the Redis store of request-key records. It is safe for concurrent
// use; each method is one script call (one round trip).
type Store struct {
	client  redis.UniversalClient
	prefix  string
	now     func() time.Time
	durable bool
}

var _ store.Store = (*Store)(nil)

// New returns a store on client, which the caller keeps and closes. It reads
// the server's appendonly and appendfsync settings to report durability and
// returns an error wrapping ErrNotDurable when they do not make claims
// survive a crash, unless cfg.AllowNonDurable is set. It fails when the
// server cannot be reached.
func New(ctx context.Context, client redis.UniversalClient, cfg *Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: client is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}

	durable, reason, err := probeDurability(ctx, client)
	if err != nil {
		return nil, err
	}
	if !durable {
		if !c.AllowNonDurable {
			return nil, fmt.Errorf("%w: %s (or set Config.AllowNonDurable)", ErrNotDurable, reason)
		}
		c.Logger.WarnContext(ctx, "redisstore: redis is not durable; a claim may be lost in a crash", "reason", reason)
	}

	return &Store{
		client:  client,
		prefix:  c.Prefix,
		now:     c.Now,
		durable: durable,
	}, nil
}

// Capabilities reports durability as found by New; Redis shares no
// transaction with business data, many processes may share the server, and
// Redis deletes expired records itself (key TTLs).
func (s *Store) Capabilities() store.Capabilities {
	return store.Capabilities{Durable: s.durable, Transactions: false, Shared: true, SelfExpiring: true}
}

// Sweep returns 0, nil: Redis deletes each record itself at its expires_at
// (the hash's TTL), never before a live lease ends, so there is nothing to
// sweep.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	return 0, nil
}

// redisKey is the record's Redis key. Keys are opaque bytes; Redis keys are
// binary safe.
func (s *Store) redisKey(key string) []string {
	return []string{s.prefix + key}
}

// clockArg is ARGV[1] of every script: the injected clock in microseconds,
// or "" for the server's TIME.
func (s *Store) clockArg() string {
	if s.now == nil {
		return ""
	}
	return strconv.FormatInt(s.now().UnixMicro(), 10)
}
