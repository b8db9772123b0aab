package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// outboxIntent is a small intent due at t0.
func outboxIntent(target, stream string) store.Intent {
	return store.Intent{Target: target, Method: "POST", Path: "/charges", Body: []byte(`{"amount":100}`),
		Stream: stream, DueAt: t0, EnqueuedAt: t0}
}

// enqueueAll enqueues ins in one transaction of s and returns their ids.
func enqueueAll(t testing.TB, s *Store, ins ...store.Intent) []int64 {
	t.Helper()
	var ids []int64
	err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ids = ids[:0]
		for _, in := range ins {
			id, _, err := s.EnqueueTx(ctx, tx, in)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return ids
}

// claimOutbox is ClaimIntents at now with a minute's lease, failing the
// test on an error.
func claimOutbox(t testing.TB, s *Store, owner string, now time.Time, limit int, skip ...string) []store.Intent {
	t.Helper()
	got, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: owner, Now: now, Lease: time.Minute, Limit: limit, Skip: skip})
	if err != nil {
		t.Fatalf("ClaimIntents: %v", err)
	}
	return got
}

func intentIDs(in []store.Intent) []int64 {
	out := []int64{}
	for _, i := range in {
		out = append(out, i.ID)
	}
	return out
}

// bulkOutbox inserts n pending intents of target "pay" due at t0 straight
// into an empty table, one in every streamEvery in one of streams streams
// (0: none), each stream's rows after the first held behind it, in one
// statement: faster than EnqueueTx for building large tables in tests.
func bulkOutbox(t testing.TB, db *sql.DB, n, streamEvery, streams int) {
	t.Helper()
	_, err := db.Exec(`
WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < :n),
r(stream, seq) AS (
    SELECT CASE WHEN :every > 0 AND n % :every = 0 THEN 'order-' || (n / :every % :streams) END,
           CASE WHEN :every > 0 AND n % :every = 0 THEN n / :every / :streams + 1 ELSE 0 END
    FROM i
)
INSERT INTO idem_outbox (state, hold, target, stream, seq, due_at, enqueued_at, method, path, body)
SELECT 1, CASE WHEN seq > 1 THEN 2 ELSE 0 END, 'pay', stream, seq, :due, :due, 'POST', '/charges', X'7B7D'
FROM r`,
		sql.Named("n", n), sql.Named("every", streamEvery), sql.Named("streams", max(streams, 1)), sql.Named("due", t0.UnixMicro()))
	if err != nil {
		t.Fatalf("bulk insert: %v", err)
	}
}

