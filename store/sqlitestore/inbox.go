package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
)

// The inbox statements (migration 002). The three that run for every event
// (record, stream read, stream write) are prepared (statements.go: txExec);
// the others run unprepared: parking, gaps and dead letters are rarer, and
// listing and sweeping are an operator's or a sweeper's.
var (
	//go:embed sql/inbox_record.sql
	inboxRecordSQL string
	//go:embed sql/inbox_status.sql
	inboxStatusSQL string
	//go:embed sql/inbox_sweep.sql
	inboxSweepSQL string
	//go:embed sql/stream_lock.sql
	streamGetSQL string
	//go:embed sql/stream_put.sql
	streamPutSQL string
	//go:embed sql/park.sql
	parkSQL string
	//go:embed sql/unpark.sql
	unparkSQL string
	//go:embed sql/gap_record.sql
	gapRecordSQL string
	//go:embed sql/gaps_list.sql
	gapsListSQL string
	//go:embed sql/gaps_list_stream.sql
	gapsListStreamSQL string
	//go:embed sql/gaps_sweep.sql
	gapsSweepSQL string
	//go:embed sql/overdue_streams.sql
	overdueSQL string
	//go:embed sql/dead_letter_mark.sql
	deadLetterMarkSQL string
	//go:embed sql/dead_letter_insert.sql
	deadLetterInsertSQL string
	//go:embed sql/dead_letter_take.sql
	deadLetterTakeSQL string
	//go:embed sql/dead_letter_unmark.sql
	deadLetterUnmarkSQL string
	//go:embed sql/dead_letters_list.sql
	deadLettersListSQL string
)

var _ store.InboxStore[*sql.Tx] = (*Store)(nil)

