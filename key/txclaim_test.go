package key_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// claimRecorder is a transactional store that records whether each claim
// was asked as transactional.
type claimRecorder struct {
	store.TxStore[*sql.Tx]
	mu            sync.Mutex
	transactional []bool
}

func (r *claimRecorder) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	r.mu.Lock()
	r.transactional = append(r.transactional, p.Transactional)
	r.mu.Unlock()
	return r.TxStore.Claim(ctx, p)
}

// TestTxClaimsAreTransactional: DoTx and ClaimTx ask the store for a
// transactional claim, whose own sync the store may skip because the
// completion's commit makes it durable; Do, whose operation may have
// effects outside the store, never does.
func TestTxClaimsAreTransactional(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "idem.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &claimRecorder{TxStore: s}
	request := func(k string) key.Request {
		return key.Request{Scope: key.Scope{Principal: "alice", Operation: "charge", Key: k}, Fingerprint: key.FingerprintOf([]byte("body"))}
	}
	g, err := key.NewTx[*sql.Tx](rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.DoTx(ctx, request("tx"), func(context.Context, *sql.Tx) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, request("plain"), func(context.Context) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	cl, _, err := g.ClaimTx(ctx, request("claim-tx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, true}
	if len(rec.transactional) != len(want) {
		t.Fatalf("claims %v, want %v", rec.transactional, want)
	}
	for i := range want {
		if rec.transactional[i] != want[i] {
			t.Fatalf("claims asked as transactional: %v, want %v (DoTx, Do, ClaimTx)", rec.transactional, want)
		}
	}
}
