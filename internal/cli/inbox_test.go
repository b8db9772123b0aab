package cli

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/webhook"
)

// TestInboxCommands drives `idem inbox` against a real admin API over a
// SQLite inbox: a dead letter is listed, requeued before the fix (dead
// again, attempts added), and requeued after it (applied with the parked
// event behind it).
func TestInboxCommands(t *testing.T) {
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
	if _, err := db.Exec(`CREATE TABLE paid (id TEXT, seq INTEGER)`); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fixed atomic.Bool
	apply := func(ctx context.Context, tx *sql.Tx, ev event.Event) error {
		if string(ev.Data) == `"bad"` && !fixed.Load() {
			return inbox.Invalid(errors.New("amount is not a number"))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO paid VALUES (?, ?)`, ev.Subject, ev.Sequence)
		return err
	}
	p, err := inbox.New(s, apply, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(webhook.Admin(p, nil))
	t.Cleanup(srv.Close)

	ev := func(seq int64, data string) event.Event {
		return event.Event{ID: "e" + event.FormatSequence(seq), Source: "https://shop.example/orders", Type: "t",
			Subject: "o-1", Sequence: seq, DataContentType: "application/json", Data: []byte(data)}
	}
	for _, e := range []event.Event{ev(1, `"bad"`), ev(2, `"ok"`)} {
		if _, err := p.Process(ctx, e); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := run(t, "inbox", "dead-letters", "--admin", srv.URL)
	if code != 0 || !strings.Contains(out, "amount is not a number") || !strings.Contains(out, "o-1") {
		t.Fatalf("dead-letters: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "inbox", "gaps", "--admin", srv.URL)
	if code != 0 || !strings.Contains(out, "delta") {
		t.Fatalf("gaps: %d %q", code, out)
	}
	code, out, _ = run(t, "inbox", "requeue", "--admin", srv.URL, "1")
	if code != 0 || !strings.Contains(out, "1: dead_lettered") {
		t.Fatalf("requeue before the fix: %d %q", code, out)
	}
	code, out, _ = run(t, "inbox", "dead-letters", "--admin", srv.URL, "--json", "--all", "--limit", "1")
	if code != 0 || !strings.Contains(out, `"id":2`) || !strings.Contains(out, `"attempts":2`) {
		t.Fatalf("after the second failure: %d %q", code, out)
	}
	fixed.Store(true)
	code, out, _ = run(t, "inbox", "requeue", "--admin", srv.URL, "2")
	if code != 0 || !strings.Contains(out, "2: processed applied [1 2]") {
		t.Fatalf("requeue after the fix: %d %q", code, out)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM paid`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("paid rows %d, %v; want 2", n, err)
	}
	code, _, errOut = run(t, "inbox", "requeue", "--admin", srv.URL, "2")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("requeue unknown: %d %q", code, errOut)
	}
	if code, _, _ := run(t, "inbox", "dead-letters"); code != 2 {
		t.Fatalf("no --admin: exit %d, want 2", code)
	}
	if code, _, _ := run(t, "inbox", "requeue", "--admin", srv.URL, "x"); code != 2 {
		t.Fatalf("bad id: exit %d, want 2", code)
	}
}
