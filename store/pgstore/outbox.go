package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
)

// The outbox (store.OutboxStore and store.OutboxWaker) on the tables of
// migrations/003_idem_outbox.sql. EnqueueTx runs one statement in the
// caller's transaction; the other methods run one statement each on the
// pool. Every time is the caller's (the relay's clock; Config.Now is not
// read), stored to the microsecond.

var (
	_ store.OutboxStore[pgx.Tx] = (*Store)(nil)
	_ store.OutboxWaker         = (*Store)(nil)
)

// outboxChannel is the channel EnqueueTx notifies and OutboxWakeups
// listens on. The payload is the store's schema.
const outboxChannel = "idem_outbox"

// unlistenTimeout bounds the UNLISTEN that returns a listening connection
// to the pool clean; it runs after the caller's context has ended.
const unlistenTimeout = 5 * time.Second

// EnqueueTx implements store.OutboxStore in one statement
// (sql/outbox_enqueue.sql): the row's insert, for a stream the upsert that
// takes its next sequence, and pg_notify, which PostgreSQL sends when tx
// commits. A zero in.EnqueuedAt is stored as in.DueAt, and a zero DueAt
// (due at once) as the zero time, before any clock.
//
// The stream's sequence row stays locked until tx ends, so transactions
// enqueuing to one stream run one after the other from their first enqueue
// to it; a transaction enqueuing to several streams should do so in a
// fixed order (by name), or two of them may deadlock (PostgreSQL then
// fails one).
//
// PostgreSQL serialises the commits of all transactions that notified,
// across the whole cluster, from the commit's start to the end of its WAL
// flush (see the package doc, Outbox): many concurrent enqueuing
// transactions commit one at a time.
//
// Method, Path and the Headers and Metadata keys and values are stored as
// text and jsonb, which cannot hold invalid UTF-8 or a NUL byte: such an
// intent is refused before any statement runs, so tx stays usable. Target,
// Stream and Body take any bytes.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, in store.Intent) (id, seq int64, err error) {
	if in.Target == "" || in.Method == "" {
		return 0, 0, errors.New("idem/pgstore: enqueue: target and method are required")
	}
	headers, err := jsonMap("header", in.Headers)
	if err != nil {
		return 0, 0, fmt.Errorf("idem/pgstore: enqueue to %q: %w", in.Target, err)
	}
	metadata, err := jsonMap("metadata", in.Metadata)
	if err != nil {
		return 0, 0, fmt.Errorf("idem/pgstore: enqueue to %q: %w", in.Target, err)
	}
	for name, v := range map[string]string{"method": in.Method, "path": in.Path} {
		if !storable(v) {
			return 0, 0, fmt.Errorf("idem/pgstore: enqueue to %q: %s %q is not valid UTF-8 without NUL", in.Target, name, v)
		}
	}
	var stream any // NULL for no stream
	if in.Stream != "" {
		stream = []byte(in.Stream)
	}
	enqueuedAt := in.EnqueuedAt
	if enqueuedAt.IsZero() {
		enqueuedAt = in.DueAt
	}
	err = tx.QueryRow(ctx, s.enqueueSQL, bytesOf(in.Target), in.Method, in.Path, orEmpty(in.Body),
		headers, metadata, stream, in.DueAt, enqueuedAt).Scan(&id, &seq)
	if err != nil {
		return 0, 0, fmt.Errorf("idem/pgstore: enqueue to %q: %w", in.Target, err)
	}
	return id, seq, nil
}

// outboxEnqueueQuietSQL is outbox_enqueue.sql without its pg_notify
// (Config.OutboxNotifyAfterCommit).
var outboxEnqueueQuietSQL = strings.Replace(outboxEnqueueSQL,
	"FROM o, (SELECT pg_notify('idem_outbox', current_schema())) AS n", "FROM o", 1)

