package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemhq/idem/store"
)

// The outbox statements (migration 003). They run unprepared, like the
// inbox's rarer ones: the store's prepared statements are made by New for
// the request keys and the inbox's per-event path.
var (
	//go:embed sql/outbox_stream_seq.sql
	outboxStreamSeqSQL string
	//go:embed sql/outbox_enqueue.sql
	outboxEnqueueSQL string
	//go:embed sql/outbox_promote.sql
	outboxPromoteSQL string
	//go:embed sql/outbox_claim.sql
	outboxClaimSQL string
	//go:embed sql/outbox_complete.sql
	outboxCompleteSQL string
	//go:embed sql/outbox_retry.sql
	outboxRetrySQL string
	//go:embed sql/outbox_kill.sql
	outboxKillSQL string
	//go:embed sql/outbox_requeue.sql
	outboxRequeueSQL string
	//go:embed sql/outbox_get.sql
	outboxGetSQL string
	//go:embed sql/outbox_list.sql
	outboxListSQL string
	//go:embed sql/outbox_list_active.sql
	outboxListActiveSQL string
	//go:embed sql/outbox_disable.sql
	outboxDisableSQL string
	//go:embed sql/outbox_enable.sql
	outboxEnableSQL string
	//go:embed sql/outbox_hold_target.sql
	outboxHoldTargetSQL string
	//go:embed sql/outbox_release_target.sql
	outboxReleaseTargetSQL string
	//go:embed sql/outbox_disabled.sql
	outboxDisabledSQL string
	//go:embed sql/outbox_sweep.sql
	outboxSweepSQL string
)

var _ store.OutboxStore[*sql.Tx] = (*Store)(nil)

// promoteBatch is the most rows whose wait ended that one claim moves into
// its walk (outbox_promote.sql). A burst of more rows coming due at once
// (a backoff that ended for a whole backlog, a target enabled again, the
// leases of a relay that died with many rows) joins over several claims,
// oldest first, instead of stalling one claim, and every other writer,
// behind a long update; meanwhile those claims take the oldest due rows
// that joined, not the oldest ids.
const promoteBatch = 1000

// EnqueueTx implements store.OutboxStore: one INSERT in tx (which looks up
// the stream's pending rows and the disabled targets to decide where the
// row waits), preceded, for a stream, by the upsert that gives out the
// stream's next sequence. tx must hold the write lock (as InTx's do from
// BEGIN), or the first statement takes it; either way no other transaction
// gives out a sequence of the stream until tx ends, and a rolled-back tx
// gives back both the row and its sequence. tx may come from any handle on
// the file.
//
// A zero in.DueAt is stored as 0: due at once. A zero in.EnqueuedAt is
// stored as in.DueAt, as in the memory model. A row due after the store's
// clock, behind a pending or in-flight row of its stream, or of a disabled
// target is held out of the claims' walk until then (see migration 003).
func (s *Store) EnqueueTx(ctx context.Context, tx *sql.Tx, in store.Intent) (id, seq int64, err error) {
	if tx == nil {
		return 0, 0, errors.New("sqlitestore: enqueue intent: tx is nil")
	}
	if in.Target == "" || in.Method == "" {
		return 0, 0, fmt.Errorf("sqlitestore: enqueue intent (target %q, method %q): target and method are required", in.Target, in.Method)
	}
	headers, err := jsonMap(in.Headers)
	if err != nil {
		return 0, 0, enqueueError(in, fmt.Errorf("headers: %w", err))
	}
	metadata, err := jsonMap(in.Metadata)
	if err != nil {
		return 0, 0, enqueueError(in, fmt.Errorf("metadata: %w", err))
	}
	var stream sql.NullString
	if in.Stream != "" {
		stream = sql.NullString{String: in.Stream, Valid: true}
		if err := s.stmts.outboxStreamSeq.txQueryRow(ctx, tx, sql.Named("stream", in.Stream)).Scan(&seq); err != nil {
			return 0, 0, enqueueError(in, interpretError(err))
		}
	}
	enqueuedAt := in.EnqueuedAt
	if enqueuedAt.IsZero() {
		enqueuedAt = in.DueAt
	}
	res, err := s.stmts.outboxEnqueue.txExec(ctx, tx,
		sql.Named("target", in.Target),
		sql.Named("stream", stream),
		sql.Named("seq", seq),
		sql.Named("due_at", toMicros(in.DueAt)),
		sql.Named("enqueued_at", toMicros(enqueuedAt)),
		sql.Named("method", in.Method),
		sql.Named("path", in.Path),
		sql.Named("headers", headers),
		sql.Named("metadata", metadata),
		sql.Named("body", nonNil(in.Body)),
		sql.Named("now", s.clock().UnixMicro()),
	)
	if err != nil {
		return 0, 0, enqueueError(in, interpretError(err))
	}
	if id, err = res.LastInsertId(); err != nil {
		return 0, 0, enqueueError(in, interpretError(err))
	}
	return id, seq, nil
}

