package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// The inbox and per-stream order storage (store.InboxStore) on the tables
// of migrations/002_idem_inbox.sql. Every *Tx method runs one statement
// in the caller's transaction (again when a row another transaction
// committed meanwhile was not in its snapshot); the others run on the
// pool. Keys are stored as bytea and times as timestamptz, to the
// microsecond.

var (
	_ store.InboxStore[pgx.Tx]          = (*Store)(nil)
	_ store.InboxPipeliner[pgx.Tx]      = (*Store)(nil)
	_ store.InboxCommitRecorder[pgx.Tx] = (*Store)(nil)
	_ store.InboxStreamSetter[pgx.Tx]   = (*Store)(nil)
)

// inboxAttempts bounds how often RecordEventTx and LockStreamTx run their
// statements. They run again only when a row another transaction committed
// meanwhile was invisible to the statement's snapshot; the next statement
// sees it, so a second attempt answers unless the row is deleted and
// inserted again in between, every time.
const inboxAttempts = 8

// RecordEventTx implements store.InboxStore in one statement
// (sql/inbox_record.sql); existing is 0 when it inserted the row. The
// primary key serialises concurrent transactions recording one key.
func (s *Store) RecordEventTx(ctx context.Context, tx pgx.Tx, key store.EventKey, at time.Time) (existing store.EventStatus, inserted bool, err error) {
	for range inboxAttempts {
		var status int16
		err := tx.QueryRow(ctx, inboxRecordSQL, bytesOf(key.Source), bytesOf(key.ID), at).Scan(&status, &inserted)
		if err == nil {
			if inserted {
				return 0, true, nil
			}
			return store.EventStatus(status), false, nil
		}
		if err = interpretError(err); !errors.Is(err, store.ErrNotFound) {
			return 0, false, fmt.Errorf("idem/pgstore: record event %s: %w", eventName(key), err)
		}
		// The conflicting row was committed after the statement's snapshot.
	}
	return 0, false, fmt.Errorf("idem/pgstore: record event %s: no answer after %d attempts: the row keeps being deleted and inserted again", eventName(key), inboxAttempts)
}

var _ store.InboxCommitRecorder[pgx.Tx] = (*Store)(nil)

// RecordEventAtCommitTx implements store.InboxCommitRecorder
// (sql/inbox_insert.sql): in a transaction of BeginTx or InTx the insert
// is queued (lazyTx) and goes out with the COMMIT; in another pgx.Tx it
// runs at once. An event recorded before fails it with an error matching
// store.ErrDuplicate (inboxDuplicate).
func (s *Store) RecordEventAtCommitTx(ctx context.Context, tx pgx.Tx, key store.EventKey, at time.Time) error {
	if err := later(ctx, tx, inboxInsertSQL, bytesOf(key.Source), bytesOf(key.ID), at); err != nil {
		return fmt.Errorf("idem/pgstore: record event %s: %w", eventName(key), interpretError(err))
	}
	return nil
}

// RecordEventLockStreamTx implements store.InboxPipeliner: the record and
// the lock in one pipeline (pgx batch), a new stream's placeholder row
// included. A record whose conflicting row is not visible yet, or a new
// stream another transaction committed meanwhile, is settled by the
// one-by-one statements afterwards, as RecordEventTx and LockStreamTx do.
func (s *Store) RecordEventLockStreamTx(ctx context.Context, tx pgx.Tx, key store.EventKey, at time.Time, stream store.StreamKey) (store.EventStatus, bool, []byte, error) {
	b := &pgx.Batch{}
	b.Queue(inboxRecordSQL, bytesOf(key.Source), bytesOf(key.ID), at)
	b.Queue(streamLockSQL, bytesOf(stream.Source), bytesOf(stream.Subject))
	res := tx.SendBatch(ctx, b)
	var status int16
	var inserted, recorded, locked bool
	var state []byte
	err := res.QueryRow().Scan(&status, &inserted)
	switch {
	case err == nil:
		recorded = true
	case errors.Is(err, pgx.ErrNoRows):
	default:
		res.Close()
		return 0, false, nil, fmt.Errorf("idem/pgstore: record event %s: %w", eventName(key), interpretError(err))
	}
	err = res.QueryRow().Scan(&state)
	switch {
	case err == nil:
		locked = true
	case errors.Is(err, pgx.ErrNoRows):
	default:
		res.Close()
		return 0, false, nil, fmt.Errorf("idem/pgstore: lock stream %s: %w", streamName(stream), interpretError(err))
	}
	if err := res.Close(); err != nil {
		return 0, false, nil, fmt.Errorf("idem/pgstore: record event %s: %w", eventName(key), interpretError(err))
	}
	existing := store.EventStatus(status)
	if inserted {
		existing = 0
	}
	if !recorded {
		if existing, inserted, err = s.RecordEventTx(ctx, tx, key, at); err != nil {
			return 0, false, nil, err
		}
	}
	if !locked {
		if state, err = s.LockStreamTx(ctx, tx, stream); err != nil {
			return 0, false, nil, err
		}
	}
	return existing, inserted, state, nil
}

