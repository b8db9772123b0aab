package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/internal/migrate"
	"github.com/idemhq/idem/store"
)

// Store is the SQLite store.TxStore. It is safe for concurrent use. The zero
// value is not usable; use New.
type Store struct {
	db     *sql.DB
	now    func() time.Time
	logger *slog.Logger
	caps   store.Capabilities
	stmts  *statements

	// writer is this Store's turn to write: a one-slot semaphore that every
	// write (and InTx) holds while it has the SQLite write lock. SQLite
	// admits one writer per file anyway; waiting here, in order, instead of
	// in SQLite's busy handler (which polls with sleeps of up to 100 ms)
	// keeps latency even when many goroutines write at once: with 64
	// goroutines claiming and completing new keys, the slowest took 0.45 s
	// instead of 4.4 s, and the whole run 20% less time. Other processes
	// and other handles on the file still meet in SQLite's lock, under its
	// busy timeout.
	writer chan struct{}
	// group holds the request keys' writes waiting for a group commit
	// (group.go).
	group group
	// lazySync restores a connection's synchronous setting after a lazy
	// transaction (beginLazy); "" when commits do not sync anyway, and
	// lazy writes commit as the others do.
	lazySync string
	// busyTimeout bounds the wait for writer, read from the handle's
	// PRAGMA busy_timeout so that both waits give up alike.
	busyTimeout time.Duration
	// open maps each transaction of BeginTx to the function that gives
	// its writer turn back (*sql.Tx → func()).
	open sync.Map
}

var _ store.TxStore[*sql.Tx] = (*Store)(nil)

// New returns a store over db, a handle opened with Open (or with DSN and
// sql.Open). It refuses the handle, with an error naming the setting, when
// its journal mode is not WAL or its synchronous setting is below FULL and
// cfg does not set AllowWeakDurability; and when the schema lacks any of
// this package's migrations (run Migrate, or `idem migrate`, first). The
// settings are read from one pooled connection: set them in the DSN, as
// Open does, so that every connection has them.
//
// The store does not own db: closing db is the caller's job (Close
// releases only the store's prepared statements).
func New(db *sql.DB, cfg *Config) (*Store, error) {
	if db == nil {
		return nil, errors.New("sqlitestore: new: db is nil")
	}
	c := cfg.withDefaults()
	ctx := context.Background()

	st, err := readSettings(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: new: %w", interpretError(err))
	}
	if err := st.check(c.AllowWeakDurability); err != nil {
		return nil, fmt.Errorf("sqlitestore: new: %w", err)
	}
	if !st.durable() {
		c.Logger.Warn("sqlitestore: weak durability accepted: commits may be lost on power loss",
			"journal_mode", st.journalMode, "synchronous", st.synchronous)
	}

	pending, err := migrate.Pending(ctx, db, migrate.SQLite, migrationsFS())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: new: checking migrations: %w", err)
	}
	if pending {
		return nil, errors.New("sqlitestore: new: the database lacks migrations: run sqlitestore.Migrate (or `idem migrate`) first")
	}

	stmts, err := prepare(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: new: %w", interpretError(err))
	}
	s := &Store{
		db:          db,
		stmts:       stmts,
		now:         c.Now,
		logger:      c.Logger,
		caps:        store.Capabilities{Durable: st.durable(), Transactions: true, Shared: true},
		writer:      make(chan struct{}, 1),
		busyTimeout: st.busyTimeout,
	}
	if st.journalMode == "wal" && st.synchronous >= 2 {
		// A lazy commit skips the sync that a later one makes for it: in
		// WAL mode a sync covers the whole log.
		s.lazySync = "PRAGMA synchronous=" + st.synchronousName()
	}
	return s, nil
}

// Capabilities reports Durable when the handle syncs every commit (WAL or
// a rollback journal with synchronous FULL or EXTRA), Transactions, and
// Shared: several processes may open the same file.
func (s *Store) Capabilities() store.Capabilities { return s.caps }

// Close releases the store's prepared statements. It does not close the
// handle given to New; closing that handle releases them too.
func (s *Store) Close() error { return s.stmts.close() }

// settings are the pragmas New checks.
type settings struct {
	journalMode string // lower case, as SQLite reports it
	synchronous int    // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
	busyTimeout time.Duration
}

func readSettings(ctx context.Context, db *sql.DB) (settings, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return settings{}, err
	}
	defer conn.Close()
	var st settings
	var busyMS int64
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&st.journalMode); err != nil {
		return settings{}, err
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&st.synchronous); err != nil {
		return settings{}, err
	}
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busyMS); err != nil {
		return settings{}, err
	}
	st.journalMode = strings.ToLower(st.journalMode)
	st.busyTimeout = time.Duration(busyMS) * time.Millisecond
	return st, nil
}

var synchronousNames = [...]string{"OFF", "NORMAL", "FULL", "EXTRA"}

func (st settings) synchronousName() string {
	if st.synchronous >= 0 && st.synchronous < len(synchronousNames) {
		return synchronousNames[st.synchronous]
	}
	return fmt.Sprint(st.synchronous)
}

// check refuses settings weaker than WAL with synchronous FULL unless
// allowed.
func (st settings) check(allowWeak bool) error {
	if allowWeak {
		return nil
	}
	if st.journalMode != "wal" {
		return fmt.Errorf("journal_mode is %s, not wal: open with sqlitestore.Open, or set Config.AllowWeakDurability", st.journalMode)
	}
	if st.synchronous < 2 {
		return fmt.Errorf("synchronous is %s, weaker than FULL: open with sqlitestore.Open, or set Config.AllowWeakDurability", st.synchronousName())
	}
	return nil
}

// durable reports whether a commit that returned survives a power loss.
func (st settings) durable() bool {
	switch st.journalMode {
	case "wal", "delete", "truncate", "persist":
		return st.synchronous >= 2
	default: // memory, off
		return false
	}
}
