package redisstore

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/store"
)

// ErrNotDurable is returned (wrapped, with the setting that is missing) by
// New when the server does not fsync every write before answering (AOF with
// appendfsync always) or does not let the store check, and
// Config.AllowNonDurable is false.
var ErrNotDurable = errors.New("idem/redisstore: redis is not durable: a claim may be lost in a crash")

// fencedPrefix starts the error reply of a fenced write (common.lua).
const fencedPrefix = "IDEM_FENCED"

// interpretError turns a go-redis error into the store's sentinels: a nil
// reply is ErrNotFound and a fenced script reply is ErrFenced. Any other
// error stays as it is and means the store could not answer (the write may
// or may not have happened). It is the only place that maps driver errors.
func interpretError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.Nil):
		return store.ErrNotFound
	case redis.HasErrorPrefix(err, fencedPrefix):
		return store.ErrFenced
	default:
		return err
	}
}

// opError names the operation and key around err, mapped by
// interpretError, so that errors.Is still finds the sentinels.
func opError(op, key string, err error) error {
	return fmt.Errorf("redisstore: %s %q: %w", op, key, interpretError(err))
}
