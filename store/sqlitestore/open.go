package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// DriverName is the database/sql driver Open uses (modernc.org/sqlite, pure
// Go, no cgo).
const DriverName = "sqlite"

// Open opens (creating if needed) the SQLite file at path with the settings
// the store needs, applied to every pooled connection through the DSN:
// journal_mode, synchronous, busy_timeout, foreign_keys=ON, and
// _txlock=immediate, so that every read-write transaction takes the write
// lock at BEGIN (a deferred transaction that reads and then writes can fail
// with SQLITE_BUSY when another writer got there first, whatever the busy
// timeout). It pings the database before returning, so a bad path or a
// refused setting fails here.
//
// path is a plain file path; in-memory databases are refused because each
// pooled connection would see its own. The caller closes the handle.
func Open(path string, cfg *OpenConfig) (*sql.DB, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	if err := validatePath(path); err != nil {
		return nil, fmt.Errorf("sqlitestore: open: %w", err)
	}
	db, err := sql.Open(DriverName, DSN(path, &c))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(c.MaxOpenConns)
	db.SetMaxIdleConns(c.MaxOpenConns)
	if err := db.PingContext(context.Background()); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, interpretError(err))
	}
	return db, nil
}

// DSN returns the modernc.org/sqlite data source name that Open uses for
// path, for callers that build their own pool (sql.Open(DriverName, DSN)).
// A nil cfg means the defaults. It does not validate cfg or path.
func DSN(path string, cfg *OpenConfig) string {
	c := cfg.withDefaults()
	q := url.Values{}
	// busy_timeout first: the driver applies it before the other pragmas,
	// so that switching to WAL waits for a concurrent opener instead of
	// failing.
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(c.BusyTimeout.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode("+string(c.JournalMode)+")")
	q.Add("_pragma", "synchronous("+string(c.Synchronous)+")")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	return path + "?" + q.Encode()
}