// RecordEventSetStreamLaterTx implements store.InboxStreamSetter
// (sql/inbox_record_set_stream.sql): the event's record and the stream's
// compare and set are one statement, queued (lazyTx) to go out with the
// transaction's next statement or its COMMIT; in another pgx.Tx it runs
// at once.
func (s *Store) RecordEventSetStreamLaterTx(ctx context.Context, tx pgx.Tx, key store.EventKey, at time.Time, stream store.StreamKey, expect, next []byte) (func() error, error) {
	failed, err := laterWatched(ctx, tx, inboxRecordSetStreamSQL, bytesOf(key.Source), bytesOf(key.ID), at,
		bytesOf(stream.Source), bytesOf(stream.Subject), orEmpty(expect), orEmpty(next))
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: record event %s, set stream %s: %w", eventName(key), streamName(stream), interpretError(err))
	}
	return failed, nil
}

// LockStreamTx implements store.InboxStore in one statement
// (sql/stream_lock.sql): a stream with a row is locked and read (SELECT
// ... FOR UPDATE); a stream without one gets a placeholder row with a NULL
// state, which its insert keeps locked until tx ends. A transaction
// inserting the same new stream concurrently makes the statement wait on
// the primary key; when that one commits the statement returns nothing
// (its snapshot is older than the row) and runs again, which locks and
// reads the row that one committed. A placeholder row reads as a new
// stream (nil state).
func (s *Store) LockStreamTx(ctx context.Context, tx pgx.Tx, key store.StreamKey) ([]byte, error) {
	src, sub := bytesOf(key.Source), bytesOf(key.Subject)
	for range inboxAttempts {
		var state []byte
		err := tx.QueryRow(ctx, streamLockSQL, src, sub).Scan(&state)
		if err == nil {
			return state, nil
		}
		if err = interpretError(err); !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("idem/pgstore: lock stream %s: %w", streamName(key), err)
		}
		// Another transaction committed the stream's row meanwhile: lock it.
	}
	return nil, fmt.Errorf("idem/pgstore: lock stream %s: no answer after %d attempts", streamName(key), inboxAttempts)
}

// PutStreamTx implements store.InboxStore (sql/stream_put.sql). A zero
// gapSince is stored as NULL, which keeps the stream out of the index
// OverdueStreams reads. A nil state is stored as an empty one, so that the
// stream does not read as new afterwards. The write is queued (see later):
// it is usually the transaction's last and goes out with its COMMIT.
func (s *Store) PutStreamTx(ctx context.Context, tx pgx.Tx, key store.StreamKey, state []byte, gapSince time.Time) error {
	var gap any
	if !gapSince.IsZero() {
		gap = gapSince
	}
	if err := later(ctx, tx, streamPutSQL, bytesOf(key.Source), bytesOf(key.Subject), orEmpty(state), gap); err != nil {
		return fmt.Errorf("idem/pgstore: put stream %s: %w", streamName(key), err)
	}
	return nil
}

