package sqlitestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// Opening the store: Open sets WAL and synchronous=FULL on every pooled
// connection, Migrate creates the tables, New checks both and refuses
// anything weaker.
func ExampleNew() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sqlitestore-example")
	defer os.RemoveAll(dir)

	db, err := sqlitestore.Open(filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	fmt.Printf("%+v\n", st.Capabilities())

	p := store.ClaimParams{Key: "k1", Fingerprint: []byte("fp"), Owner: "worker-1", Lease: 30 * time.Second, Retention: 24 * time.Hour}
	first, _ := st.Claim(ctx, p)
	fence := store.Fence{Key: p.Key, Epoch: first.Record.Epoch, Owner: p.Owner}
	_ = st.Complete(ctx, store.CompleteParams{Fence: fence, Response: []byte("paid"), Retention: 24 * time.Hour})

	p.Owner = "worker-2"
	again, _ := st.Claim(ctx, p)
	fmt.Println(first.Claimed, again.Claimed, again.Record.State, string(again.Record.Response))
	// Output:
	// {Durable:true Transactions:true Shared:true SelfExpiring:false}
	// true false DONE paid
}