// ClaimIntents implements store.OutboxStore in one write transaction, in
// this store's writer turn: an UPDATE moves the rows whose due time or
// lease end came into the claim's walk (at most promoteBatch; see
// migration 003), then one UPDATE picks the due rows, oldest first, and
// claims them (sql/outbox_claim.sql). SQLite admits one writer at a time,
// so a row goes to one relay even when relays of several processes claim
// at once. The claimed rows are returned by ID. Like every non-Tx method,
// it must not be called inside InTx.
func (s *Store) ClaimIntents(ctx context.Context, c store.OutboxClaim) ([]store.Intent, error) {
	if c.Limit < 1 || c.Owner == "" || c.Lease <= 0 {
		return nil, fmt.Errorf("sqlitestore: claim intents: limit %d, owner %q, lease %v: want a limit of at least 1, an owner and a lease", c.Limit, c.Owner, c.Lease)
	}
	skip := c.Skip
	if skip == nil {
		skip = []string{}
	}
	skipJSON, err := json.Marshal(skip)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim intents: %w", err)
	}
	now := c.Now.UnixMicro()
	var out []store.Intent
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.stmts.outboxPromote.txExec(ctx, tx, sql.Named("now", now), sql.Named("batch", int64(promoteBatch)))
		if err != nil {
			return interpretError(err)
		}
		rows, err := s.stmts.outboxClaim.txQuery(ctx, tx,
			sql.Named("owner", c.Owner),
			sql.Named("now", now),
			sql.Named("lease_until", addMicros(c.Now, c.Lease)),
			sql.Named("skip", string(skipJSON)),
			sql.Named("limit", int64(c.Limit)),
		)
		if err != nil {
			return interpretError(err)
		}
		out, err = scanIntents(rows, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim intents: %w", err)
	}
	slices.SortFunc(out, func(a, b store.Intent) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// CompleteIntent implements store.OutboxStore: one fenced UPDATE.
func (s *Store) CompleteIntent(ctx context.Context, f store.IntentFence, status int, at time.Time) error {
	return fenceError("complete intent", f, s.fencedIntent(ctx, s.stmts.outboxComplete, f,
		sql.Named("status", int64(status)),
		sql.Named("done_at", toMicros(at)),
	))
}

// CompleteIntents implements store.OutboxBatcher: the fenced UPDATEs in
// one transaction, one commit (one fsync) for all; a fenced intent changes
// no row and is reported alone.
func (s *Store) CompleteIntents(ctx context.Context, fences []store.IntentFence, statuses []int, at time.Time) ([]error, error) {
	if len(fences) != len(statuses) {
		return nil, fmt.Errorf("sqlitestore: complete intents: %d fences and %d statuses", len(fences), len(statuses))
	}
	errs := make([]error, len(fences))
	if len(fences) == 0 {
		return errs, nil
	}
	err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for i, f := range fences {
			res, err := s.stmts.outboxComplete.exec(ctx, tx, sql.Named("status", int64(statuses[i])), sql.Named("done_at", toMicros(at)),
				sql.Named("id", f.ID), sql.Named("epoch", f.Epoch), sql.Named("owner", f.Owner))
			if err != nil {
				return interpretError(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return interpretError(err)
			}
			errs[i] = nil
			if n == 0 {
				errs[i] = fenceError("complete intent", f, store.ErrFenced)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: complete intents: %w", err)
	}
	return errs, nil
}

// RetryIntent implements store.OutboxStore: one fenced UPDATE.
func (s *Store) RetryIntent(ctx context.Context, f store.IntentFence, dueAt time.Time, lastErr string) error {
	return fenceError("retry intent", f, s.fencedIntent(ctx, s.stmts.outboxRetry, f,
		sql.Named("due_at", toMicros(dueAt)),
		sql.Named("last_error", lastErr),
	))
}

// KillIntent implements store.OutboxStore: one fenced UPDATE.
func (s *Store) KillIntent(ctx context.Context, f store.IntentFence, reason string, at time.Time) error {
	return fenceError("kill intent", f, s.fencedIntent(ctx, s.stmts.outboxKill, f,
		sql.Named("last_error", reason),
		sql.Named("done_at", toMicros(at)),
	))
}

// fencedIntent runs one compare-and-set statement of a relay, in this
// store's writer turn: it changes the row only WHERE id, epoch and owner
// match and the row is in flight, and reports store.ErrFenced when no row
// matched.
func (s *Store) fencedIntent(ctx context.Context, st stmt, f store.IntentFence, args ...any) error {
	args = append(args, sql.Named("id", f.ID), sql.Named("epoch", f.Epoch), sql.Named("owner", f.Owner))
	return s.withWrite(ctx, func() error {
		res, err := st.pool.ExecContext(ctx, args...)
		if err != nil {
			return interpretError(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return interpretError(err)
		}
		if n == 0 {
			return store.ErrFenced
		}
		return nil
	})
}

// execCount runs one autocommit statement on the pool and returns how many
// rows it changed. The caller holds the writer turn.
func (s *Store) execCount(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, interpretError(err)
	}
	n, err := res.RowsAffected()
	return n, interpretError(err)
}

// GetIntent implements store.OutboxStore. It reads without the write lock.
func (s *Store) GetIntent(ctx context.Context, id int64) (store.Intent, error) {
	rows, err := s.db.QueryContext(ctx, outboxGetSQL, sql.Named("id", id))
	if err != nil {
		return store.Intent{}, intentError("get intent", id, interpretError(err))
	}
	got, err := scanIntents(rows, nil)
	if err != nil {
		return store.Intent{}, intentError("get intent", id, err)
	}
	if len(got) == 0 {
		return store.Intent{}, intentError("get intent", id, store.ErrNotFound)
	}
	return got[0], nil
}

// ListIntents implements store.OutboxStore. Pending, in-flight and dead
// rows are paged through an index of their state, done ones through the
// table (they are most of it). It reads one snapshot without the write
// lock.
func (s *Store) ListIntents(ctx context.Context, state store.IntentState, after int64, limit int) ([]store.Intent, error) {
	if limit < 1 {
		return nil, fmt.Errorf("sqlitestore: list intents: limit %d is below 1", limit)
	}
	query := outboxListSQL
	switch state {
	case store.IntentPending, store.IntentInFlight, store.IntentDead:
		query = outboxListActiveSQL
	}
	rows, err := s.db.QueryContext(ctx, query,
		sql.Named("state", int64(state)),
		sql.Named("after", after),
		sql.Named("limit", int64(limit)),
	)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list intents: %w", interpretError(err))
	}
	out, err := scanIntents(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list intents: %w", err)
	}
	return out, nil
}

// RequeueIntent implements store.OutboxStore: one UPDATE of a dead row, in
// this store's writer turn; store.ErrNotFound when id is not dead.
func (s *Store) RequeueIntent(ctx context.Context, id int64, now time.Time) error {
	err := s.withWrite(ctx, func() error {
		n, err := s.execCount(ctx, outboxRequeueSQL, sql.Named("id", id), sql.Named("now", toMicros(now)))
		if err == nil && n == 0 {
			err = fmt.Errorf("not dead: %w", store.ErrNotFound)
		}
		return err
	})
	return intentError("requeue intent", id, err)
}

// DisableTarget implements store.OutboxStore: in one transaction, in this
// store's writer turn, an upsert of the mark, and the target's pending
// rows held out of the claims' walk, so that relays skipping the target
// do not step over its backlog at every claim. That takes one pass over
// the pending rows in the walk. The rows stay pending, and a claim that
// does not skip the target still finds them.
func (s *Store) DisableTarget(ctx context.Context, target, reason string, at time.Time) error {
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, outboxDisableSQL,
			sql.Named("target", target), sql.Named("reason", reason), sql.Named("disabled_at", toMicros(at)))
		if err == nil {
			_, err = tx.ExecContext(ctx, outboxHoldTargetSQL, sql.Named("target", target))
		}
		return interpretError(err)
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: disable target %q: %w", target, err)
	}
	return nil
}

