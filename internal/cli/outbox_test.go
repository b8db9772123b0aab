package cli

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"database/sql"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/store/sqlitestore"
)

// TestOutboxCommands: an intent dies at a target answering 400, another
// target answers 410; `idem outbox` lists the dead one, requeues it, lists
// and re-enables the disabled target.
func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	db, err := sqlitestore.Open(path, nil)
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
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(400) }))
	t.Cleanup(bad.Close)
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(410) }))
	t.Cleanup(gone.Close)
	key := func(in any) (string, error) { return "k-" + strconv.Itoa(len(in.(map[string]any))), nil }
	r, err := outbox.New(s, &outbox.Config{Targets: []outbox.Target{
		{Name: "pay", URL: bad.URL, Key: key}, {Name: "legacy", URL: gone.URL, Key: key},
	}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, target := range []string{"pay", "legacy"} {
			if _, err := r.EnqueueTx(ctx, tx, outbox.Intent{Target: target, Method: "POST", Body: []byte(`{}`)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	st := "sqlite:" + path
	code, out, errOut := run(t, "outbox", "list", "--store", st)
	if code != 0 || !strings.Contains(out, "400 Bad Request") || !strings.Contains(out, "pay") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "outbox", "disabled", "--store", st)
	if code != 0 || strings.TrimSpace(out) != "legacy" {
		t.Fatalf("disabled: %d %q", code, out)
	}
	code, out, _ = run(t, "outbox", "requeue", "--store", st, "1")
	if code != 0 || !strings.Contains(out, "1: pending") {
		t.Fatalf("requeue: %d %q", code, out)
	}
	code, out, _ = run(t, "outbox", "list", "--store", st, "--state", "pending", "--json")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"Target":"pay"`) {
		t.Fatalf("pending: %d %q", code, out)
	}
	code, out, _ = run(t, "outbox", "enable", "--store", st, "legacy")
	if code != 0 || !strings.Contains(out, "legacy: enabled") {
		t.Fatalf("enable: %d %q", code, out)
	}
	if dis, _ := s.DisabledTargets(ctx); len(dis) != 0 {
		t.Fatalf("still disabled: %v", dis)
	}
	if code, _, errOut := run(t, "outbox", "requeue", "--store", st, "1"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("requeue of a pending intent: %d %q", code, errOut)
	}
	if code, _, _ := run(t, "outbox", "list"); code != 2 {
		t.Fatalf("no --store: %d", code)
	}
	if code, _, _ := run(t, "outbox", "list", "--store", "memory:"); code != 2 {
		t.Fatalf("memory store: %d", code)
	}
	_ = time.Now
}
