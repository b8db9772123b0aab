package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemhq/idem/store"
)

// errWriteLockTimeout is returned when a write waited longer than the busy
// timeout for the store's own writer turn (see Store.lockWrite): the same
// answer SQLite gives, after the same wait, for a lock held by another
// process.
var errWriteLockTimeout = errors.New("timed out waiting for the write lock (SQLITE_BUSY)")

// interpretError turns what database/sql and the driver return into the
// store's sentinels. It is the one place where that happens:
//   - sql.ErrNoRows becomes store.ErrNotFound;
//   - everything else (SQLITE_BUSY after the busy timeout, I/O errors, a
//     closed handle, a cancelled context) stays a plain error, which callers
//     read as "the store could not answer".
func interpretError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	default:
		return err
	}
}

// opError wraps err with the operation and key for the caller's logs,
// keeping it matchable with errors.Is.
func opError(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlitestore: %s %x: %w", op, key, err)
}