// EnableTarget implements store.OutboxStore: in one transaction, in this
// store's writer turn, the mark is removed and the target's held rows
// wait for their due time again; the next claims move them into their
// walk (promoteBatch at a time).
func (s *Store) EnableTarget(ctx context.Context, target string) error {
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, outboxEnableSQL, sql.Named("target", target))
		if err == nil {
			_, err = tx.ExecContext(ctx, outboxReleaseTargetSQL, sql.Named("target", target))
		}
		return interpretError(err)
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: enable target %q: %w", target, err)
	}
	return nil
}

// DisabledTargets implements store.OutboxStore, by name. It reads without
// the write lock.
func (s *Store) DisabledTargets(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, outboxDisabledSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: disabled targets: %w", interpretError(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("sqlitestore: disabled targets: %w", interpretError(err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: disabled targets: %w", interpretError(err))
	}
	return out, nil
}

// SweepIntents implements store.OutboxStore: one DELETE of up to limit
// done rows, oldest end first through the sweep index, in this store's
// writer turn. Call it again while it returns limit.
func (s *Store) SweepIntents(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("sqlitestore: sweep intents: limit %d is below 1", limit)
	}
	var n int64
	err := s.withWrite(ctx, func() error {
		var err error
		n, err = s.execCount(ctx, outboxSweepSQL, sql.Named("before", before.UnixMicro()), sql.Named("limit", int64(limit)))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: sweep intents: %w", err)
	}
	return int(n), nil
}

