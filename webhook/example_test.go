package webhook_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/webhook"
)

// An order service receiving the shop's signed CloudEvents on the embedded
// SQLite store. Each event's change to the orders table commits with its
// inbox row: a redelivery is answered duplicate and changes nothing, and
// sequence 3, arriving before 2, is parked until 2 comes, then both apply
// in order in one transaction.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "idem-webhook-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "orders.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT, paid INTEGER)`); err != nil {
		log.Fatal(err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// apply writes one event's change in the inbox's transaction.
	apply := func(ctx context.Context, tx *sql.Tx, ev event.Event) error {
		var c struct {
			Status string `json:"status"`
			Add    int64  `json:"add"`
		}
		if err := json.Unmarshal(ev.Data, &c); err != nil {
			return inbox.Invalid(err) // dead-lettered: no retry fixes it
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET status = excluded.status, paid = paid + excluded.paid`,
			ev.Subject, c.Status, c.Add)
		return err
	}
	// refetch would bring the facts of a gap older than GapDeadline in from
	// the shop; here no gap gets that old.
	refetch := func(ctx context.Context, tx *sql.Tx, stream store.StreamKey, gap order.Gap) error {
		return fmt.Errorf("refetch %s %d..%d: not in this example", stream.Subject, gap.From, gap.To)
	}
	const secret = "shop-signing-secret-2030" // shared with the shop
	verifier, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}

	p, err := inbox.New(st, apply, &inbox.Config{Mode: order.ModeDelta}) // st: sqlitestore or pgstore
	if err != nil {
		log.Fatal(err)
	}
	h, err := webhook.New(p, &webhook.Config{
		Verifier: verifier,
		Event:    &event.Config{Owner: event.SourcePrefixes("https://shop.example/orders")},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /events", h)
	mux.Handle("/admin/inbox/", http.StripPrefix("/admin/inbox", webhook.Admin(p, nil))) // private address
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.RunCompensator(ctx, refetch) }) // delta gaps past their deadline
	wg.Go(func() { _ = p.RunSweeper(ctx) })              // inbox rows past retention
	defer wg.Wait()
	defer cancel()

	// The shop's side: a CloudEvent in binary mode, signed over its body.
	signer, err := signature.NewSigner(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		log.Fatal(err)
	}
	deliver := func(seq int64, data string, tamper bool) {
		hdr, body, err := event.ToHTTP(event.Event{
			ID: fmt.Sprintf("o-42/%d", seq), Source: "https://shop.example/orders", Type: "shop.order.changed",
			Subject: "o-42", Sequence: seq, DataContentType: "application/json", Data: []byte(data),
		}, event.ModeBinary)
		if err != nil {
			log.Fatal(err)
		}
		sig, err := signer.Sign(body, nil)
		if err != nil {
			log.Fatal(err)
		}
		if tamper {
			body = bytes.Replace(body, []byte("100"), []byte("1"), 1)
		}
		r := httptest.NewRequest("POST", "/events", bytes.NewReader(body))
		maps.Copy(r.Header, hdr)
		maps.Copy(r.Header, sig)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)

		if w.Code != http.StatusOK { // application/problem+json
			var problem struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &problem)
			fmt.Printf("sequence %d %-30s %d %s\n", seq, data, w.Code, path.Base(problem.Type))
			return
		}
		var res webhook.Response
		_ = json.Unmarshal(w.Body.Bytes(), &res)
		fmt.Printf("sequence %d %-30s %d %s", seq, data, w.Code, res.Outcome)
		if res.Applied != nil {
			fmt.Printf(" applied %v", res.Applied)
		}
		if res.Gap != nil {
			fmt.Printf(" gap %d..%d", res.Gap.From, res.Gap.To)
		}
		fmt.Println()
	}

	deliver(1, `{"status":"CREATED"}`, false)
	deliver(1, `{"status":"CREATED"}`, false)       // redelivered
	deliver(3, `{"status":"SHIPPED"}`, false)       // overtakes 2
	deliver(2, `{"status":"PAID","add":100}`, true) // body changed after signing
	deliver(2, `{"status":"PAID","add":100}`, false)

	var status string
	var paid int64
	if err := db.QueryRow(`SELECT status, paid FROM orders WHERE id = 'o-42'`).Scan(&status, &paid); err != nil {
		log.Fatal(err)
	}
	fmt.Println("o-42:", status, paid)
	// Output:
	// sequence 1 {"status":"CREATED"}           200 processed applied [1]
	// sequence 1 {"status":"CREATED"}           200 duplicate
	// sequence 3 {"status":"SHIPPED"}           200 parked gap 2..2
	// sequence 2 {"status":"PAID","add":100}    401 signature-invalid
	// sequence 2 {"status":"PAID","add":100}    200 processed applied [2 3]
	// o-42: SHIPPED 100
}
