package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/serve"
)

// payments is a stand-in payments API that honours Idempotency-Key: one
// charge per key, the first answer replayed to a repeat. With drop set, it
// charges and then drops its answer (closes the connection) the first
// time it sees a key: the orphan operation.
type payments struct {
	mu       sync.Mutex
	charges  map[string]int // key → charges made
	requests int
	drop     bool
	dropped  map[string]bool
	// status, when set, is answered instead of charging.
	status int
}

func newPayments(t *testing.T) (*payments, string) {
	t.Helper()
	p := &payments{charges: map[string]int{}, dropped: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		p.mu.Lock()
		p.requests++
		if p.status != 0 {
			status := p.status
			p.mu.Unlock()
			w.WriteHeader(status)
			return
		}
		if p.charges[key] == 0 || key == "" {
			p.charges[key]++
		}
		drop := p.drop && !p.dropped[key]
		p.dropped[key] = true
		p.mu.Unlock()
		if drop {
			dropAnswer(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge": %q}`, "ch-"+key)
	}))
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// dropAnswer closes the connection without an answer: the effect is made,
// its caller never learns it.
func dropAnswer(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

func (p *payments) effects() (keys, charges, requests int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.charges {
		keys++
		charges += n
	}
	return keys, charges, p.requests
}

func (p *payments) set(fn func(p *payments)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(p)
}

// shipping is a legacy stand-in without keys: a shipment per order, kept
// unique by the order (a second POST of one is 409), readable by GET. With
// drop set it drops the answer of the first POST that ships.
type shipping struct {
	mu        sync.Mutex
	shipments map[string]int
	posts     int
	drop      bool
	dropped   bool
	// status, when set, is answered to a POST instead of shipping.
	status int
}

func newShipping(t *testing.T) (*shipping, string) {
	t.Helper()
	s := &shipping{shipments: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		order := strings.TrimPrefix(r.URL.Path, "/shipments/")
		s.mu.Lock()
		if r.Method == http.MethodGet {
			n := s.shipments[order]
			s.mu.Unlock()
			if n == 0 {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			fmt.Fprintf(w, `{"order": %q}`, order)
			return
		}
		var body struct{ Order string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		s.posts++
		if s.status != 0 {
			status := s.status
			s.mu.Unlock()
			w.WriteHeader(status)
			return
		}
		if s.shipments[body.Order] > 0 {
			s.mu.Unlock()
			w.WriteHeader(http.StatusConflict) // the unique external id
			return
		}
		s.shipments[body.Order]++
		drop := s.drop && !s.dropped
		s.dropped = s.dropped || drop
		s.mu.Unlock()
		if drop {
			dropAnswer(w)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *shipping) set(fn func(s *shipping)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func (s *shipping) count() (orders, shipments, posts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.shipments {
		orders++
		shipments += n
	}
	return orders, shipments, s.posts
}

// checkoutFlow is the checkout: charge (keyed by the order) then ship (a
// legacy target, verified before each write), with a retry budget and a
// backoff that keep tests short.
func checkoutFlow(payURL, shipURL string, entry string) string {
	if entry == "" {
		entry = `{"idempotencyFields": "order.id"}`
	}
	return `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": ` + entry + `},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "` + payURL + `/v1/charges",
    "headers": {"Idempotency-Key": "= 'charge-' & payload.order.id"},
    "body": {"amount": "= payload.order.amount"},
    "timeout": "5s", "retry": {"maxAttempts": 4, "backoff": "10ms"}}},
  {"id": "ship", "type": "GATEWAY", "config": {"method": "POST", "url": "` + shipURL + `/shipments",
    "body": {"order": "= payload.order.id"},
    "verify": {"url": "= '` + shipURL + `/shipments/' & payload.order.id", "found": "= response.status = 200"},
    "timeout": "5s", "retry": {"maxAttempts": 4, "backoff": "10ms"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "ship"}, {"from": "ship", "to": "done"}]}`
}

// startRunning serves s with its workflows' runner, expirer and wake-ups
// running until the test ends.
func startRunning[TX any](t *testing.T, s serve.Store[TX], cfg *serve.Config) *env {
	t.Helper()
	seed(t, s)
	if cfg.Types == nil {
		cfg.Types = types
	}
	if cfg.ExpireInterval == 0 {
		cfg.ExpireInterval = 50 * time.Millisecond
	}
	if cfg.ClaimPoll == 0 {
		cfg.ClaimPoll = 50 * time.Millisecond
	}
	srv, err := serve.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.RunWakeups(ctx) })
	wg.Go(func() { _ = srv.RunWorkflows(ctx) })
	wg.Go(func() { _ = srv.RunExpirer(ctx) })
	t.Cleanup(func() { hs.Close(); cancel(); wg.Wait() })
	return &env{t: t, url: hs.URL}
}

// settled waits until the execution has finished, and returns it.
func (e *env) settled(token, id string) answer {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := e.call(token, "GET", "/v1/executions/"+id, "", "")
		switch a.str("status") {
		case "SUCCEEDED", "FAILED", "CANCELED", "TIMED_OUT":
			return a
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("execution %s did not finish: %s", id, a.raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// steps returns the execution's steps as "name status key".
func (e *env) steps(token, id string) []string {
	e.t.Helper()
	a := e.call(token, "GET", "/v1/executions/"+id+"/steps", "", "")
	var out []string
	items, _ := a.body["items"].([]any)
	for _, it := range items {
		m := it.(map[string]any)
		k, _ := m["idempotencyKey"].(string)
		out = append(out, fmt.Sprintf("%s %s %s", m["name"], m["status"], k))
	}
	return out
}

func (e *env) putWorkflow(name, def string) {
	e.t.Helper()
	e.want(e.call("tok-orders", "PUT", "/v1/workflows/"+name, "", def), 201, "")
}

func eachStore(t *testing.T, fn func(t *testing.T, start func(cfg *serve.Config) *env)) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		fn(t, func(cfg *serve.Config) *env { return startRunning(t, openSQLite(t), cfg) })
	})
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, func(cfg *serve.Config) *env { return startRunning(t, openPostgres(t), cfg) })
	})
}
