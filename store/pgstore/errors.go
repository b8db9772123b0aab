package pgstore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/store"
)

// interpretError is the one place where driver errors become store errors:
// pgx.ErrNoRows becomes store.ErrNotFound, the failure of a completion whose
// fence no longer holds (complete_tx.sql) matches store.ErrFenced, that of
// an inbox row recorded before (inbox_insert.sql) store.ErrDuplicate, that
// of a stream's compare and set (inbox_record_set_stream.sql)
// store.ErrStreamMoved, and every other error stays what it is, which to
// callers means the store could not answer (the write may or may not have
// happened). Callers wrap the result with what failed.
func interpretError(err error) error {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ErrNotFound
	case isFenced(err):
		return fmt.Errorf("%w: %w", store.ErrFenced, err)
	case inboxDuplicate(err):
		return fmt.Errorf("%w: %w", store.ErrDuplicate, err)
	case hasCastMarker(err, streamMovedMarker):
		return fmt.Errorf("%w: %w", store.ErrStreamMoved, err)
	}
	return err
}

// inboxDuplicate reports whether err is inbox_insert.sql's failure: the
// event's inbox row exists.
func inboxDuplicate(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "idem_inbox_pkey"
}

// fencedMarker is the text in the error of complete_tx.sql when its fence
// no longer holds (without the quotes around it, which a server's
// translated messages may render otherwise).
const fencedMarker = "idem-fenced:"

// isFenced reports whether err is complete_tx.sql's failure: its fence no
// longer held, so it updated nothing, and its transaction is aborted.
func isFenced(err error) bool { return hasCastMarker(err, fencedMarker) }

// streamMovedMarker is the text in the error of
// inbox_record_set_stream.sql when the stream holds another state than
// the one expected.
const streamMovedMarker = "idem-stream-moved:"

// hasCastMarker reports whether err is the failed cast to an integer of a
// text that holds marker, which a statement raises on purpose to abort
// its transaction.
func hasCastMarker(err error, marker string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02" && strings.Contains(pgErr.Message, marker)
}