// TestOutboxPlans checks, on 100,000 pending intents (one in ten in one of
// 1,000 streams, all but the first of each held behind it), that the
// outbox's statements search their indexes: the claim walks the claim
// index in id order and stops at its limit (the walk is not sorted; only
// the up to :limit rows it yields are, with the disabled targets' part),
// and every stream check is one search. The plans must hold after ANALYZE
// too (PRAGMA optimize runs it).
func TestOutboxPlans(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	bulkOutbox(t, b.db, 100_000, 10, 1_000)

	named := func(kv ...any) []any {
		var out []any
		for i := 0; i < len(kv); i += 2 {
			out = append(out, sql.Named(kv[i].(string), kv[i+1]))
		}
		return out
	}
	page := func(state store.IntentState) []any {
		return named("state", int64(state), "after", int64(10), "limit", int64(32))
	}
	fence := named("id", 1, "epoch", 1, "owner", "o", "status", 200, "done_at", 1, "due_at", 1, "last_error", "")
	const byID = "SEARCH idem_outbox USING INTEGER PRIMARY KEY (rowid=?)"
	const streamHead = "SEARCH p USING COVERING INDEX idem_outbox_stream (stream=? AND id<?)"
	cases := []struct {
		name, query string
		args        []any
		want        []string
		sorts       bool // the claim sorts the few rows its parts yield
	}{
		{"claim", outboxClaimSQL, named("owner", "o", "now", t0.UnixMicro(), "lease_until", 2, "skip", `["legacy"]`, "limit", 32), []string{
			byID, "SEARCH o USING INDEX idem_outbox_claim (hold=?)", streamHead,
			"SEARCH d USING INDEX idem_outbox_disabled (target=?)",
		}, true},
		{"promote", outboxPromoteSQL, named("now", 1, "batch", 1000),
			[]string{byID, "MERGE (UNION ALL)", "SEARCH idem_outbox USING COVERING INDEX idem_outbox_wait (due_at<?)",
				"SEARCH idem_outbox USING COVERING INDEX idem_outbox_lease (lease_until<?)"}, false},
		{"enqueue", outboxEnqueueSQL, named("target", "t", "stream", "s", "seq", 1, "due_at", 1, "enqueued_at", 1, "method", "m",
			"path", "p", "headers", nil, "metadata", nil, "body", []byte{}, "now", 1),
			[]string{"SEARCH idem_outbox USING COVERING INDEX idem_outbox_stream (stream=?)"}, false},
		{"next in stream (trigger)", `SELECT min(id) FROM idem_outbox WHERE stream = :s AND state IN (1, 2)`, named("s", "order-1"),
			[]string{"SEARCH idem_outbox USING COVERING INDEX idem_outbox_stream (stream=?)"}, false},
		{"requeue", outboxRequeueSQL, named("id", 1, "now", 1), []string{byID, streamHead}, false},
		{"hold target", outboxHoldTargetSQL, named("target", "t"), []string{byID, "SEARCH idem_outbox USING INDEX idem_outbox_claim (hold=?)"}, false},
		{"release target", outboxReleaseTargetSQL, named("target", "t"),
			[]string{byID, "SEARCH idem_outbox USING COVERING INDEX idem_outbox_disabled (target=?)"}, false},
		{"sweep", outboxSweepSQL, named("before", 1, "limit", 1000),
			[]string{byID, "SEARCH idem_outbox USING COVERING INDEX idem_outbox_sweep (done_at<?)"}, false},
		{"list pending", outboxListActiveSQL, page(store.IntentPending), []string{"SEARCH idem_outbox USING INDEX idem_outbox_state (state=? AND rowid>?)"}, false},
		{"list dead", outboxListActiveSQL, page(store.IntentDead), []string{"SEARCH idem_outbox USING INDEX idem_outbox_state (state=? AND rowid>?)"}, false},
		{"list done", outboxListSQL, page(store.IntentDone), []string{"SEARCH idem_outbox USING INTEGER PRIMARY KEY (rowid>?)"}, false},
		{"get", outboxGetSQL, named("id", 1), []string{byID}, false},
		{"complete", outboxCompleteSQL, fence, []string{byID}, false},
		{"retry", outboxRetrySQL, fence, []string{byID}, false},
		{"kill", outboxKillSQL, fence, []string{byID}, false},
	}
	check := func(when string) {
		for _, c := range cases {
			plan := queryPlan(t, b.db, c.query, c.args...)
			for _, want := range c.want {
				if !strings.Contains(plan, want) {
					t.Errorf("%s, %s: plan lacks %q:\n%s", when, c.name, want, plan)
				}
			}
			if strings.Contains(plan, "SCAN idem_outbox\n") || strings.Contains(plan, "SCAN o\n") || strings.Contains(plan, "SCAN d\n") {
				t.Errorf("%s, %s: plan scans the table:\n%s", when, c.name, plan)
			}
			sorted := plan
			if c.sorts {
				// The walk (from its co-routine to its first read) must
				// not sort.
				start, end := strings.Index(plan, "CO-ROUTINE"), strings.Index(plan, "SCAN (subquery")
				if start < 0 || end < start {
					t.Errorf("%s, %s: no co-routine for the walk:\n%s", when, c.name, plan)
					continue
				}
				sorted = plan[start:end]
			}
			if strings.Contains(sorted, "TEMP B-TREE") {
				t.Errorf("%s, %s: plan sorts:\n%s", when, c.name, plan)
			}
		}
	}
	check("without statistics")

	// The claim takes the first 32 rows, and of the stream rows only the
	// heads: order-1's first row is id 10, its second id 10,010.
	got := claimOutbox(t, s, "r", t0, 32)
	if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; len(got) != 32 || !slices.Equal(intentIDs(got)[:10], want) {
		t.Fatalf("claimed %v, want 32 from %v", intentIDs(got), want)
	}
	if got[9].Stream != "order-1" || got[9].Sequence != 1 {
		t.Fatalf("the tenth row is %+v, want order-1's first", got[9])
	}

	if _, err := b.db.Exec(`ANALYZE`); err != nil {
		t.Fatal(err)
	}
	check("after ANALYZE")
}

// TestOutboxClaimOrder checks what a claim passes over without breaking a
// stream's order: a head that is not due, in flight, of a skipped target,
// or dead and requeued keeps the rest of its stream waiting.
func TestOutboxClaimOrder(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	late := outboxIntent("pay", "s1")
	late.DueAt = t0.Add(time.Hour)
	ids := enqueueAll(t, s,
		late,                         // 1: s1's head, not due
		outboxIntent("pay", "s1"),    // 2
		outboxIntent("legacy", "s2"), // 3: s2's head, skipped
		outboxIntent("pay", "s2"),    // 4
		outboxIntent("pay", "s3"),    // 5: s3's head
		outboxIntent("pay", "s3"),    // 6
		outboxIntent("pay", ""),      // 7
		outboxIntent("legacy", ""),   // 8: skipped
	)
	if got := intentIDs(claimOutbox(t, s, "a", t0, 10, "legacy")); !slices.Equal(got, []int64{ids[4], ids[6]}) {
		t.Fatalf("claimed %v, want s3's head and the plain pay row", got)
	}
	// s3's head dies; its second row goes; then the dead head is requeued
	// while the second is in flight: when the second's lease ends, the
	// requeued head goes first.
	head, err := s.GetIntent(ctx, ids[4])
	if err != nil {
		t.Fatal(err)
	}
	if err := s.KillIntent(ctx, head.Fence(), "400", t0); err != nil {
		t.Fatal(err)
	}
	second := claimOutbox(t, s, "b", t0, 10, "legacy")
	if !slices.Equal(intentIDs(second), []int64{ids[5]}) {
		t.Fatalf("claimed %v after s3's head died, want its second row", intentIDs(second))
	}
	if err := s.RequeueIntent(ctx, ids[4], t0); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(2 * time.Minute) // every lease ended
	if got := intentIDs(claimOutbox(t, s, "c", later, 10, "legacy")); !slices.Equal(got, []int64{ids[4], ids[6]}) {
		t.Fatalf("claimed %v, want the requeued head and the plain row again (its lease ended)", got)
	}
	// Completing the requeued head frees s3's second row, whose lease
	// ended. s1 waits for its head, due in an hour.
	c := claimOutbox(t, s, "probe", later, 10, "legacy")
	if len(c) != 0 {
		t.Fatalf("claimed %v while every head is in flight, skipped or not due", intentIDs(c))
	}
	head, err = s.GetIntent(ctx, ids[4])
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CompleteIntent(ctx, head.Fence(), 200, later); err != nil {
		t.Fatal(err)
	}
	if got := intentIDs(claimOutbox(t, s, "d", later, 10, "legacy")); !slices.Equal(got, []int64{ids[5]}) {
		t.Fatalf("claimed %v, want s3's second row", got)
	}
	if got := intentIDs(claimOutbox(t, s, "e", t0.Add(time.Hour), 10, "legacy")); !slices.Equal(got, []int64{ids[0], ids[5], ids[6]}) {
		t.Fatalf("claimed %v an hour later, want s1's head, and s3's second and the plain row (their leases ended)", got)
	}
}