// ParkTx implements store.InboxStore (sql/park.sql). A sequence already
// parked is ErrCorrupt; the statement does not fail on it, so tx is not
// left aborted.
func (s *Store) ParkTx(ctx context.Context, tx pgx.Tx, key store.StreamKey, ev store.ParkedEvent) error {
	tag, err := tx.Exec(ctx, parkSQL, bytesOf(key.Source), bytesOf(key.Subject), ev.Sequence, orEmpty(ev.Event))
	if err != nil {
		return fmt.Errorf("idem/pgstore: park stream %s sequence %d: %w", streamName(key), ev.Sequence, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idem/pgstore: park stream %s sequence %d: already parked: %w", streamName(key), ev.Sequence, store.ErrCorrupt)
	}
	return nil
}

// UnparkTx implements store.InboxStore in one DELETE ... RETURNING
// (sql/unpark.sql). A sequence that is not parked, or is listed twice, is
// ErrCorrupt; the others are deleted all the same, and the caller must
// roll tx back.
func (s *Store) UnparkTx(ctx context.Context, tx pgx.Tx, key store.StreamKey, seqs []int64) ([]store.ParkedEvent, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, unparkSQL, bytesOf(key.Source), bytesOf(key.Subject), seqs)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: unpark stream %s: %w", streamName(key), err)
	}
	found := make(map[int64][]byte, len(seqs))
	var (
		seq   int64
		event []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&seq, &event}, func() error {
		found[seq] = event
		event = nil // the next row scans into a new slice
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: unpark stream %s: %w", streamName(key), err)
	}
	out := make([]store.ParkedEvent, 0, len(seqs))
	for _, seq := range seqs {
		ev, ok := found[seq]
		if !ok {
			return nil, fmt.Errorf("idem/pgstore: unpark stream %s: sequence %d is not parked: %w", streamName(key), seq, store.ErrCorrupt)
		}
		delete(found, seq) // listed twice: the second is missing
		out = append(out, store.ParkedEvent{Sequence: seq, Event: ev})
	}
	return out, nil
}

// DropParkedTx implements store.InboxStore (sql/drop_parked.sql).
func (s *Store) DropParkedTx(ctx context.Context, tx pgx.Tx, key store.StreamKey, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, dropParkedSQL, bytesOf(key.Source), bytesOf(key.Subject), seqs); err != nil {
		return fmt.Errorf("idem/pgstore: drop parked events of stream %s: %w", streamName(key), err)
	}
	return nil
}

// RecordGapTx implements store.InboxStore (sql/gap_record.sql).
func (s *Store) RecordGapTx(ctx context.Context, tx pgx.Tx, g store.GapRecord) error {
	_, err := tx.Exec(ctx, gapRecordSQL, bytesOf(g.Stream.Source), bytesOf(g.Stream.Subject), g.From, g.To, g.Delta, g.FirstSeen)
	if err != nil {
		return fmt.Errorf("idem/pgstore: record gap %d-%d of stream %s: %w", g.From, g.To, streamName(g.Stream), err)
	}
	return nil
}

// DeadLetterTx implements store.InboxStore in one statement
// (sql/dead_letter_insert.sql): the inbox row's upsert and the dead letter's
// insert. An inbox row it inserts is dated d.LastFailed.
//
// d.Reason is stored as text, for operators reading the table: invalid
// UTF-8 and NUL bytes in it, which PostgreSQL text cannot hold, are
// replaced by U+FFFD, so that no reason can keep an event from being
// dead-lettered.
func (s *Store) DeadLetterTx(ctx context.Context, tx pgx.Tx, d store.DeadLetter) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, deadLetterSQL,
		bytesOf(d.Key.Source), bytesOf(d.Key.ID), bytesOf(d.Stream.Source), bytesOf(d.Stream.Subject),
		d.Sequence, storableText(d.Reason), orEmpty(d.Event), d.Attempts, d.FirstFailed, d.LastFailed,
	).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("idem/pgstore: dead-letter event %s: %w", eventName(d.Key), err)
	}
	return id, nil
}

// TakeDeadLetterTx implements store.InboxStore in one statement
// (sql/dead_letter_take.sql). Two transactions taking one dead letter
// serialise on its row: the second gets ErrNotFound.
func (s *Store) TakeDeadLetterTx(ctx context.Context, tx pgx.Tx, id int64) (store.DeadLetter, bool, error) {
	var (
		row     deadLetterRow
		wasDead bool
	)
	err := tx.QueryRow(ctx, takeDeadLetterSQL, id).Scan(append(row.dest(), &wasDead)...)
	if err != nil {
		return store.DeadLetter{}, false, fmt.Errorf("idem/pgstore: take dead letter %d: %w", id, interpretError(err))
	}
	return row.letter(), wasDead, nil
}

// ListDeadLetters implements store.InboxStore (sql/dead_letters_list.sql),
// by the primary key.
//
// IDs are handed out when dead letters are written, not when they commit,
// so a dead letter whose transaction commits after a later one may appear
// behind a page already read past it.
func (s *Store) ListDeadLetters(ctx context.Context, q store.DeadLetterQuery) ([]store.DeadLetter, error) {
	if err := checkLimit("list dead letters", q.Limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, listDeadLettersSQL, q.After, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list dead letters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.DeadLetter, error) {
		var row deadLetterRow
		err := r.Scan(row.dest()...)
		return row.letter(), err
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list dead letters: %w", err)
	}
	return out, nil
}

