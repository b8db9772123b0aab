package serve_test

import (
	"context"
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

// TestCallbacksReachAnIdemReceiver runs a task whose application has a
// callback URL: its events arrive at an idem webhook endpoint (signature
// checked, delta order) as signed CloudEvents, each once and in order,
// although every first answer is lost on the way back.
func TestCallbacksReachAnIdemReceiver(t *testing.T) {
	ctx := context.Background()
	const secret = "callback-secret-0123456789"
	var mu sync.Mutex
	var applied []int64
	var types []string
	p, err := inbox.New(memstore.NewInbox(), func(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		applied, types = append(applied, ev.Sequence), append(types, ev.Type)
		n := len(applied)
		tx.OnRollback(func() { mu.Lock(); applied, types = applied[:n-1], types[:n-1]; mu.Unlock() })
		return nil
	}, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(p, &webhook.Config{Verifier: v, Event: &event.Config{Owner: event.SourcePrefixes("idem")}})
	if err != nil {
		t.Fatal(err)
	}
	var seenMu sync.Mutex
	seen := map[string]int{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Ce-Id")
		seenMu.Lock()
		seen[id]++
		first := seen[id] == 1
		seenMu.Unlock()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if first && rec.Code == 200 {
			w.WriteHeader(http.StatusBadGateway) // processed, answer lost
			return
		}
		w.WriteHeader(rec.Code)
	}))
	defer receiver.Close()

	s := openSQLite(t)
	if err := s.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")}, CallbackURL: receiver.URL,
		Scheme: "idem", Secrets: []string{secret}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddWorkerToken(ctx, serve.HashToken("w"), time.Now()); err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(s, &serve.Config{Types: types0()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e := &env{t: t, url: hs.URL}
	e.want(e.call("tok", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{"order":"o-1"}}`), 201, "")
	step := e.call("w", "POST", "/v1/worker/claim", "", `{"types":["export"]}`).str("step", "id")
	e.want(e.call("w", "POST", "/v1/worker/steps/"+step+"/complete", "", `{"epoch":1,"output":{"url":"x"}}`), 200, "")
	// Drive the relay until every event is acknowledged (each needs two
	// sends: the first answer is lost).
	clock := time.Now()
	for i := 0; ; i++ {
		if _, err := srv.Relay().RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(applied)
		mu.Unlock()
		seenMu.Lock()
		done := n == 4 && len(seen) == 4 && !slices.ContainsFunc(slicesOf(seen), func(c int) bool { return c < 2 })
		seenMu.Unlock()
		if done {
			break
		}
		if time.Since(clock) > 20*time.Second {
			t.Fatalf("callbacks not delivered: applied %v, seen %v", applied, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !slices.Equal(applied, []int64{1, 2, 3, 4}) {
		t.Fatalf("receiver applied %v, want 1..4 once each in order", applied)
	}
	if !slices.Equal(types, []string{"idem.execution.created", "idem.execution.queued", "idem.execution.running", "idem.execution.succeeded"}) {
		t.Fatalf("types %v", types)
	}
}

func slicesOf(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestRerunCallbacksWin: a receiver that ranks executions with
// execution.Rank applies a rerun's events and refuses the replaced run's
// late one (held back by the receiver until the rerun's had arrived).
func TestRerunCallbacksWin(t *testing.T) {
	ctx := context.Background()
	const secret = "callback-secret-0123456789"
	var mu sync.Mutex
	var applied []string
	p, err := inbox.New(memstore.NewInbox(), func(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, fmt.Sprintf("run%d:%d", execution.Rank(ev), ev.Sequence))
		n := len(applied)
		tx.OnRollback(func() { mu.Lock(); applied = applied[:n-1]; mu.Unlock() })
		return nil
	}, &inbox.Config{Mode: order.ModeDelta, ExecutionRank: execution.Rank, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(p, &webhook.Config{Verifier: v})
	if err != nil {
		t.Fatal(err)
	}
	var hold atomic.Bool
	hold.Store(true)
	var lateOutcome atomic.Value
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		late := r.Header.Get("Ce-Sequence") == "4" && strings.Contains(r.Header.Get("Ce-Type"), "succeeded")
		if late && hold.Load() {
			w.WriteHeader(http.StatusServiceUnavailable) // the replaced run's last event, held back
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if late {
			lateOutcome.Store(rec.Body.String())
		}
		w.WriteHeader(rec.Code)
	}))
	defer receiver.Close()

	s := openSQLite(t)
	if err := s.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")}, CallbackURL: receiver.URL,
		Scheme: "idem", Secrets: []string{secret}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddWorkerToken(ctx, serve.HashToken("w"), time.Now()); err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(s, &serve.Config{Types: types0()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	e := &env{t: t, url: hs.URL}
	task := e.call("tok", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{}}`).str("task", "id")
	step := e.call("w", "POST", "/v1/worker/claim", "", `{"types":["export"]}`).str("step", "id")
	e.want(e.call("w", "POST", "/v1/worker/steps/"+step+"/complete", "", `{"epoch":1}`), 200, "")
	drive := func(until func() bool) {
		t.Helper()
		start := time.Now()
		for !until() {
			if _, err := srv.Relay().RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > 20*time.Second {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("not delivered: applied %v", applied)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	has := func(want ...string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, w := range want {
				if !slices.Contains(applied, w) {
					return false
				}
			}
			return true
		}
	}
	drive(has("run1:1", "run1:2", "run1:3"))
	e.want(e.call("tok", "POST", "/v1/tasks/"+task+"/rerun", "r-1", ""), 201, "")
	drive(has("run2:1", "run2:2"))
	hold.Store(false)
	drive(func() bool { return lateOutcome.Load() != nil })
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(applied, "run1:4") || !strings.Contains(lateOutcome.Load().(string), `"superseded"`) {
		t.Fatalf("the replaced run's late event: applied %v, answer %v", applied, lateOutcome.Load())
	}
}

// TestAllowHosts: with AllowHosts set, a callback to another host is not
// sent; to an allowed one it is.
func TestAllowHosts(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(204)
	}))
	defer receiver.Close()
	for _, tc := range []struct {
		allow []string
		sent  bool
	}{
		{[]string{"hooks.example.com", "*.example.org"}, false},
		{[]string{"*.example.org", "127.0.0.1"}, true},
	} {
		hits.Store(0)
		s := openSQLite(t)
		if err := s.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")}, CallbackURL: receiver.URL,
			Scheme: "idem", Secrets: []string{"callback-secret-0123456789"}, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		srv, err := serve.New(s, &serve.Config{Types: types0(), AllowHosts: tc.allow})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		e := &env{t: t, url: hs.URL}
		e.want(e.call("tok", "POST", "/v1/tasks", "k-1", `{"type":"export","input":{}}`), 201, "")
		if _, err := srv.Relay().RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		hs.Close()
		if got := hits.Load() > 0; got != tc.sent {
			t.Fatalf("allow %v: sent %v, want %v", tc.allow, got, tc.sent)
		}
	}
}