// TestOutboxHolds checks where rows wait out of the claim's walk (hold,
// see migration 003): the semantics are the model test's business; this
// checks that the rows a claim may not take are indeed out of its way.
func TestOutboxHolds(t *testing.T) {
	t.Parallel()
	s, b := setup(t) // the store's clock is at t0
	holds := func() []int64 {
		t.Helper()
		rows, err := b.db.Query(`SELECT hold FROM idem_outbox ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []int64
		for rows.Next() {
			var h int64
			if err := rows.Scan(&h); err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
		return out
	}
	want := func(when string, w ...int64) {
		t.Helper()
		if got := holds(); !slices.Equal(got, w) {
			t.Fatalf("%s: holds %v, want %v", when, got, w)
		}
	}
	later := outboxIntent("pay", "")
	later.DueAt = t0.Add(time.Minute)
	ids := enqueueAll(t, s, outboxIntent("pay", "s"), outboxIntent("pay", "s"), outboxIntent("pay", "s"), later, outboxIntent("legacy", ""))
	want("enqueued", 0, 2, 2, 1, 0)

	if err := s.DisableTarget(ctx, "legacy", "410", t0); err != nil {
		t.Fatal(err)
	}
	want("legacy disabled", 0, 2, 2, 1, 3)
	enqueueAll(t, s, outboxIntent("legacy", ""))
	want("legacy enqueued while disabled", 0, 2, 2, 1, 3, 3)

	got := claimOutbox(t, s, "r", t0, 10, "legacy")
	if !slices.Equal(intentIDs(got), ids[:1]) {
		t.Fatalf("claimed %v, want the stream's head", intentIDs(got))
	}
	if err := s.CompleteIntent(ctx, got[0].Fence(), 200, t0); err != nil {
		t.Fatal(err)
	}
	want("head done: the next released", 0, 0, 2, 1, 3, 3)

	got = claimOutbox(t, s, "r", t0.Add(time.Minute), 10, "legacy")
	want("claimed (in flight, waiting for the lease's end) when the later row came due", 0, 1, 2, 1, 3, 3)
	if !slices.Equal(intentIDs(got), []int64{ids[1], ids[3]}) {
		t.Fatalf("claimed %v, want the stream's second and the later row", intentIDs(got))
	}
	if err := s.RetryIntent(ctx, got[0].Fence(), t0.Add(time.Hour), "503"); err != nil {
		t.Fatal(err)
	}
	if err := s.KillIntent(ctx, got[1].Fence(), "400", t0); err != nil {
		t.Fatal(err)
	}
	want("retried and killed", 0, 1, 2, 0, 3, 3)

	if err := s.EnableTarget(ctx, "legacy"); err != nil {
		t.Fatal(err)
	}
	want("legacy enabled", 0, 1, 2, 0, 1, 1)
	if err := s.RequeueIntent(ctx, ids[3], t0); err != nil {
		t.Fatal(err)
	}
	got = claimOutbox(t, s, "r", t0.Add(time.Minute), 10)
	if !slices.Equal(intentIDs(got), []int64{ids[3], ids[4], ids[4] + 1}) {
		t.Fatalf("claimed %v, want the requeued row and legacy's", intentIDs(got))
	}
	want("claimed", 0, 1, 2, 1, 1, 1)
}

// TestOutboxSweepKeepsIDsAndSequences: sweeping every row of a stream does
// not restart its sequence, and ids are never reused.
func TestOutboxSweepKeepsIDsAndSequences(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ids := enqueueAll(t, s, outboxIntent("pay", "s"), outboxIntent("pay", "s"))
	for range 2 {
		for _, in := range claimOutbox(t, s, "r", t0, 10) {
			if err := s.CompleteIntent(ctx, in.Fence(), 200, t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n, err := s.SweepIntents(ctx, t0.Add(time.Second), 10); err != nil || n != 2 {
		t.Fatalf("SweepIntents = %d, %v; want 2", n, err)
	}
	var n int
	if err := b.db.QueryRow(`SELECT count(*) FROM idem_outbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows left, %v", n, err)
	}
	var id, seq int64
	mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		id, seq, err = s.EnqueueTx(ctx, tx, outboxIntent("pay", "s"))
		return err
	})
	if id <= ids[1] || seq != 3 {
		t.Fatalf("after the sweep: id %d (last was %d), sequence %d (want 3)", id, ids[1], seq)
	}
}