// ListGaps implements store.InboxStore (sql/gaps_list.sql, or
// sql/gaps_list_stream.sql for one stream). Gaps first seen at the same
// instant are listed in the order they were recorded.
func (s *Store) ListGaps(ctx context.Context, key *store.StreamKey, limit int) ([]store.GapRecord, error) {
	if err := checkLimit("list gaps", limit); err != nil {
		return nil, err
	}
	var (
		rows pgx.Rows
		err  error
	)
	if key == nil {
		rows, err = s.pool.Query(ctx, listGapsSQL, limit)
	} else {
		rows, err = s.pool.Query(ctx, listStreamGapsSQL, bytesOf(key.Source), bytesOf(key.Subject), limit)
	}
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list gaps: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.GapRecord, error) {
		var (
			src, sub []byte
			g        store.GapRecord
		)
		err := r.Scan(&src, &sub, &g.From, &g.To, &g.Delta, &g.FirstSeen)
		g.Stream = store.StreamKey{Source: string(src), Subject: string(sub)}
		g.FirstSeen = g.FirstSeen.UTC()
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list gaps: %w", err)
	}
	return out, nil
}

// OverdueStreams implements store.InboxStore (sql/overdue_streams.sql),
// through the partial index on gap_since. Streams whose gaps were first
// seen at the same instant are ordered by key.
func (s *Store) OverdueStreams(ctx context.Context, before time.Time, limit int) ([]store.StreamKey, error) {
	if err := checkLimit("list overdue streams", limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, overdueStreamsSQL, before, limit)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list overdue streams: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.StreamKey, error) {
		var src, sub []byte
		err := r.Scan(&src, &sub)
		return store.StreamKey{Source: string(src), Subject: string(sub)}, err
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list overdue streams: %w", err)
	}
	return out, nil
}

// SweepInbox implements store.InboxStore in one statement
// (sql/inbox_sweep.sql) with FOR UPDATE SKIP LOCKED, so that sweepers in
// several processes neither wait on each other nor on a transaction
// dead-lettering an event. Dead inbox rows are never deleted.
func (s *Store) SweepInbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := checkLimit("sweep inbox", limit); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sweepInboxSQL, before, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("idem/pgstore: sweep inbox: %w", err)
	}
	return int(n), nil
}

// deadLetterRow receives the dead letter columns that
// sql/dead_letter_take.sql and sql/dead_letters_list.sql return, in this
// order: id, first_failed, last_failed, seq, attempts, source, event_id,
// stream_source, stream_subject, reason, event.
type deadLetterRow struct {
	id                          int64
	firstFailed                 time.Time
	lastFailed                  time.Time
	seq                         int64
	attempts                    int32
	source, eventID             []byte
	streamSource, streamSubject []byte
	reason                      string
	event                       []byte
}

// dest returns the scan destinations.
func (r *deadLetterRow) dest() []any {
	return []any{&r.id, &r.firstFailed, &r.lastFailed, &r.seq, &r.attempts,
		&r.source, &r.eventID, &r.streamSource, &r.streamSubject, &r.reason, &r.event}
}

// letter converts the row; times are returned in UTC.
func (r *deadLetterRow) letter() store.DeadLetter {
	return store.DeadLetter{
		ID:          r.id,
		Key:         store.EventKey{Source: string(r.source), ID: string(r.eventID)},
		Stream:      store.StreamKey{Source: string(r.streamSource), Subject: string(r.streamSubject)},
		Sequence:    r.seq,
		Reason:      r.reason,
		Event:       r.event,
		Attempts:    int(r.attempts),
		FirstFailed: r.firstFailed.UTC(),
		LastFailed:  r.lastFailed.UTC(),
	}
}

// checkLimit refuses a page size or batch below 1, which would otherwise
// mean "nothing" to LIMIT and make a caller's loop spin.
func checkLimit(op string, limit int) error {
	if limit < 1 {
		return fmt.Errorf("idem/pgstore: %s: limit is %d, want at least 1", op, limit)
	}
	return nil
}

// bytesOf converts a key part for a bytea column. It is never nil, which
// pgx would send as NULL.
func bytesOf(s string) []byte {
	return orEmpty([]byte(s))
}

// storableText makes s storable in a text column: invalid UTF-8 and NUL
// bytes become U+FFFD.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// eventName and streamName name keys in error messages.
func eventName(k store.EventKey) string { return fmt.Sprintf("%q/%q", k.Source, k.ID) }

func streamName(k store.StreamKey) string { return fmt.Sprintf("%q/%q", k.Source, k.Subject) }