// RecordEventTx implements store.InboxStore: an INSERT that does nothing
// on a conflict, then, when it inserted nothing, a read of the row's
// status. tx must hold the write lock (as InTx's do from BEGIN), or the
// INSERT takes it; a concurrent transaction recording the same key waits
// for it, then sees the row or inserts its own.
func (s *Store) RecordEventTx(ctx context.Context, tx *sql.Tx, key store.EventKey, at time.Time) (store.EventStatus, bool, error) {
	if tx == nil {
		return 0, false, eventError("record event", key, errors.New("tx is nil"))
	}
	args := []any{sql.Named("source", key.Source), sql.Named("id", key.ID)}
	res, err := s.stmts.inboxRecord.txExec(ctx, tx, append(args, sql.Named("received_at", toMicros(at)))...)
	if err != nil {
		return 0, false, eventError("record event", key, interpretError(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, eventError("record event", key, interpretError(err))
	}
	if n == 1 {
		return 0, true, nil
	}
	var status int64
	if err := s.stmts.on(tx).QueryRowContext(ctx, inboxStatusSQL, args...).Scan(&status); err != nil {
		return 0, false, eventError("record event", key, interpretError(err))
	}
	return store.EventStatus(status), false, nil
}

// LockStreamTx implements store.InboxStore with a plain read: SQLite has
// one writer per file, and tx holds its write lock from BEGIN (InTx, or a
// handle from Open: BEGIN IMMEDIATE) or from its first write, so no other
// transaction can decide on any stream until tx ends. With a deferred
// transaction that has not written yet, the read locks nothing.
func (s *Store) LockStreamTx(ctx context.Context, tx *sql.Tx, key store.StreamKey) ([]byte, error) {
	if tx == nil {
		return nil, streamError("lock stream", key, errors.New("tx is nil"))
	}
	var state []byte
	err := s.stmts.streamGet.txQueryRow(ctx, tx, streamArgs(key)...).Scan(&state)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, streamError("lock stream", key, interpretError(err))
	case state == nil:
		// The driver reads an empty BLOB as nil; nil means a new stream.
		state = []byte{}
	}
	return state, nil
}

// PutStreamTx implements store.InboxStore. A zero gapSince is stored as
// NULL, which keeps the stream out of the gap_since index.
func (s *Store) PutStreamTx(ctx context.Context, tx *sql.Tx, key store.StreamKey, state []byte, gapSince time.Time) error {
	if tx == nil {
		return streamError("put stream", key, errors.New("tx is nil"))
	}
	var since sql.NullInt64
	if !gapSince.IsZero() {
		since = sql.NullInt64{Int64: gapSince.UnixMicro(), Valid: true}
	}
	args := append(streamArgs(key), sql.Named("state", nonNil(state)), sql.Named("gap_since", since))
	if _, err := s.stmts.streamPut.txExec(ctx, tx, args...); err != nil {
		return streamError("put stream", key, interpretError(err))
	}
	return nil
}

// ParkTx implements store.InboxStore.
func (s *Store) ParkTx(ctx context.Context, tx *sql.Tx, key store.StreamKey, ev store.ParkedEvent) error {
	if tx == nil {
		return streamError("park", key, errors.New("tx is nil"))
	}
	args := append(streamArgs(key), sql.Named("seq", ev.Sequence), sql.Named("event", nonNil(ev.Event)))
	res, err := s.stmts.on(tx).ExecContext(ctx, parkSQL, args...)
	if err != nil {
		return streamError("park", key, interpretError(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return streamError("park", key, interpretError(err))
	}
	if n == 0 {
		return streamError("park", key, fmt.Errorf("%w: sequence %d is parked already", store.ErrCorrupt, ev.Sequence))
	}
	return nil
}

// UnparkTx implements store.InboxStore in one statement for all of seqs. A
// sequence named twice is missing the second time: ErrCorrupt too.
func (s *Store) UnparkTx(ctx context.Context, tx *sql.Tx, key store.StreamKey, seqs []int64) ([]store.ParkedEvent, error) {
	if tx == nil {
		return nil, streamError("unpark", key, errors.New("tx is nil"))
	}
	out := make([]store.ParkedEvent, 0, len(seqs))
	if len(seqs) == 0 {
		return out, nil
	}
	found, err := s.deleteParked(ctx, tx, key, seqs)
	if err != nil {
		return nil, streamError("unpark", key, err)
	}
	for _, seq := range seqs {
		ev, ok := found[seq]
		if !ok {
			return nil, streamError("unpark", key, fmt.Errorf("%w: sequence %d is not parked", store.ErrCorrupt, seq))
		}
		delete(found, seq)
		out = append(out, store.ParkedEvent{Sequence: seq, Event: ev})
	}
	return out, nil
}

// DropParkedTx implements store.InboxStore in one statement for all of
// seqs.
func (s *Store) DropParkedTx(ctx context.Context, tx *sql.Tx, key store.StreamKey, seqs []int64) error {
	if tx == nil {
		return streamError("drop parked", key, errors.New("tx is nil"))
	}
	if len(seqs) == 0 {
		return nil
	}
	if _, err := s.deleteParked(ctx, tx, key, seqs); err != nil {
		return streamError("drop parked", key, err)
	}
	return nil
}

// deleteParked deletes the parked events seqs of the stream and returns
// those it found, by sequence.
func (s *Store) deleteParked(ctx context.Context, tx *sql.Tx, key store.StreamKey, seqs []int64) (map[int64][]byte, error) {
	args := append(streamArgs(key), sql.Named("seqs", jsonInts(seqs)))
	rows, err := s.stmts.on(tx).QueryContext(ctx, unparkSQL, args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	found := make(map[int64][]byte, len(seqs))
	for rows.Next() {
		var (
			seq int64
			ev  []byte
		)
		if err := rows.Scan(&seq, &ev); err != nil {
			return nil, interpretError(err)
		}
		found[seq] = ev
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return found, nil
}

// jsonInts returns seqs as a JSON array, the argument of json_each in
// unpark.sql.
func jsonInts(seqs []int64) string {
	var b strings.Builder
	b.Grow(len(seqs) * 8)
	b.WriteByte('[')
	for i, n := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// RecordGapTx implements store.InboxStore.
func (s *Store) RecordGapTx(ctx context.Context, tx *sql.Tx, g store.GapRecord) error {
	if tx == nil {
		return streamError("record gap", g.Stream, errors.New("tx is nil"))
	}
	args := append(streamArgs(g.Stream),
		sql.Named("from_seq", g.From),
		sql.Named("to_seq", g.To),
		sql.Named("delta", boolInt(g.Delta)),
		sql.Named("first_seen", toMicros(g.FirstSeen)),
	)
	if _, err := s.stmts.on(tx).ExecContext(ctx, gapRecordSQL, args...); err != nil {
		return streamError("record gap", g.Stream, interpretError(err))
	}
	return nil
}

// DeadLetterTx implements store.InboxStore. An inbox row it inserts gets
// d.LastFailed as its received time; the sweep never reads a dead row's.
func (s *Store) DeadLetterTx(ctx context.Context, tx *sql.Tx, d store.DeadLetter) (int64, error) {
	if tx == nil {
		return 0, eventError("dead letter", d.Key, errors.New("tx is nil"))
	}
	_, err := s.stmts.on(tx).ExecContext(ctx, deadLetterMarkSQL,
		sql.Named("source", d.Key.Source),
		sql.Named("id", d.Key.ID),
		sql.Named("received_at", toMicros(d.LastFailed)),
	)
	if err != nil {
		return 0, eventError("dead letter", d.Key, interpretError(err))
	}
	var id int64
	err = s.stmts.on(tx).QueryRowContext(ctx, deadLetterInsertSQL,
		sql.Named("source", d.Key.Source),
		sql.Named("event_id", d.Key.ID),
		sql.Named("stream_source", d.Stream.Source),
		sql.Named("stream_subject", d.Stream.Subject),
		sql.Named("seq", d.Sequence),
		sql.Named("reason", d.Reason),
		sql.Named("event", nonNil(d.Event)),
		sql.Named("attempts", int64(d.Attempts)),
		sql.Named("first_failed", toMicros(d.FirstFailed)),
		sql.Named("last_failed", toMicros(d.LastFailed)),
	).Scan(&id)
	if err != nil {
		return 0, eventError("dead letter", d.Key, interpretError(err))
	}
	return id, nil
}

// TakeDeadLetterTx implements store.InboxStore.
func (s *Store) TakeDeadLetterTx(ctx context.Context, tx *sql.Tx, id int64) (store.DeadLetter, bool, error) {
	if tx == nil {
		return store.DeadLetter{}, false, fmt.Errorf("sqlitestore: take dead letter %d: tx is nil", id)
	}
	d, err := scanDeadLetter(s.stmts.on(tx).QueryRowContext(ctx, deadLetterTakeSQL, sql.Named("id", id)))
	if err != nil {
		return store.DeadLetter{}, false, fmt.Errorf("sqlitestore: take dead letter %d: %w", id, interpretError(err))
	}
	res, err := s.stmts.on(tx).ExecContext(ctx, deadLetterUnmarkSQL, sql.Named("source", d.Key.Source), sql.Named("id", d.Key.ID))
	if err != nil {
		return store.DeadLetter{}, false, fmt.Errorf("sqlitestore: take dead letter %d: %w", id, interpretError(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.DeadLetter{}, false, fmt.Errorf("sqlitestore: take dead letter %d: %w", id, interpretError(err))
	}
	return d, n == 1, nil
}

// ListDeadLetters implements store.InboxStore. It reads one snapshot
// without the write lock.
func (s *Store) ListDeadLetters(ctx context.Context, q store.DeadLetterQuery) ([]store.DeadLetter, error) {
	if q.Limit < 1 {
		return nil, fmt.Errorf("sqlitestore: list dead letters: limit %d is below 1", q.Limit)
	}
	rows, err := s.db.QueryContext(ctx, deadLettersListSQL, sql.Named("after", q.After), sql.Named("limit", int64(q.Limit)))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list dead letters: %w", interpretError(err))
	}
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list dead letters: %w", interpretError(err))
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list dead letters: %w", interpretError(err))
	}
	return out, nil
}

// scanDeadLetter maps a row of dead_letter_take.sql or
// dead_letters_list.sql.
func scanDeadLetter(row interface{ Scan(...any) error }) (store.DeadLetter, error) {
	var (
		d                       store.DeadLetter
		attempts                int64
		firstFailed, lastFailed int64
	)
	err := row.Scan(&d.ID, &d.Key.Source, &d.Key.ID, &d.Stream.Source, &d.Stream.Subject,
		&d.Sequence, &d.Reason, &d.Event, &attempts, &firstFailed, &lastFailed)
	if err != nil {
		return store.DeadLetter{}, err
	}
	d.Attempts = int(attempts)
	d.FirstFailed = fromMicros(firstFailed)
	d.LastFailed = fromMicros(lastFailed)
	return d, nil
}

// ListGaps implements store.InboxStore. It reads one snapshot without the
// write lock.
func (s *Store) ListGaps(ctx context.Context, key *store.StreamKey, limit int) ([]store.GapRecord, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitestore: list gaps: limit %d is below 1", limit)
	}
	query, args := gapsListSQL, []any{sql.Named("limit", int64(limit))}
	if key != nil {
		query, args = gapsListStreamSQL, append(args, streamArgs(*key)...)
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list gaps: %w", interpretError(err))
	}
	defer rows.Close()
	var out []store.GapRecord
	for rows.Next() {
		var (
			g                store.GapRecord
			delta, firstSeen int64
		)
		if err := rows.Scan(&g.Stream.Source, &g.Stream.Subject, &g.From, &g.To, &delta, &firstSeen); err != nil {
			return nil, fmt.Errorf("sqlitestore: list gaps: %w", interpretError(err))
		}
		g.Delta = delta != 0
		g.FirstSeen = fromMicros(firstSeen)
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list gaps: %w", interpretError(err))
	}
	return out, nil
}

// OverdueStreams implements store.InboxStore: the streams with an open gap
// come from the gap_since index, oldest first, ties by key. It reads one
// snapshot without the write lock.
func (s *Store) OverdueStreams(ctx context.Context, before time.Time, limit int) ([]store.StreamKey, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitestore: overdue streams: limit %d is below 1", limit)
	}
	rows, err := s.db.QueryContext(ctx, overdueSQL, sql.Named("before", before.UnixMicro()), sql.Named("limit", int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: overdue streams: %w", interpretError(err))
	}
	defer rows.Close()
	var out []store.StreamKey
	for rows.Next() {
		var k store.StreamKey
		if err := rows.Scan(&k.Source, &k.Subject); err != nil {
			return nil, fmt.Errorf("sqlitestore: overdue streams: %w", interpretError(err))
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: overdue streams: %w", interpretError(err))
	}
	return out, nil
}

// SweepInbox implements store.InboxStore: one transaction, in this store's
// writer turn, that deletes the oldest done inbox rows and the oldest gap
// records (up to limit each) through their time indexes, so that one sync
// covers both.
func (s *Store) SweepInbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("sqlitestore: sweep inbox: limit %d is below 1", limit)
	}
	args := []any{sql.Named("before", before.UnixMicro()), sql.Named("limit", int64(limit))}
	var total int64
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		total = 0
		for _, query := range []string{inboxSweepSQL, gapsSweepSQL} {
			res, err := s.stmts.on(tx).ExecContext(ctx, query, args...)
			if err != nil {
				return interpretError(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return interpretError(err)
			}
			total += n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: sweep inbox: %w", err)
	}
	return int(total), nil
}

// boolInt is b as the integer SQLite stores it.
func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// streamArgs binds a stream key to :source and :subject.
func streamArgs(key store.StreamKey) []any {
	return []any{sql.Named("source", key.Source), sql.Named("subject", key.Subject)}
}

// toMicros is the stored form of a caller's time: microseconds since the
// Unix epoch, 0 for the zero time (fromMicros's inverse).
func toMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// eventError wraps err with the operation and event key, keeping it
// matchable with errors.Is.
func eventError(op string, key store.EventKey, err error) error {
	return fmt.Errorf("sqlitestore: %s (source %q, id %q): %w", op, key.Source, key.ID, err)
}

// streamError wraps err with the operation and stream key, keeping it
// matchable with errors.Is.
func streamError(op string, key store.StreamKey, err error) error {
	return fmt.Errorf("sqlitestore: %s (stream %q %q): %w", op, key.Source, key.Subject, err)
}