// TestOutboxStoredForm checks the stored columns: NULL stream, headers and
// metadata when absent, microsecond times, and a body byte for byte.
func TestOutboxStoredForm(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	in := outboxIntent("pay", "")
	in.Body = []byte("\x00\xff{\"a\":\"\u00e9\"}\n")
	in.DueAt, in.EnqueuedAt = time.Time{}, time.Time{}
	id := enqueueAll(t, s, in)[0]
	var (
		stream, headers, metadata sql.NullString
		dueAt, enqueuedAt         int64
	)
	err := b.db.QueryRow(`SELECT stream, headers, metadata, due_at, enqueued_at FROM idem_outbox WHERE id = ?`, id).
		Scan(&stream, &headers, &metadata, &dueAt, &enqueuedAt)
	if err != nil || stream.Valid || headers.Valid || metadata.Valid || dueAt != 0 || enqueuedAt != 0 {
		t.Fatalf("stored %v %v %v %d %d, %v; want NULLs and zeros", stream, headers, metadata, dueAt, enqueuedAt, err)
	}
	got := claimOutbox(t, s, "r", t0, 1) // a zero DueAt is due at once
	if len(got) != 1 || !bytes.Equal(got[0].Body, in.Body) || got[0].Headers != nil || !got[0].DueAt.IsZero() ||
		!got[0].LeaseUntil.Equal(t0.Add(time.Minute)) {
		t.Fatalf("claimed %+v", got)
	}
	for _, bad := range []store.Intent{{Method: "POST"}, {Target: "pay"}} {
		err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, _, err := s.EnqueueTx(ctx, tx, bad)
			return err
		})
		if err == nil {
			t.Errorf("EnqueueTx(%+v): no error", bad)
		}
	}
	if _, _, err := s.EnqueueTx(ctx, nil, in); err == nil {
		t.Error("EnqueueTx(nil tx): no error")
	}
	if _, err := s.SweepIntents(ctx, t0, 0); err == nil {
		t.Error("SweepIntents(limit 0): no error")
	}
}

// TestOutboxEnqueueFromOtherHandles: EnqueueTx runs in a transaction of
// any handle on the file, including one whose transactions are deferred
// (they take the write lock at their first write), and the stream's
// sequence is shared by all of them; a rolled-back transaction gives its
// sequence back.
func TestOutboxEnqueueFromOtherHandles(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	other, err := Open(b.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	deferred, err := sql.Open(DriverName, b.path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deferred.Close() })
	var seqs []int64
	for i, h := range []*sql.DB{b.db, other, deferred, other, b.db} {
		tx, err := h.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		// A read first: the deferred transaction takes the write lock only
		// at EnqueueTx's first statement.
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM idem_outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		_, seq, err := s.EnqueueTx(ctx, tx, outboxIntent("pay", "s"))
		if err != nil {
			tx.Rollback()
			t.Fatalf("handle %d: %v", i, err)
		}
		if i == 3 {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if !slices.Equal(seqs, []int64{1, 2, 3, 4}) {
		t.Fatalf("sequences %v, want 1 to 4 (the rolled-back 4 given back)", seqs)
	}
	if got, err := s.ListIntents(ctx, store.IntentPending, 0, 10); err != nil || len(got) != 4 {
		t.Fatalf("ListIntents = %v, %v; want 4 rows", intentIDs(got), err)
	}
}

// TestOutboxClaimRaceAcrossHandles runs relays on two Stores over two
// handles of one file (so that they meet in SQLite's lock, not in a
// Store's writer queue) over plain rows and streams: each row is claimed
// once, and a stream's row only after the previous one completed.
//
// SQLite's lock is not fair across handles: a writer polling in the busy
// handler can lose to the other handle's writers, which hand the lock on
// without a gap, for as long as they keep writing. The relays pause a
// little between rounds, as real ones do, and the busy timeout is long,
// so that a slow run (-race, a loaded machine) does not time out.
func TestOutboxClaimRaceAcrossHandles(t *testing.T) {
	t.Parallel()
	cfg := &OpenConfig{BusyTimeout: time.Minute}
	db1, path := openMigrated(t, cfg)
	s1, err := New(db1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s1.Close() })
	db2, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db2.Close() })
	s2, err := New(db2, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })

	const plain, streams, perStream = 120, 8, 10
	var ins []store.Intent
	for i := range plain + streams*perStream {
		stream := ""
		if i%2 == 1 && i/2 < streams*perStream {
			stream = fmt.Sprint("s", (i/2)%streams)
		}
		ins = append(ins, outboxIntent("pay", stream))
	}
	enqueueAll(t, s1, ins...)
	total := len(ins)

	var (
		mu        sync.Mutex
		claimed   = map[int64]string{}
		completed = map[string]int64{} // stream -> last sequence completed
		inFlight  = map[string]int64{} // stream -> sequence in flight
		done      int
		problems  []string
		wg        sync.WaitGroup
		deadline  = time.Now().Add(time.Minute)
	)
	for r := range 8 {
		s := []*Store{s1, s2}[r%2]
		wg.Go(func() {
			for n := 0; ; n++ {
				mu.Lock()
				finished := done == total || len(problems) > 0
				mu.Unlock()
				if finished || time.Now().After(deadline) {
					return
				}
				owner := fmt.Sprintf("relay-%d-%d", r, n)
				got, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: owner, Now: t0, Lease: time.Hour, Limit: 3})
				mu.Lock()
				if err != nil {
					problems = append(problems, err.Error())
				}
				for _, in := range got {
					if prev, ok := claimed[in.ID]; ok {
						problems = append(problems, fmt.Sprintf("%d claimed by %s and %s", in.ID, prev, owner))
					}
					claimed[in.ID] = owner
					if in.Stream == "" {
						continue
					}
					if in.Sequence != completed[in.Stream]+1 || inFlight[in.Stream] != 0 {
						problems = append(problems, fmt.Sprintf("%s #%d claimed after #%d completed, #%d in flight",
							in.Stream, in.Sequence, completed[in.Stream], inFlight[in.Stream]))
					}
					inFlight[in.Stream] = in.Sequence
				}
				mu.Unlock()
				for _, in := range got {
					// Recorded before the completion commits: a claim of
					// the stream's next row can only follow the commit.
					mu.Lock()
					if in.Stream != "" {
						completed[in.Stream], inFlight[in.Stream] = in.Sequence, 0
					}
					done++
					mu.Unlock()
					if err := s.CompleteIntent(ctx, in.Fence(), 200, t0); err != nil {
						mu.Lock()
						problems = append(problems, err.Error())
						mu.Unlock()
					}
				}
				time.Sleep(rand.N(time.Millisecond))
			}
		})
	}
	wg.Wait()
	if len(problems) > 0 {
		t.Fatalf("%d problems, first: %s", len(problems), problems[0])
	}
	if done != total {
		t.Fatalf("%d of %d rows completed before the deadline", done, total)
	}
}

