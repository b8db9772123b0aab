package serve_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/webhook"
)

const callbackSecret = "callback-secret-0123456789"

// receiver is an application's idem webhook endpoint: signature checked,
// delta order, executions ranked by execution.Rank, on a memory inbox.
type receiver struct {
	http.Handler
	mu  sync.Mutex
	evs []event.Event // applied, in order
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	p, err := inbox.New(memstore.NewInbox(), func(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.evs = append(r.evs, ev)
		n := len(r.evs)
		tx.OnRollback(func() { r.mu.Lock(); r.evs = r.evs[:n-1]; r.mu.Unlock() })
		return nil
	}, &inbox.Config{Mode: order.ModeDelta, ExecutionRank: execution.Rank, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{callbackSecret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Handler, err = webhook.New(p, &webhook.Config{Verifier: v, Event: &event.Config{Owner: event.SourcePrefixes("idem")}}); err != nil {
		t.Fatal(err)
	}
	return r
}

// applied maps the events applied so far, in order, with f.
func applied[T any](r *receiver, f func(event.Event) T) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	for _, ev := range r.evs {
		out = append(out, f(ev))
	}
	return out
}

// startOrders runs the service on a new SQLite store with the application
// "orders" (token "tok", callbacks to callbackURL signed with
// callbackSecret) and the worker token "w".
func startOrders(t *testing.T, callbackURL string, cfg serve.Config) (*env, *serve.Server[*sql.Tx]) {
	t.Helper()
	ctx := context.Background()
	s := openSQLite(t)
	if err := s.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")}, CallbackURL: callbackURL,
		Scheme: "idem", Secrets: []string{callbackSecret}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddWorkerToken(ctx, serve.HashToken("w"), time.Now()); err != nil {
		t.Fatal(err)
	}
	cfg.Types = types0()
	srv, err := serve.New(s, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &env{t: t, url: hs.URL}, srv
}

// runOne creates a task and has a worker complete it; it returns the task.
func (e *env) runOne(key string) string {
	e.t.Helper()
	task := e.call("tok", "POST", "/v1/tasks", key, `{"type":"export","input":{"order":"o-1"}}`)
	e.want(task, 201, "")
	step := e.call("w", "POST", "/v1/worker/claim", "", `{"types":["export"]}`).str("step", "id")
	e.want(e.call("w", "POST", "/v1/worker/steps/"+step+"/complete", "", `{"epoch":1,"output":{"url":"x"}}`), 200, "")
	return task.str("task", "id")
}

// drive runs the relay until done says so, at most 20 s.
func drive(t *testing.T, srv *serve.Server[*sql.Tx], done func() bool) {
	t.Helper()
	for start := time.Now(); !done(); time.Sleep(20 * time.Millisecond) {
		if _, err := srv.Relay().RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("callbacks not delivered within 20 s")
		}
	}
}

// TestCallbacksReachAnIdemReceiver runs a task whose application has a
// callback URL: its events arrive at an idem webhook endpoint (signature
// checked, delta order) as signed CloudEvents, each once and in order,
// although every first answer is lost on the way back.
func TestCallbacksReachAnIdemReceiver(t *testing.T) {
	rcv := newReceiver(t)
	var seenMu sync.Mutex
	seen := map[string]int{}
	lossy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Ce-Id")
		seenMu.Lock()
		seen[id]++
		first := seen[id] == 1
		seenMu.Unlock()
		rec := httptest.NewRecorder()
		rcv.ServeHTTP(rec, r)
		if first && rec.Code == 200 {
			w.WriteHeader(http.StatusBadGateway) // processed, answer lost
			return
		}
		w.WriteHeader(rec.Code)
	}))
	defer lossy.Close()
	e, srv := startOrders(t, lossy.URL, serve.Config{})
	e.runOne("k-1")
	// Every event needs two sends: the first answer is lost.
	drive(t, srv, func() bool {
		seenMu.Lock()
		defer seenMu.Unlock()
		resent := 0
		for _, n := range seen {
			if n >= 2 {
				resent++
			}
		}
		return len(applied(rcv, func(event.Event) int { return 0 })) == 4 && resent == 4
	})
	if got := applied(rcv, func(ev event.Event) int64 { return ev.Sequence }); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("receiver applied %v, want 1..4 once each in order", got)
	}
	if got := applied(rcv, func(ev event.Event) string { return ev.Type }); !slices.Equal(got,
		[]string{"idem.execution.created", "idem.execution.queued", "idem.execution.running", "idem.execution.succeeded"}) {
		t.Fatalf("types %v", got)
	}
}

// TestRerunCallbacksWin: a receiver that ranks executions with
// execution.Rank applies a rerun's events and refuses the replaced run's
// late one (held back by the receiver until the rerun's had arrived).
func TestRerunCallbacksWin(t *testing.T) {
	rcv := newReceiver(t)
	var hold atomic.Bool
	hold.Store(true)
	var lateOutcome atomic.Value
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		late := r.Header.Get("Ce-Sequence") == "4" && strings.Contains(r.Header.Get("Ce-Type"), "succeeded")
		if late && hold.Load() {
			w.WriteHeader(http.StatusServiceUnavailable) // the replaced run's last event, held back
			return
		}
		rec := httptest.NewRecorder()
		rcv.ServeHTTP(rec, r)
		if late {
			lateOutcome.Store(rec.Body.String())
		}
		w.WriteHeader(rec.Code)
	}))
	defer slow.Close()
	e, srv := startOrders(t, slow.URL, serve.Config{})
	runs := func(ev event.Event) string { return fmt.Sprintf("run%d:%d", execution.Rank(ev), ev.Sequence) }
	has := func(want ...string) func() bool {
		return func() bool {
			got := applied(rcv, runs)
			return !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(got, w) })
		}
	}
	task := e.runOne("k-1")
	drive(t, srv, has("run1:1", "run1:2", "run1:3"))
	e.want(e.call("tok", "POST", "/v1/tasks/"+task+"/rerun", "r-1", ""), 201, "")
	drive(t, srv, has("run2:1", "run2:2"))
	hold.Store(false)
	drive(t, srv, func() bool { return lateOutcome.Load() != nil })
	if got := applied(rcv, runs); slices.Contains(got, "run1:4") || !strings.Contains(lateOutcome.Load().(string), `"superseded"`) {
		t.Fatalf("the replaced run's late event: applied %v, answer %v", got, lateOutcome.Load())
	}
}

// TestAllowHosts: with AllowHosts set, a callback to another host is not
// sent; to an allowed one it is.
func TestAllowHosts(t *testing.T) {
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(204)
	}))
	defer target.Close()
	for _, tc := range []struct {
		allow []string
		sent  bool
	}{
		{[]string{"hooks.example.com", "*.example.org"}, false},
		{[]string{"*.example.org", "127.0.0.1"}, true},
	} {
		hits.Store(0)
		e, srv := startOrders(t, target.URL, serve.Config{AllowHosts: tc.allow})
		e.want(e.call("tok", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{}}`), 201, "")
		if _, err := srv.Relay().RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := hits.Load() > 0; got != tc.sent {
			t.Fatalf("allow %v: sent %v, want %v", tc.allow, got, tc.sent)
		}
	}
}
