package outbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

var chaosFull = flag.Bool("outbox.full", false, "TestRelayChaos at the issue's size: 5,000 transactions, a kill every 2 s")

// Environment of the relay child (this test binary re-executed).
const (
	envRelayDB     = "IDEM_OUTBOX_CHAOS_DB"
	envRelayTarget = "IDEM_OUTBOX_CHAOS_TARGET"
)

// chaosTargets is the one target of the chaos test: charge-<order id>.
func chaosTargets(url string) []outbox.Target {
	return []outbox.Target{{Name: "pay", URL: url, Key: orderKey("charge-"), Timeout: 2 * time.Second}}
}

// relayMain is the relay child: it opens the SQLite outbox and runs a relay
// until it is killed (SIGKILL: no deferred call runs) or stopped (SIGTERM).
func relayMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := sqlitestore.Open(os.Getenv(envRelayDB), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	s, err := sqlitestore.New(db, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := outbox.New(s, &outbox.Config{Targets: chaosTargets(os.Getenv(envRelayTarget)), Lease: 3 * time.Second,
		Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxAttempts: 1000, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// chaosTarget deduplicates by key (one effect per key) and records every
// request; the proxy in front of it lets it process a call and then drops
// the answer (closes the connection) one time in five.
type chaosTarget struct {
	mu       sync.Mutex
	effects  map[string]int      // key -> effects (at most 1: it dedups)
	keysOf   map[string][]string // order id in the body -> keys of every request
	requests int
	dropped  int
}

func (c *chaosTarget) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Order struct{ ID string } `json:"order"`
		}
		_ = json.Unmarshal(body, &p)
		k := r.Header.Get("Idempotency-Key")
		c.mu.Lock()
		c.requests++
		c.keysOf[p.Order.ID] = append(c.keysOf[p.Order.ID], k)
		if c.effects[k] == 0 {
			c.effects[k] = 1
		}
		drop := rand.IntN(5) == 0
		if drop {
			c.dropped++
		}
		c.mu.Unlock()
		if drop { // processed; the answer is lost
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
		}
		w.WriteHeader(http.StatusCreated)
	})
}

// TestRelayChaos: business transactions (30% rolled back) each enqueue one
// intent in an SQLite outbox while a relay process delivers them and is
// killed with SIGKILL again and again, through a proxy that drops one
// answer in five after the target processed the call. After the drain: no
// delivery for a rolled-back transaction, every committed intent delivered
// at least once, one key per intent over all its attempts, and exactly one
// effect per committed intent at the deduplicating target.
//
// Short by default; the long version (5,000 transactions, a kill every 2 s):
//
//	go test ./outbox -run RelayChaos -v -timeout 30m -args -outbox.full
func TestRelayChaos(t *testing.T) {
	txs, every := 600, 400*time.Millisecond
	if *chaosFull {
		txs, every = 5000, 2*time.Second
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tg := &chaosTarget{effects: map[string]int{}, keysOf: map[string][]string{}}
	srv := httptest.NewServer(tg.handler())
	defer srv.Close()

	// The producer's own relay value only enqueues (it never runs).
	producer, err := outbox.New(s, &outbox.Config{Targets: chaosTargets(srv.URL), Lease: 3 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	produced := make(chan struct{})
	committed := 0
	go func() {
		defer close(produced)
		for i := range txs {
			id := fmt.Sprintf("o-%05d", i)
			rollback := rand.IntN(10) < 3
			err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
					return err
				}
				if _, err := producer.EnqueueTx(ctx, tx, charge(id)); err != nil {
					return err
				}
				if rollback {
					return errRollback
				}
				return nil
			})
			switch {
			case rollback && errors.Is(err, errRollback):
			case err != nil:
				t.Errorf("transaction %s: %v", id, err)
				return
			default:
				committed++
			}
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		}
	}()

	kills := 0
	start := time.Now()
	for !isClosed(produced) || kills < 3 {
		child := startRelay(t, path, srv.URL)
		select {
		case <-time.After(every):
		case <-produced:
			time.Sleep(every / 4)
		}
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = child.Wait()
		kills++
	}
	// Production is over: a last relay drains the outbox, then stops.
	last := startRelay(t, path, srv.URL)
	waitDrained(t, s, 60*time.Second)
	_ = last.Process.Signal(syscall.SIGTERM)
	if err := last.Wait(); err != nil {
		t.Fatalf("the last relay did not stop cleanly: %v", err)
	}
	srv.Close() // every handler has returned
	tg.mu.Lock()
	defer tg.mu.Unlock()
	t.Logf("%d transactions (%d committed), %d relay kills, %d requests (%d answers dropped), %v",
		txs, committed, kills, tg.requests, tg.dropped, time.Since(start).Round(time.Millisecond))

	var orders []string
	rows, err := db.Query(`SELECT id FROM orders ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		orders = append(orders, id)
	}
	rows.Close()
	if len(orders) != committed {
		t.Fatalf("%d committed orders in the table, the producer counted %d", len(orders), committed)
	}
	isCommitted := map[string]bool{}
	for _, id := range orders {
		isCommitted[id] = true
		keys := tg.keysOf[id]
		if len(keys) == 0 {
			t.Errorf("committed %s never delivered", id)
			continue
		}
		for _, k := range keys {
			if k != "charge-"+id {
				t.Errorf("%s: attempts carried keys %v", id, keys)
				break
			}
		}
		if tg.effects["charge-"+id] != 1 {
			t.Errorf("%s: %d effects", id, tg.effects["charge-"+id])
		}
	}
	for id := range tg.keysOf {
		if !isCommitted[id] {
			t.Errorf("%s was delivered but its transaction rolled back", id)
		}
	}
	if len(tg.effects) != committed {
		t.Errorf("%d effects for %d committed intents", len(tg.effects), committed)
	}
	if kills < 3 {
		t.Errorf("only %d kills", kills)
	}
}

var errRollback = errors.New("the business transaction rolls back")

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// startRelay starts the relay child and waits until it is ready.
func startRelay(t *testing.T, path, target string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envRelayDB+"="+path, envRelayTarget+"="+target)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("relay child: %q, %v", line, err)
	}
	return cmd
}

// waitDrained waits until no intent is pending or in flight.
func waitDrained(t *testing.T, s store.OutboxStore[*sql.Tx], limit time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		p, err1 := s.ListIntents(ctx, store.IntentPending, 0, 1)
		f, err2 := s.ListIntents(ctx, store.IntentInFlight, 0, 1)
		d, err3 := s.ListIntents(ctx, store.IntentDead, 0, 1)
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		if len(d) > 0 {
			t.Fatalf("an intent died: %+v", d[0])
		}
		if len(p) == 0 && len(f) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained after %v", limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