// TestOutboxModel drives this store and memstore's Outbox, the reference
// model, with the same random operations (enqueue, some rolled back;
// claims with skips at a moving clock; completions, retries and kills with
// live, stale and forged fences; requeues; sweeps; listings; disabling
// targets) and compares every answer and, after every step, every row.
func TestOutboxModel(t *testing.T) {
	t.Parallel()
	db, _ := openMigrated(t, &OpenConfig{Synchronous: SynchronousNormal, AllowWeakDurability: true})
	// The store's clock, which decides whether EnqueueTx holds a row as
	// not due yet, is the model's clock off by a random skew.
	var storeNow time.Time
	s, err := New(db, &Config{AllowWeakDurability: true, Now: func() time.Time { return storeNow }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	targets := []string{"a", "b", "c"}
	streams := []string{"", "", "s1", "s2"}
	errBoom := errors.New("boom")

	rapid.Check(t, func(rt *rapid.T) {
		for _, q := range []string{`DELETE FROM idem_outbox`, `DELETE FROM idem_outbox_streams`, `DELETE FROM idem_outbox_targets`,
			`DELETE FROM sqlite_sequence WHERE name = 'idem_outbox'`} {
			if _, err := db.Exec(q); err != nil {
				rt.Fatal(err)
			}
		}
		m := memstore.NewOutbox(memstore.NewInbox())
		now := t0
		var (
			fences  []store.IntentFence
			lastID  int64
			claimNo int
		)
		sameErr := func(op string, got, want error) {
			if (got == nil) != (want == nil) || errors.Is(got, store.ErrFenced) != errors.Is(want, store.ErrFenced) ||
				errors.Is(got, store.ErrNotFound) != errors.Is(want, store.ErrNotFound) {
				rt.Fatalf("%s: sqlite %v, model %v", op, got, want)
			}
		}
		sameIntents := func(op string, got, want []store.Intent) {
			if len(got) != len(want) {
				rt.Fatalf("%s: sqlite %v, model %v", op, intentIDs(got), intentIDs(want))
			}
			for i := range got {
				if d := diffIntent(got[i], want[i]); d != "" {
					rt.Fatalf("%s: row %d differs: %s", op, got[i].ID, d)
				}
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"enqueue": func(rt *rapid.T) {
				var ins []store.Intent
				for range rapid.IntRange(1, 3).Draw(rt, "n") {
					in := store.Intent{
						Target: rapid.SampledFrom(targets).Draw(rt, "target"),
						Stream: rapid.SampledFrom(streams).Draw(rt, "stream"),
						Method: "POST", Path: "/p", Body: []byte(`{"n":1}`),
						DueAt:      now.Add(rapid.SampledFrom([]time.Duration{0, -time.Second, 3 * time.Second}).Draw(rt, "due")),
						EnqueuedAt: now,
					}
					if rapid.Bool().Draw(rt, "headers") {
						in.Headers, in.Metadata = map[string]string{"Content-Type": "application/json"}, map[string]string{"tenant": "t"}
					}
					ins = append(ins, in)
				}
				rollback := rapid.IntRange(0, 4).Draw(rt, "rollback") == 0
				storeNow = now.Add(rapid.SampledFrom([]time.Duration{-2 * time.Second, 0, 2 * time.Second}).Draw(rt, "store skew"))
				var got, want [][2]int64
				gotErr := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					for _, in := range ins {
						id, seq, err := s.EnqueueTx(ctx, tx, in)
						if err != nil {
							return err
						}
						got = append(got, [2]int64{id, seq})
					}
					if rollback {
						return errBoom
					}
					return nil
				})
				wantErr := m.InTx(ctx, func(ctx context.Context, tx *memstore.Tx) error {
					for _, in := range ins {
						id, seq, err := m.EnqueueTx(ctx, tx, in)
						if err != nil {
							return err
						}
						want = append(want, [2]int64{id, seq})
					}
					if rollback {
						return errBoom
					}
					return nil
				})
				sameErr("enqueue", gotErr, wantErr)
				if !slices.Equal(got, want) {
					rt.Fatalf("enqueue: sqlite (id, seq) %v, model %v", got, want)
				}
				if !rollback {
					lastID = want[len(want)-1][0]
				}
			},
			"claim": func(rt *rapid.T) {
				claimNo++
				c := store.OutboxClaim{
					Owner: fmt.Sprint("r", claimNo),
					Now:   now,
					Lease: rapid.SampledFrom([]time.Duration{5 * time.Second, 20 * time.Second}).Draw(rt, "lease"),
					Limit: rapid.IntRange(1, 4).Draw(rt, "limit"),
				}
				for _, tg := range targets {
					if rapid.IntRange(0, 4).Draw(rt, "skip "+tg) == 0 {
						c.Skip = append(c.Skip, tg)
					}
				}
				got, gotErr := s.ClaimIntents(ctx, c)
				want, wantErr := m.ClaimIntents(ctx, c)
				sameErr("claim", gotErr, wantErr)
				sameIntents(fmt.Sprintf("claim %+v", c), got, want)
				for _, in := range want {
					fences = append(fences, in.Fence())
				}
			},
			"finish": func(rt *rapid.T) {
				if len(fences) == 0 {
					rt.Skip("nothing claimed yet")
				}
				f := rapid.SampledFrom(fences).Draw(rt, "fence")
				switch rapid.IntRange(0, 5).Draw(rt, "forge") {
				case 0:
					f.Epoch++
				case 1:
					f.Owner += "x"
				}
				var gotErr, wantErr error
				switch op := rapid.SampledFrom([]string{"complete", "retry", "kill"}).Draw(rt, "op"); op {
				case "complete":
					status := rapid.SampledFrom([]int{200, 201, 409}).Draw(rt, "status")
					gotErr, wantErr = s.CompleteIntent(ctx, f, status, now), m.CompleteIntent(ctx, f, status, now)
				case "retry":
					due := now.Add(rapid.SampledFrom([]time.Duration{0, 2 * time.Second, 5 * time.Second}).Draw(rt, "backoff"))
					gotErr, wantErr = s.RetryIntent(ctx, f, due, "503"), m.RetryIntent(ctx, f, due, "503")
				case "kill":
					gotErr, wantErr = s.KillIntent(ctx, f, "out of budget", now), m.KillIntent(ctx, f, "out of budget", now)
				}
				sameErr(fmt.Sprintf("finish %+v", f), gotErr, wantErr)
			},
			"requeue": func(rt *rapid.T) {
				id := rapid.Int64Range(1, lastID+1).Draw(rt, "id")
				sameErr(fmt.Sprint("requeue ", id), s.RequeueIntent(ctx, id, now), m.RequeueIntent(ctx, id, now))
			},
			"sweep": func(rt *rapid.T) {
				// A limit above the rows: which rows a limited sweep takes
				// is left open (this store: the oldest done first; the
				// model: by id).
				before := now.Add(rapid.SampledFrom([]time.Duration{-3 * time.Second, 0, time.Second}).Draw(rt, "before"))
				got, gotErr := s.SweepIntents(ctx, before, 1000)
				want, wantErr := m.SweepIntents(ctx, before, 1000)
				sameErr("sweep", gotErr, wantErr)
				if got != want {
					rt.Fatalf("sweep: sqlite %d, model %d", got, want)
				}
			},
			"list": func(rt *rapid.T) {
				state := store.IntentState(rapid.IntRange(1, 4).Draw(rt, "state"))
				after := rapid.Int64Range(0, lastID).Draw(rt, "after")
				limit := rapid.IntRange(1, 4).Draw(rt, "limit")
				got, gotErr := s.ListIntents(ctx, state, after, limit)
				want, wantErr := m.ListIntents(ctx, state, after, limit)
				sameErr("list", gotErr, wantErr)
				sameIntents(fmt.Sprintf("list %v after %d", state, after), got, want)
			},
			"targets": func(rt *rapid.T) {
				tg := rapid.SampledFrom(targets).Draw(rt, "target")
				if rapid.Bool().Draw(rt, "disable") {
					sameErr("disable", s.DisableTarget(ctx, tg, "410", now), m.DisableTarget(ctx, tg, "410", now))
				} else {
					sameErr("enable", s.EnableTarget(ctx, tg), m.EnableTarget(ctx, tg))
				}
				got, gotErr := s.DisabledTargets(ctx)
				want, wantErr := m.DisabledTargets(ctx)
				sameErr("disabled targets", gotErr, wantErr)
				if !slices.Equal(got, want) {
					rt.Fatalf("disabled targets: sqlite %v, model %v", got, want)
				}
			},
			"tick": func(rt *rapid.T) {
				now = now.Add(rapid.SampledFrom([]time.Duration{time.Second, 4 * time.Second, 11 * time.Second}).Draw(rt, "tick"))
			},
			"": func(rt *rapid.T) {
				// One row after every step (the claims and listings
				// compare many), every row at the end.
				id := rapid.Int64Range(1, lastID+1).Draw(rt, "get")
				got, gotErr := s.GetIntent(ctx, id)
				want, wantErr := m.GetIntent(ctx, id)
				sameErr(fmt.Sprint("get ", id), gotErr, wantErr)
				if d := diffIntent(got, want); d != "" {
					rt.Fatalf("row %d differs: %s", id, d)
				}
			},
		})
		// Every row, state by state (a swept row is in neither).
		for state := store.IntentPending; state <= store.IntentDead; state++ {
			got, gotErr := s.ListIntents(ctx, state, 0, 1<<20)
			want, wantErr := m.ListIntents(ctx, state, 0, 1<<20)
			sameErr("list all", gotErr, wantErr)
			sameIntents(fmt.Sprint("rows ", state), got, want)
		}
	})
}

