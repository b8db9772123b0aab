package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/idemhq/idem/keytemplate"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// An order's charge, enqueued in the order's own transaction on the
// embedded SQLite store and delivered by the relay with the key its
// template computed. The payment provider charges on the first attempt but
// its answer is lost; the intent is requeued by the operator and sent again
// with the same key, so the provider charges once.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idem-outbox-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "shop.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER)`); err != nil {
		log.Fatal(err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// The payment provider dedups on Idempotency-Key. The answer to its
	// first call is lost: it charged, and the relay cannot know.
	var (
		mu      sync.Mutex
		calls   int
		charges = map[string]string{} // key → charge
	)
	pay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		key := r.Header.Get("Idempotency-Key")
		fmt.Printf("call %d: %s %s Idempotency-Key: %s → ", calls, r.Method, r.URL.Path, key)
		if ch, ok := charges[key]; ok {
			fmt.Println("already charged:", ch)
			w.WriteHeader(http.StatusCreated)
			return
		}
		charges[key] = fmt.Sprintf("ch_%d", len(charges)+1)
		fmt.Println("charged", charges[key], "(the answer is lost)")
		panic(http.ErrAbortHandler) // the connection drops before the answer
	}))
	defer pay.Close()

	charge, err := keytemplate.Parse("charge", "= 'charge-' & payload.order.id", nil) // as a config file writes it
	if err != nil {
		log.Fatal(err)
	}
	r, err := outbox.New(st, &outbox.Config{
		Targets: []outbox.Target{
			{Name: "payments", URL: pay.URL, Key: charge.KeyOf, Conflict: outbox.ConflictRetry},
		},
		MaxAttempts: 1, // dead after one attempt, for the operator to requeue (default: 25, with backoff)
	})
	if err != nil {
		log.Fatal(err)
	}

	order := []byte(`{"order":{"id":"o-42","cents":1000}}`)
	err = st.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The business change:
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o-42', 1000)`); err != nil {
			return err
		}
		_, err := r.EnqueueTx(ctx, tx, outbox.Intent{Target: "payments", Method: "POST", Path: "/charges", Body: order})
		return err // the intent exists if and only if this commits
	})
	if err != nil {
		log.Fatal(err)
	}
	// Another order's transaction fails after its intent was enqueued: the
	// intent is rolled back with it, and nothing is ever sent.
	err = st.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o-43', 500)`); err != nil {
			return err
		}
		if _, err := r.EnqueueTx(ctx, tx, outbox.Intent{Target: "payments", Method: "POST", Path: "/charges",
			Body: []byte(`{"order":{"id":"o-43","cents":500}}`)}); err != nil {
			return err
		}
		return errors.New("out of stock")
	})
	fmt.Println("o-43:", err)

	show := func() { // as `idem outbox list` does
		for _, state := range []store.IntentState{store.IntentPending, store.IntentDone, store.IntentDead} {
			ins, err := st.ListIntents(ctx, state, 0, 10)
			if err != nil {
				log.Fatal(err)
			}
			for _, in := range ins {
				fmt.Printf("intent %d %s: %s, attempts %d\n", in.ID, in.Headers["Idempotency-Key"], in.State, in.Attempts)
			}
		}
	}

	if err := r.Drain(ctx); err != nil { // delivers what is due and returns; a service runs go r.Run(ctx)
		log.Fatal(err)
	}
	show()

	// The operator requeues the dead intent (`idem outbox requeue`); it
	// carries the key it was enqueued with.
	dead, err := st.ListIntents(ctx, store.IntentDead, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range dead {
		if err := st.RequeueIntent(ctx, in.ID, time.Now()); err != nil {
			log.Fatal(err)
		}
	}
	if err := r.Drain(ctx); err != nil {
		log.Fatal(err)
	}
	show()
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("charges:", len(charges))
	// Output:
	// o-43: out of stock
	// call 1: POST /charges Idempotency-Key: charge-o-42 → charged ch_1 (the answer is lost)
	// intent 1 charge-o-42: dead, attempts 1
	// call 2: POST /charges Idempotency-Key: charge-o-42 → already charged: ch_1
	// intent 1 charge-o-42: done, attempts 1
	// charges: 1
}
