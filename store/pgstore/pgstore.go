package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
)

// checkTimeout bounds the checks New runs on the database.
const checkTimeout = 30 * time.Second

// Config configures a Store. A nil *Config means all defaults.
type Config struct {
	// Now is the store's clock for leases and expiry, read for every
	// statement; tests set it to a settable clock so that leases can end
	// without sleeping. When nil, every statement reads the server's clock,
	// the one clock all idem processes on the database share. Defaults to
	// the server's clock_timestamp().
	Now func() time.Time

	// OutboxNotifyAfterCommit makes EnqueueTx send no NOTIFY inside the
	// caller's transaction. PostgreSQL serialises the commits of all
	// transactions that notified, WAL flush included, so many concurrent
	// enqueuing transactions commit one at a time; without it they commit
	// side by side. Relays then learn of new intents from NotifyOutbox,
	// which the caller sends after its commit (a transaction of its own
	// that writes nothing), or at their next poll. Defaults to false:
	// EnqueueTx notifies, and relays in other processes wake by themselves.
	OutboxNotifyAfterCommit bool

	// Logger receives the store's warnings (a database that does not fsync)
	// and debug messages. Defaults to a logger that discards everything.
	Logger *slog.Logger
}

// Store is a store.TxStore on PostgreSQL. It is safe for concurrent use by
// any number of goroutines and processes. The zero value is not usable; use
// New.
type Store struct {
	pool    *pgxpool.Pool
	now     func() time.Time
	logger  *slog.Logger
	durable bool
	// group runs the writes of request keys in group commits (group.go).
	group *group
	// enqueueSQL is outbox_enqueue.sql, without its pg_notify under
	// Config.OutboxNotifyAfterCommit.
	enqueueSQL string
}

var _ store.TxStore[pgx.Tx] = (*Store)(nil)

// New returns a store on pool, which the caller opened and closes. The
// pool's search_path decides the schema the store works in.
//
// New never changes the database: when the schema lacks any of the store's
// migrations it returns an error wrapping ErrNotMigrated, and the operator
// runs Migrate (or `idem migrate`). It also reads the server's fsync and
// synchronous_commit settings to report Capabilities.Durable. Both checks
// together are bounded by checkTimeout.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, errors.New("idem/pgstore: New: pool is nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if cfg == nil {
		cfg = &Config{}
	}
	s := &Store{pool: pool, now: cfg.Now, logger: cfg.Logger, enqueueSQL: outboxEnqueueSQL, group: newGroup()}
	if cfg.OutboxNotifyAfterCommit {
		s.enqueueSQL = outboxEnqueueQuietSQL
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if err := checkMigrated(ctx, pool); err != nil {
		return nil, err
	}
	durable, err := durable(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: read durability settings: %w", err)
	}
	s.durable = durable
	if !durable {
		s.logger.WarnContext(ctx, "idem/pgstore: fsync or synchronous_commit is off: a crash may lose acknowledged claims and responses")
	}
	return s, nil
}

// Capabilities reports a shared, transactional store, durable unless the
// server runs with fsync or synchronous_commit off (read at New).
func (s *Store) Capabilities() store.Capabilities {
	return store.Capabilities{Durable: s.durable, Transactions: true, Shared: true}
}

// durable reports whether a commit is flushed to disk before the server
// answers. synchronous_commit = local, on, remote_write or remote_apply all
// flush the primary's WAL first; off does not, and neither does fsync = off.
func durable(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var ok bool
	err := pool.QueryRow(ctx,
		`SELECT current_setting('fsync') = 'on' AND current_setting('synchronous_commit') <> 'off'`,
	).Scan(&ok)
	return ok, err
}

// clock returns the Now argument of every statement: the configured clock's
// reading, or nil so that the statement reads the server's clock.
func (s *Store) clock() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}
