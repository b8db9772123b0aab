package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/redisstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// storeOpts are the choices a command makes about opening its store.
type storeOpts struct {
	// migrate applies pending migrations (SQLite, PostgreSQL) before
	// opening; otherwise an unmigrated store is refused.
	migrate bool
	// allowNonDurable accepts a Redis server that does not fsync every
	// write.
	allowNonDurable bool
	// redisPrefix is the Redis key prefix ("" means redisstore's default).
	redisPrefix string
	logger      *slog.Logger
}

// openedStore is a store with what it takes to close it and a description
// for logs that holds no password.
type openedStore struct {
	store.Store
	kind  storeKind
	desc  string
	close func()
}

// openStore opens the store named by a --store value.
func openStore(ctx context.Context, v string, o storeOpts) (*openedStore, error) {
	kind, target, err := parseStore(v)
	if err != nil {
		return nil, err
	}
	switch kind {
	case kindSQLite:
		return openSQLite(ctx, target, o)
	case kindPostgres:
		return openPostgres(ctx, target, o)
	case kindRedis:
		return openRedis(ctx, target, o)
	default:
		o.logger.Warn("memory store: keys live in this process only and are lost when it stops; several proxies cannot share it")
		return &openedStore{Store: memstore.New(nil), kind: kindMemory, desc: "memory:", close: func() {}}, nil
	}
}

func openSQLite(ctx context.Context, path string, o storeOpts) (*openedStore, error) {
	hint := fmt.Sprintf("run `idem migrate --store sqlite:%s` first, or start with --migrate", path)
	if !o.migrate {
		// Do not create an empty file only to refuse it.
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sqlite:%s does not exist: %s", path, hint)
		}
	}
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return nil, err
	}
	if o.migrate {
		applied, err := sqlitestore.Migrate(ctx, db)
		if err != nil {
			db.Close()
			return nil, err
		}
		for _, r := range applied {
			o.logger.Info("applied migration", "store", "sqlite", "version", r.Version, "name", r.Name)
		}
	}
	s, err := sqlitestore.New(db, &sqlitestore.Config{Logger: o.logger})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%w (%s)", err, hint)
	}
	return &openedStore{Store: s, kind: kindSQLite, desc: "sqlite:" + path, close: func() {
		s.Close()
		db.Close()
	}}, nil
}

func openPostgres(ctx context.Context, dsn string, o storeOpts) (*openedStore, error) {
	desc := redact(dsn)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres %s: %w", desc, err)
	}
	if o.migrate {
		applied, err := pgstore.Migrate(ctx, pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		for _, r := range applied {
			o.logger.Info("applied migration", "store", "postgres", "version", r.Version, "name", r.Name)
		}
	}
	s, err := pgstore.New(pool, &pgstore.Config{Logger: o.logger})
	if err != nil {
		pool.Close()
		if errors.Is(err, pgstore.ErrNotMigrated) {
			return nil, fmt.Errorf("%s: %w: run `idem migrate --store %s` first, or start with --migrate", desc, err, desc)
		}
		return nil, fmt.Errorf("postgres %s: %w", desc, err)
	}
	return &openedStore{Store: s, kind: kindPostgres, desc: desc, close: pool.Close}, nil
}

func openRedis(ctx context.Context, u string, o storeOpts) (*openedStore, error) {
	desc := redact(u)
	opts, err := redis.ParseURL(u)
	if err != nil {
		return nil, usageError{fmt.Errorf("--store %s: %w", desc, err)}
	}
	client := redis.NewClient(opts)
	s, err := redisstore.New(ctx, client, &redisstore.Config{
		Prefix:          o.redisPrefix,
		AllowNonDurable: o.allowNonDurable,
		Logger:          o.logger,
	})
	if err != nil {
		client.Close()
		if errors.Is(err, redisstore.ErrNotDurable) {
			return nil, fmt.Errorf("redis %s: %w; pass --allow-non-durable to run anyway (a crash of Redis may then lose claims, and a request may run twice)", desc, err)
		}
		return nil, fmt.Errorf("redis %s: %w", desc, err)
	}
	if !s.Capabilities().Durable {
		o.logger.Warn("RUNNING WITHOUT DURABILITY: --allow-non-durable accepted a Redis that does not fsync every write; a crash of Redis may lose claims and a request may run twice",
			"store", desc)
	}
	return &openedStore{Store: s, kind: kindRedis, desc: desc, close: func() { client.Close() }}, nil
}

// redact hides a URL's password for logs.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
