package sqlitestore

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

func TestSweep(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	// 10 completed records expiring at t0+1m, one claim whose lease outlives
	// its retention (extended), one live record.
	for i := range 10 {
		c := mustClaim(t, s, claimParams(fmt.Sprint("done", i), "fp", "o"))
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(c.Record), Retention: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	p := claimParams("leased", "fp", "o")
	p.Retention = time.Minute
	held := mustClaim(t, s, p)
	mustClaim(t, s, claimParams("live", "fp", "o"))

	b.clock.Advance(time.Minute)
	if _, err := s.Extend(ctx, fenceOf(held.Record), time.Hour); err != nil {
		t.Fatal(err)
	}
	// Extend raised the leased record's expiry; put it back in the past
	// by hand to check that Sweep still spares a live lease.
	if _, err := b.db.Exec(`UPDATE idem_keys SET expires_at = ? WHERE key = ?`, t0.UnixMicro(), []byte("leased")); err != nil {
		t.Fatal(err)
	}

	if n, err := s.Sweep(ctx, 4); err != nil || n != 4 {
		t.Fatalf("Sweep(4) = %d, %v; want 4", n, err)
	}
	if n, err := s.Sweep(ctx, 100); err != nil || n != 6 {
		t.Fatalf("Sweep(100) = %d, %v; want the 6 left", n, err)
	}
	if n, err := s.Sweep(ctx, 100); err != nil || n != 0 {
		t.Fatalf("third Sweep = %d, %v; want 0", n, err)
	}
	var left int
	if err := b.db.QueryRow(`SELECT count(*) FROM idem_keys`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d rows left (%v), want the leased and the live one", left, err)
	}
	b.clock.Advance(time.Hour)
	if n, err := s.Sweep(ctx, 100); err != nil || n != 2 {
		t.Fatalf("Sweep after the lease = %d, %v; want 2", n, err)
	}
	if n, err := s.Sweep(ctx, 0); err != nil || n != 0 {
		t.Fatalf("Sweep(0) = %d, %v", n, err)
	}
}

// TestSweepUsesIndex checks that Sweep's subquery walks the expires_at index
// instead of scanning the table.
func TestSweepUsesIndex(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	plan := queryPlan(t, b.db, sweepSQL, sql.Named("now", int64(0)), sql.Named("limit", int64(1)))
	if !strings.Contains(plan, "USING INDEX idem_keys_expires_at (expires_at<?)") || strings.Contains(plan, "SCAN idem_keys\n") {
		t.Fatalf("sweep plan does not use the expiry index:\n%s", plan)
	}
}

// queryPlan returns the details of EXPLAIN QUERY PLAN for query, one per
// line.
func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(detail + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}
