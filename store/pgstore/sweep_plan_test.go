package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store/pgstore"
)

// TestSweepWalksTheIndex: the sweep's plan reads the expires_at index,
// never the whole table, also when no record is due: records written in
// random order of expiry (as keys are), analyzed, none due.
func TestSweepWalksTheIndex(t *testing.T) {
	pool := migratedPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO idem_keys (epoch, expires_at, lease_until, state, unknown, key, fingerprint, owner, response)
		SELECT 1, now() + interval '1 day' + random() * interval '1 day', NULL, 2, false,
		       sha256(int8send(i)), '\x01', '\x02', '\x03'
		FROM generate_series(1, 20000) AS i;
		ANALYZE idem_keys`); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "EXPLAIN "+pgstore.SweepSQL, 1000, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if strings.Contains(text, "Seq Scan on idem_keys") || !strings.Contains(text, "idem_keys_expires") {
		t.Fatalf("the sweep's plan does not walk the expires_at index:\n%s", text)
	}
}
