package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/sqlitestore"
)

// A charge protected by an idempotency key on the embedded SQLite store:
// the ledger row and the stored response commit in one transaction, and the
// retry replays the first response without charging again.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE charges (order_id TEXT PRIMARY KEY, cents INTEGER)`); err != nil {
		log.Fatal(err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := key.NewTx(st, nil) // 30 s lease, 24 h retention
	if err != nil {
		log.Fatal(err)
	}

	body := []byte(`{"order":"o-42","cents":1000}`)
	req := key.Request{
		Scope:       key.Scope{Principal: "shop-frontend", Operation: "POST /charges", Key: "charge-o-42"},
		Fingerprint: key.FingerprintOf([]byte("POST"), []byte("/charges"), body),
	}
	charge := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO charges VALUES ('o-42', 1000)`); err != nil {
			return nil, err
		}
		return []byte(`{"charge":"ch_o-42","status":"succeeded"}`), nil
	}

	for attempt := 1; attempt <= 3; attempt++ {
		res, err := guard.DoTx(ctx, req, charge)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("attempt %d: %v %s\n", attempt, res.Outcome, res.Response)
	}

	req.Fingerprint = key.FingerprintOf([]byte("POST"), []byte("/charges"), []byte(`{"order":"o-42","cents":9999}`))
	_, err = guard.DoTx(ctx, req, charge)
	fmt.Println("other body:", err)

	var n int
	_ = db.QueryRow(`SELECT count(*) FROM charges`).Scan(&n)
	fmt.Println("ledger rows:", n)
	// Output:
	// attempt 1: Executed {"charge":"ch_o-42","status":"succeeded"}
	// attempt 2: Replayed {"charge":"ch_o-42","status":"succeeded"}
	// attempt 3: Replayed {"charge":"ch_o-42","status":"succeeded"}
	// other body: key: key reused with a different request
	// ledger rows: 1
}
