package pgstore

import (
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// interpretError is the one place where driver errors become store errors:
// pgx.ErrNoRows becomes store.ErrNotFound, and every other error stays what
// it is, which to callers means the store could not answer (the write may
// or may not have happened). Callers wrap the result with what failed.
func interpretError(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}