// scanIntents maps the rows of the statements that return whole intents
// (their columns in the order of outbox_get.sql), appending to out, and
// closes rows.
func scanIntents(rows *sql.Rows, out []store.Intent) ([]store.Intent, error) {
	defer rows.Close()
	for rows.Next() {
		var (
			in                                    store.Intent
			headers, metadata, stream             sql.NullString
			state, attempts, status               int64
			dueAt, leaseUntil, enqueuedAt, doneAt int64
		)
		err := rows.Scan(&in.ID, &in.Target, &in.Method, &in.Path, &in.Body, &headers, &metadata, &stream,
			&in.Sequence, &state, &attempts, &dueAt, &in.Epoch, &in.Owner, &leaseUntil, &in.LastError,
			&status, &enqueuedAt, &doneAt)
		if err != nil {
			return nil, interpretError(err)
		}
		if in.Headers, err = mapJSON(headers); err != nil {
			return nil, fmt.Errorf("intent %d: headers: %w: %w", in.ID, store.ErrCorrupt, err)
		}
		if in.Metadata, err = mapJSON(metadata); err != nil {
			return nil, fmt.Errorf("intent %d: metadata: %w: %w", in.ID, store.ErrCorrupt, err)
		}
		in.Stream = stream.String
		in.State = store.IntentState(state)
		in.Attempts = int(attempts)
		in.Status = int(status)
		in.DueAt = fromMicros(dueAt)
		in.LeaseUntil = fromMicros(leaseUntil)
		in.EnqueuedAt = fromMicros(enqueuedAt)
		in.DoneAt = fromMicros(doneAt)
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return out, nil
}

// jsonMap is the stored form of headers and metadata: a JSON object, NULL
// when m is empty.
func jsonMap(m map[string]string) (sql.NullString, error) {
	if len(m) == 0 {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

// mapJSON is jsonMap's inverse: nil for NULL.
func mapJSON(s sql.NullString) (map[string]string, error) {
	if !s.Valid {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s.String), &m); err != nil {
		return nil, err
	}
	return m, nil
}

// enqueueError wraps err with the intent's target and stream, keeping it
// matchable with errors.Is.
func enqueueError(in store.Intent, err error) error {
	return fmt.Errorf("sqlitestore: enqueue intent (target %q, stream %q): %w", in.Target, in.Stream, err)
}

// intentError wraps err with the operation and intent id, keeping it
// matchable with errors.Is; nil stays nil.
func intentError(op string, id int64, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlitestore: %s %d: %w", op, id, err)
}

// fenceError wraps err with the operation and fence, keeping it matchable
// with errors.Is; nil stays nil.
func fenceError(op string, f store.IntentFence, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlitestore: %s %d (epoch %d, owner %q): %w", op, f.ID, f.Epoch, f.Owner, err)
}