// NotifyOutbox wakes the relays listening on the store's outbox
// (OutboxWakeups), in a transaction of its own that writes nothing: call
// it after a transaction that enqueued intents committed, when the store
// was opened with Config.OutboxNotifyAfterCommit. It never waits for
// another transaction's commit.
func (s *Store) NotifyOutbox(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, current_schema())`, outboxChannel); err != nil {
		return fmt.Errorf("idem/pgstore: notify outbox: %w", err)
	}
	return nil
}

// ClaimIntents implements store.OutboxStore in one statement
// (sql/outbox_claim.sql): a CTE selects the candidates in id order, FOR
// UPDATE SKIP LOCKED, and an UPDATE puts them in flight. Concurrent claims
// never wait on each other, and each row goes to one of them.
//
// Why no two rows of a stream are ever in flight at once. Let r be a
// stream's row with sequence k and r' one with k' > k. (1) No snapshot
// holds r' without r: the enqueue of r held the stream's sequence row
// locked until its transaction ended, so r' was enqueued by that same
// transaction or took its sequence after r committed. (2) A claim takes r'
// only if its snapshot shows r done or dead; r is in that snapshot by (1),
// since r' is. (3) Done and dead are final (RequeueIntent
// is the operator's exception). So once r' has been claimed, r can never be
// claimed again, and r' is not claimed while r is pending or in flight: a
// claim whose snapshot shows r live excludes r' (NOT EXISTS), and one that
// holds r locked, not yet committed, leaves r pending in every other
// claim's snapshot. Two claims of the same row are kept apart by the row
// lock: the second skips the row while it is locked, and once the first
// has committed, rechecks the row's new version (in flight, lease live)
// and drops it. A stream's order is by sequence, never by id, which may
// differ (see sql/outbox_enqueue.sql).
//
// A RequeueIntent of a stream's dead row makes it claimable again even
// when a later row is in flight or done, as in the reference model.
//
// The claim's cost grows with the live rows it must pass over to find
// Limit claimable ones, in id order: rows not yet due and rows under a live
// lease are passed over inside the claim index, cheaply; rows of skipped
// targets and stream rows behind their head are read and rejected one by
// one. A large backlog of a disabled target, or a long stream whose head
// waits, slows every claim down (see the package doc, Outbox).
func (s *Store) ClaimIntents(ctx context.Context, c store.OutboxClaim) ([]store.Intent, error) {
	if c.Limit < 1 || c.Owner == "" || c.Lease <= 0 {
		return nil, fmt.Errorf("idem/pgstore: claim intents: limit %d, owner %q, lease %v: want limit >= 1, an owner and a lease", c.Limit, c.Owner, c.Lease)
	}
	skip := make([][]byte, 0, len(c.Skip)) // never nil: <> ALL (NULL) is never true
	for _, t := range c.Skip {
		skip = append(skip, []byte(t))
	}
	rows, err := s.pool.Query(ctx, outboxClaimSQL, c.Now, []byte(c.Owner), c.Now.Add(c.Lease), c.Limit, skip)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: claim intents: %w", err)
	}
	out, err := collectIntents(rows)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: claim intents: %w", err)
	}
	slices.SortFunc(out, func(a, b store.Intent) int { return cmp.Compare(a.ID, b.ID) }) // RETURNING has no order
	return out, nil
}

// CompleteIntent implements store.OutboxStore (sql/outbox_complete.sql).
func (s *Store) CompleteIntent(ctx context.Context, f store.IntentFence, status int, at time.Time) error {
	return s.fencedIntent(ctx, "complete", f, outboxCompleteSQL, status, at)
}

// CompleteIntents implements store.OutboxBatcher: the fenced UPDATEs in
// one pipeline, which PostgreSQL runs as one implicit transaction (one
// commit, one WAL flush). A fenced intent updates no row and is reported
// alone.
func (s *Store) CompleteIntents(ctx context.Context, fences []store.IntentFence, statuses []int, at time.Time) ([]error, error) {
	if len(fences) != len(statuses) {
		return nil, fmt.Errorf("idem/pgstore: complete intents: %d fences and %d statuses", len(fences), len(statuses))
	}
	errs := make([]error, len(fences))
	if len(fences) == 0 {
		return errs, nil
	}
	b := &pgx.Batch{}
	for i, f := range fences {
		b.Queue(outboxCompleteSQL, f.ID, f.Epoch, []byte(f.Owner), statuses[i], at)
	}
	res := s.pool.SendBatch(ctx, b)
	var err error
	for i, f := range fences {
		tag, e := res.Exec()
		if e != nil {
			err = e
			break
		}
		if tag.RowsAffected() == 0 {
			errs[i] = fmt.Errorf("idem/pgstore: complete intent %d (epoch %d): %w", f.ID, f.Epoch, store.ErrFenced)
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: complete intents: %w", interpretError(err))
	}
	return errs, nil
}

// RetryIntent implements store.OutboxStore (sql/outbox_retry.sql).
// lastErr is stored as text: invalid UTF-8 and NUL bytes in it become
// U+FFFD.
func (s *Store) RetryIntent(ctx context.Context, f store.IntentFence, dueAt time.Time, lastErr string) error {
	return s.fencedIntent(ctx, "retry", f, outboxRetrySQL, dueAt, storableText(lastErr))
}

// KillIntent implements store.OutboxStore (sql/outbox_kill.sql). reason is
// stored as RetryIntent stores lastErr.
func (s *Store) KillIntent(ctx context.Context, f store.IntentFence, reason string, at time.Time) error {
	return s.fencedIntent(ctx, "kill", f, outboxKillSQL, storableText(reason), at)
}

// fencedIntent runs one fenced UPDATE, whose first parameters are the fence
// ($1 id, $2 epoch, $3 owner) and the rest are more, and turns "no row
// updated" into ErrFenced.
func (s *Store) fencedIntent(ctx context.Context, op string, f store.IntentFence, sql string, more ...any) error {
	args := append([]any{f.ID, f.Epoch, []byte(f.Owner)}, more...)
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("idem/pgstore: %s intent %d epoch %d: %w", op, f.ID, f.Epoch, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idem/pgstore: %s intent %d epoch %d: %w", op, f.ID, f.Epoch, store.ErrFenced)
	}
	return nil
}

// GetIntent implements store.OutboxStore (sql/outbox_get.sql).
func (s *Store) GetIntent(ctx context.Context, id int64) (store.Intent, error) {
	rows, err := s.pool.Query(ctx, outboxGetSQL, id)
	if err != nil {
		return store.Intent{}, fmt.Errorf("idem/pgstore: get intent %d: %w", id, err)
	}
	in, err := pgx.CollectExactlyOneRow(rows, scanIntent)
	if err != nil {
		return store.Intent{}, fmt.Errorf("idem/pgstore: get intent %d: %w", id, interpretError(err))
	}
	return in, nil
}

// ListIntents implements store.OutboxStore (sql/outbox_list.sql).
//
// ids are drawn when intents are enqueued, not when they commit, so an
// intent whose transaction commits after a later one's may appear behind a
// page already read past it.
func (s *Store) ListIntents(ctx context.Context, state store.IntentState, after int64, limit int) ([]store.Intent, error) {
	if err := checkLimit("list intents", limit); err != nil {
		return nil, err
	}
	// Unprepared (the unnamed statement, parsed again each time, an extra
	// round trip), so that PostgreSQL plans it for this state: see
	// sql/outbox_list.sql.
	rows, err := s.pool.Query(ctx, outboxListSQL, pgx.QueryExecModeDescribeExec, int16(state), after, limit)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list intents: %w", err)
	}
	out, err := collectIntents(rows)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list intents: %w", err)
	}
	return out, nil
}

// RequeueIntent implements store.OutboxStore (sql/outbox_requeue.sql).
func (s *Store) RequeueIntent(ctx context.Context, id int64, now time.Time) error {
	tag, err := s.pool.Exec(ctx, outboxRequeueSQL, id, now)
	if err != nil {
		return fmt.Errorf("idem/pgstore: requeue intent %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idem/pgstore: requeue intent %d: not dead: %w", id, store.ErrNotFound)
	}
	return nil
}

// DisableTarget implements store.OutboxStore (sql/outbox_disable.sql). A
// target disabled again keeps one mark, with the new reason and time;
// reason is stored as RetryIntent stores lastErr.
func (s *Store) DisableTarget(ctx context.Context, target, reason string, at time.Time) error {
	if _, err := s.pool.Exec(ctx, outboxDisableSQL, bytesOf(target), storableText(reason), at); err != nil {
		return fmt.Errorf("idem/pgstore: disable target %q: %w", target, err)
	}
	return nil
}

// EnableTarget implements store.OutboxStore (sql/outbox_enable.sql).
func (s *Store) EnableTarget(ctx context.Context, target string) error {
	if _, err := s.pool.Exec(ctx, outboxEnableSQL, bytesOf(target)); err != nil {
		return fmt.Errorf("idem/pgstore: enable target %q: %w", target, err)
	}
	return nil
}

// DisabledTargets implements store.OutboxStore (sql/outbox_disabled.sql),
// in byte order.
func (s *Store) DisabledTargets(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, outboxDisabledSQL)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: disabled targets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var t []byte
		err := r.Scan(&t)
		return string(t), err
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: disabled targets: %w", err)
	}
	return out, nil
}

// SweepIntents implements store.OutboxStore in one statement
// (sql/outbox_sweep.sql) with FOR UPDATE SKIP LOCKED, like SweepInbox.
// Dead rows are never swept. The streams' sequence rows are kept, so that
// a stream's sequence never starts over.
func (s *Store) SweepIntents(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := checkLimit("sweep intents", limit); err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, outboxSweepSQL, before, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("idem/pgstore: sweep intents: %w", err)
	}
	return int(n), nil
}

// OutboxWakeups implements store.OutboxWaker with LISTEN. It holds one
// connection of the pool for as long as ctx lasts: it acquires it, LISTENs
// on it, and a goroutine waits for notifications on it and sends a value
// (buffered, coalesced: never blocking) on the channel for each commit of
// intents in this store's schema. When ctx ends or the connection fails,
// the goroutine UNLISTENs (a broken connection is closed instead), returns
// the connection to the pool, and then closes the channel. End ctx before
// closing the pool: pgxpool.Pool.Close waits for the connection.
//
// Intents committed before the call are not announced: call it, then
// claim once, then wait.
func (s *Store) OutboxWakeups(ctx context.Context) (<-chan struct{}, error) {
	return s.listen(ctx, outboxChannel, "outbox wakeups")
}

// listen LISTENs on channel on a connection of its own, as OutboxWakeups
// says, and announces the notifications of this store's schema; what
// names the caller in errors and logs.
func (s *Store) listen(ctx context.Context, channel, what string) (<-chan struct{}, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: %s: acquire a connection: %w", what, err)
	}
	var schema string
	err = conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema)
	if err == nil {
		_, err = conn.Exec(ctx, "LISTEN "+channel)
	}
	if err != nil {
		s.releaseListener(ctx, conn, channel, what)
		return nil, fmt.Errorf("idem/pgstore: %s: listen: %w", what, err)
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch) // after the connection is back in the pool
		defer s.releaseListener(ctx, conn, channel, what)
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.WarnContext(ctx, "idem/pgstore: "+what+": the listening connection failed", slog.Any("error", err))
				}
				return
			}
			if n.Channel != channel || n.Payload != schema {
				continue // another schema's store
			}
			select {
			case ch <- struct{}{}:
			default: // one is pending already
			}
		}
	}()
	return ch, nil
}

// releaseListener returns a listening connection to the pool clean: it
// UNLISTENs, bounded by unlistenTimeout even though ctx may have ended, and
// drops the notifications pgx buffered meanwhile. A connection that is
// broken, or fails to UNLISTEN, is taken from the pool and closed before
// releaseListener returns (a Release would destroy it in the background).
func (s *Store) releaseListener(ctx context.Context, conn *pgxpool.Conn, channel, what string) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlistenTimeout)
	defer cancel()
	c := conn.Conn()
	if !c.IsClosed() {
		_, err := c.Exec(uctx, "UNLISTEN "+channel)
		if err == nil {
			// WaitForNotification returns the buffered notifications first;
			// with a context already done it then returns at once, without
			// reading.
			done, stop := context.WithCancel(context.Background())
			stop()
			for {
				if n, _ := c.WaitForNotification(done); n == nil {
					break
				}
			}
			conn.Release()
			return
		}
		s.logger.DebugContext(ctx, "idem/pgstore: "+what+": unlisten failed; closing the connection", slog.Any("error", err))
	}
	_ = conn.Hijack().Close(uctx)
}

// scanIntent scans one intent from the columns the outbox's reads return,
// in this order:
// id, seq, epoch, due_at, lease_until, enqueued_at, done_at, attempts,
// status, state, target, stream, owner, method, path, last_error, headers,
// metadata, body.
func scanIntent(r pgx.CollectableRow) (store.Intent, error) {
	var (
		in                      store.Intent
		seq                     *int64
		leaseUntil, doneAt      *time.Time
		attempts, status        int32
		state                   int16
		target, stream, owner   []byte
		headers, metadata, body []byte
		dueAt, enqueuedAt       time.Time
		method, path, lastError string
		headersMap, metadataMap map[string]string
		errHeaders, errMetadata error
	)
	err := r.Scan(&in.ID, &seq, &in.Epoch, &dueAt, &leaseUntil, &enqueuedAt, &doneAt, &attempts,
		&status, &state, &target, &stream, &owner, &method, &path, &lastError, &headers, &metadata, &body)
	if err != nil {
		return store.Intent{}, err
	}
	if headers != nil {
		errHeaders = json.Unmarshal(headers, &headersMap)
	}
	if metadata != nil {
		errMetadata = json.Unmarshal(metadata, &metadataMap)
	}
	if err := errors.Join(errHeaders, errMetadata); err != nil {
		return store.Intent{}, fmt.Errorf("intent %d: %w: %w", in.ID, store.ErrCorrupt, err)
	}
	if seq != nil {
		in.Sequence = *seq
	}
	if leaseUntil != nil {
		in.LeaseUntil = leaseUntil.UTC()
	}
	if doneAt != nil {
		in.DoneAt = doneAt.UTC()
	}
	in.DueAt, in.EnqueuedAt = dueAt.UTC(), enqueuedAt.UTC()
	in.Attempts, in.Status, in.State = int(attempts), int(status), store.IntentState(state)
	in.Target, in.Stream, in.Owner = string(target), string(stream), string(owner)
	in.Method, in.Path, in.LastError = method, path, lastError
	in.Headers, in.Metadata, in.Body = headersMap, metadataMap, body
	return in, nil
}

// collectIntents scans every row with scanIntent.
func collectIntents(rows pgx.Rows) ([]store.Intent, error) {
	return pgx.CollectRows(rows, scanIntent)
}

// jsonMap encodes m for a jsonb column: nil (NULL) for a nil map. jsonb
// cannot hold NUL, and encoding/json would replace invalid UTF-8, so a map
// with either is refused.
func jsonMap(what string, m map[string]string) (any, error) {
	if m == nil {
		return nil, nil
	}
	for k, v := range m {
		if !storable(k) || !storable(v) {
			return nil, fmt.Errorf("%s %q: %q is not valid UTF-8 without NUL", what, k, v)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// storable reports whether s fits a text or jsonb value as it is.
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