// diffIntent describes how got differs from want, "" when it does not.
// Times compare as instants, bodies and maps by content (nil equals
// empty).
func diffIntent(got, want store.Intent) string {
	var d []string
	eq := func(name string, ok bool, g, w any) {
		if !ok {
			d = append(d, fmt.Sprintf("%s: %v, want %v", name, g, w))
		}
	}
	eq("ID", got.ID == want.ID, got.ID, want.ID)
	eq("Target", got.Target == want.Target, got.Target, want.Target)
	eq("Method", got.Method == want.Method, got.Method, want.Method)
	eq("Path", got.Path == want.Path, got.Path, want.Path)
	eq("Body", bytes.Equal(got.Body, want.Body), got.Body, want.Body)
	eq("Headers", maps.Equal(got.Headers, want.Headers), got.Headers, want.Headers)
	eq("Metadata", maps.Equal(got.Metadata, want.Metadata), got.Metadata, want.Metadata)
	eq("Stream", got.Stream == want.Stream, got.Stream, want.Stream)
	eq("Sequence", got.Sequence == want.Sequence, got.Sequence, want.Sequence)
	eq("State", got.State == want.State, got.State, want.State)
	eq("Attempts", got.Attempts == want.Attempts, got.Attempts, want.Attempts)
	eq("DueAt", got.DueAt.Equal(want.DueAt), got.DueAt, want.DueAt)
	eq("Epoch", got.Epoch == want.Epoch, got.Epoch, want.Epoch)
	eq("Owner", got.Owner == want.Owner, got.Owner, want.Owner)
	eq("LeaseUntil", got.LeaseUntil.Equal(want.LeaseUntil), got.LeaseUntil, want.LeaseUntil)
	eq("LastError", got.LastError == want.LastError, got.LastError, want.LastError)
	eq("Status", got.Status == want.Status, got.Status, want.Status)
	eq("EnqueuedAt", got.EnqueuedAt.Equal(want.EnqueuedAt), got.EnqueuedAt, want.EnqueuedAt)
	eq("DoneAt", got.DoneAt.Equal(want.DoneAt), got.DoneAt, want.DoneAt)
	return strings.Join(d, "; ")
}

// enqueueMany enqueues n intents made by mk, in transactions of 10,000.
func enqueueMany(t *testing.T, s *Store, n int, mk func(i int) store.Intent) {
	t.Helper()
	const batch = 10_000
	for i := 0; i < n; i += batch {
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			for j := i; j < min(i+batch, n); j++ {
				if _, _, err := s.EnqueueTx(ctx, tx, mk(j)); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// TestOutboxMeasure reports figures, asserting nothing: 1,000,000 intents
// enqueued through EnqueueTx in transactions of 10,000, the time of a
// claim of 32 at the front of the backlog, the drain rate of one relay
// claiming 32 and completing each, the sizes of the table and its
// indexes, and, each on a fresh file, a claim of 32 behind 100,000 rows it
// may not take: in backoff, behind their streams' heads, of a disabled
// target. Set IDEM_OUTBOX_MEASURE=1 to run it (about a minute and a half),
// and IDEM_OUTBOX_MEASURE_N to change the number of intents.
func TestOutboxMeasure(t *testing.T) {
	const measureFront = 100_000
	if os.Getenv("IDEM_OUTBOX_MEASURE") == "" {
		t.Skip("set IDEM_OUTBOX_MEASURE=1 to measure")
	}
	n := 1_000_000
	if v := os.Getenv("IDEM_OUTBOX_MEASURE_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	s, b := setup(t)
	in := store.Intent{Target: "pay", Method: "POST", Path: "/v1/charges",
		Body:     []byte(`{"order":{"id":"o-123456","amount":1000,"currency":"eur"},"customer":"c-42"}`),
		Headers:  map[string]string{"Content-Type": "application/json"},
		Metadata: map[string]string{"tenant": "acme"},
		DueAt:    t0, EnqueuedAt: t0}

	const batch = 10_000
	start := time.Now()
	for i := 0; i < n; i += batch {
		mustTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			for range min(batch, n-i) {
				if _, _, err := s.EnqueueTx(ctx, tx, in); err != nil {
					return err
				}
			}
			return nil
		})
	}
	el := time.Since(start)
	t.Logf("enqueue: %d intents in %v (%.0f/s, %v per tx of %d)", n, el.Round(time.Millisecond), float64(n)/el.Seconds(),
		(el / time.Duration((n+batch-1)/batch)).Round(time.Microsecond), batch)
	if _, err := b.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	var pages, pageSize int64
	b.db.QueryRow(`PRAGMA page_count`).Scan(&pages)
	b.db.QueryRow(`PRAGMA page_size`).Scan(&pageSize)
	t.Logf("file: %.1f MB, %.0f bytes per intent (body %d bytes, headers and metadata 50)",
		float64(pages*pageSize)/1e6, float64(pages*pageSize)/float64(n), len(in.Body))
	rows, err := b.db.Query(`SELECT name, sum(pgsize) FROM dbstat WHERE name LIKE 'idem_outbox%' GROUP BY name ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var size int64
		rows.Scan(&name, &size)
		t.Logf("  %s: %.1f MB, %.1f bytes per intent", name, float64(size)/1e6, float64(size)/float64(n))
	}
	rows.Close()

	// Claims of 32 at the front of the backlog.
	var claims []time.Duration
	now := t0
	for i := range 20 {
		st := time.Now()
		got := claimOutbox(t, s, fmt.Sprint("m", i), now, 32)
		claims = append(claims, time.Since(st))
		if len(got) != 32 {
			t.Fatalf("claimed %d", len(got))
		}
	}
	slices.Sort(claims)
	t.Logf("claim of 32 with %d pending: first-ish median %v, min %v, max %v", n, claims[len(claims)/2], claims[0], claims[len(claims)-1])

	// Drain: claim 32, complete each, for 20 s. The 640 rows claimed above
	// are in flight with live leases: every claim passes over them.
	dur := 20 * time.Second
	start = time.Now()
	drained, rounds := 0, 0
	var claimTime time.Duration
	for time.Since(start) < dur {
		cs := time.Now()
		got := claimOutbox(t, s, fmt.Sprint("d", rounds), now, 32)
		claimTime += time.Since(cs)
		rounds++
		if len(got) == 0 {
			break
		}
		for _, in := range got {
			if err := s.CompleteIntent(ctx, in.Fence(), 200, now); err != nil {
				t.Fatal(err)
			}
		}
		drained += len(got)
	}
	el = time.Since(start)
	t.Logf("drain (one relay, claim 32 + 32 completions, each its own commit): %d intents in %v, %.0f/s; mean claim %v",
		drained, el.Round(time.Millisecond), float64(drained)/el.Seconds(), (claimTime / time.Duration(rounds)).Round(time.Microsecond))

	// Rows a claim may not take, in front of rows it may.
	for _, sc := range []struct {
		name  string
		setup func(t *testing.T, s *Store, b *bundle) []string // returns Skip
	}{
		{"in backoff (due in an hour)", func(t *testing.T, s *Store, b *bundle) []string {
			// As RetryIntent leaves them (one UPDATE instead of 100,000
			// claims and retries).
			enqueueMany(t, s, measureFront, func(int) store.Intent { return in })
			if _, err := b.db.Exec(`UPDATE idem_outbox SET hold = 1, due_at = ?, attempts = 1, epoch = 1`, t0.Add(time.Hour).UnixMicro()); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{"behind their streams' heads (1,000 streams, heads in flight)", func(t *testing.T, s *Store, b *bundle) []string {
			enqueueMany(t, s, measureFront, func(i int) store.Intent {
				x := in
				x.Stream = fmt.Sprint("order-", i%1000)
				return x
			})
			if got := claimOutbox(t, s, "heads", t0, 1000); len(got) != 1000 {
				t.Fatalf("claimed %d heads", len(got))
			}
			return nil
		}},
		{"of a disabled target", func(t *testing.T, s *Store, b *bundle) []string {
			enqueueMany(t, s, measureFront, func(int) store.Intent {
				x := in
				x.Target = "legacy"
				return x
			})
			st := time.Now()
			if err := s.DisableTarget(ctx, "legacy", "410", t0); err != nil {
				t.Fatal(err)
			}
			t.Logf("  DisableTarget over %d pending rows: %v", measureFront, time.Since(st).Round(time.Millisecond))
			return []string{"legacy"}
		}},
	} {
		s, b := setup(t)
		skip := sc.setup(t, s, b)
		enqueueMany(t, s, 1000, func(int) store.Intent { return in })
		claims = claims[:0]
		for i := range 10 {
			st := time.Now()
			got := claimOutbox(t, s, fmt.Sprint("b", i), t0, 32, skip...)
			claims = append(claims, time.Since(st))
			if len(got) != 32 || got[0].ID <= measureFront {
				t.Fatalf("claimed %v", intentIDs(got))
			}
		}
		slices.Sort(claims)
		t.Logf("claim of 32 behind %d rows %s: median %v, max %v", measureFront, sc.name, claims[len(claims)/2], claims[len(claims)-1])
	}

}
