// Command checkout runs a checkout workflow through its worst day, on
// embedded SQLite:
//
//	go run ./examples/checkout
//
// The workflow charges an order at a payments API that honours
// Idempotency-Key (the key 'charge-' & payload.order.id, from the order),
// then ships it through a legacy shipping API that has no keys: its step
// reads the order's shipment before every write (verify), and the API
// refuses a second shipment of one order (its unique external id, a 409
// that counts as done).
//
// Two idem serve services share the store, as two processes would. Then:
// the same order is triggered 50 times at once, at both; the service that
// runs its charge dies mid-call (the payments API charged, the answer
// never came back) and the other takes the step over when its lease ends;
// the payments API drops one answer in five after charging; a shipment
// is refused until an operator fixes the address and retries the run; an
// operator starts a finished run over. At the end every order has one
// charge and one shipment.
//
// It prints what happens and exits non-zero if anything differs from the
// promises.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

func main() {
	dir := flag.String("dir", "", "where the SQLite file goes (default: a new temporary directory)")
	flag.Parse()
	if err := run(context.Background(), *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

// listen serves h on a free loopback port and returns its URL.
func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// payments honours Idempotency-Key: one charge per key, a repeat gets the
// first charge. It drops every fifth answer after charging, and it can
// hold one charge until the service that sent it is gone.
type payments struct {
	mu       sync.Mutex
	charges  map[string]int
	requests int
	lost     int           // answers dropped after a charge
	hold     chan struct{} // closed when the held call may end
	holding  chan struct{} // closed when the held call arrived
	held     bool
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	p.requests++
	n := p.requests
	if p.charges[key] == 0 {
		p.charges[key] = 1
	}
	hold := !p.held && key == "charge-o-1"
	p.held = p.held || hold
	if hold || n%5 == 0 {
		p.lost++
	}
	p.mu.Unlock()
	if hold {
		// Charged; the caller dies before the answer comes back.
		close(p.holding)
		<-p.hold
		drop(w)
		return
	}
	if n%5 == 0 {
		drop(w) // charged, and the answer is lost
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge": %q}`, "ch_"+key)
}

// shipping is a legacy API without keys: one shipment per order (a second
// POST is 409), readable with GET. It refuses the orders in refuse.
type shipping struct {
	mu        sync.Mutex
	shipments map[string]int
	posts     int
	refuse    map[string]bool
}

func (s *shipping) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodGet {
		if s.shipments[strings.TrimPrefix(r.URL.Path, "/shipments/")] == 0 {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"shipped": true}`)
		return
	}
	var body struct{ Order string }
	_ = json.NewDecoder(r.Body).Decode(&body)
	s.posts++
	switch {
	case s.refuse[body.Order]:
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"error": "unknown address"}`)
	case s.shipments[body.Order] > 0:
		w.WriteHeader(http.StatusConflict) // the unique external id
	default:
		s.shipments[body.Order]++
		w.WriteHeader(http.StatusCreated)
	}
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		conn.Close()
	}
}

const workflow = `
vertices:
  - id: start
    type: ENTRY_POINT
    config: {idempotencyFields: order.id}
  - id: charge
    type: GATEWAY
    config:
      method: POST
      url: PAYMENTS/v1/charges
      headers: {Idempotency-Key: "= 'charge-' & payload.order.id"}
      body: {amount: "= payload.order.amount"}
      timeout: 2s
      retry: {maxAttempts: 10, backoff: 20ms}
  - id: ship
    type: GATEWAY
    config:
      method: POST
      url: SHIPPING/shipments
      body: {order: "= payload.order.id"}
      verify: {url: "= 'SHIPPING/shipments/' & payload.order.id", found: "= response.status = 200"}
      timeout: 2s
      retry: {maxAttempts: 10, backoff: 20ms}
  - {id: done, type: END}
edges:
  - {from: start, to: charge}
  - {from: charge, to: ship}
  - {from: ship, to: done}
`

// service is one idem serve on the shared store, as one process would be.
type service struct {
	url  string
	stop func()
}

func startService(ctx context.Context, path string, lease time.Duration) (*service, error) {
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return nil, err
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		db.Close()
		return nil, err
	}
	srv, err := serve.New(st, &serve.Config{WorkflowLease: lease, ClaimPoll: 50 * time.Millisecond, ExpireInterval: 100 * time.Millisecond})
	if err != nil {
		db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.RunWorkflows(ctx) })
	wg.Go(func() { _ = srv.RunExpirer(ctx) })
	url, closeHTTP, err := listen(srv)
	if err != nil {
		cancel()
		db.Close()
		return nil, err
	}
	return &service{url: url, stop: func() { closeHTTP(); cancel(); wg.Wait(); st.Close(); db.Close() }}, nil
}

// client calls the services as the shop application.
type client struct {
	token string
}

type answer struct {
	status   int
	replayed bool
	body     map[string]any
}

func (c client) call(method, url, key, body string) (answer, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Idem-Operator", "dana")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true"}
	b, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(b, &a.body)
	return a, nil
}

func (a answer) execution() (id, status string) {
	e, _ := a.body["execution"].(map[string]any)
	if e == nil {
		e = a.body
	}
	id, _ = e["id"].(string)
	status, _ = e["status"].(string)
	return id, status
}

// finished waits for a run to finish and returns its status.
func (c client) finished(base, id string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, err := c.call("GET", base+"/v1/executions/"+id, "", "")
		if err != nil {
			return "", err
		}
		switch _, s := a.execution(); s {
		case "SUCCEEDED", "FAILED", "CANCELED", "TIMED_OUT":
			return s, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("run %s did not finish", id)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func run(ctx context.Context, dir string, out io.Writer) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "idem-checkout")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	path := filepath.Join(dir, "idem.db")
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return err
	}
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		db.Close()
		return err
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		db.Close()
		return err
	}
	const token = "shop-token-for-the-checkout-example"
	err = st.CreateApp(ctx, store.App{Name: "shop", TokenHashes: [][]byte{serve.HashToken(token)}, Scheme: "idem", CreatedAt: time.Now()})
	st.Close()
	db.Close()
	if err != nil {
		return err
	}

	pay := &payments{charges: map[string]int{}, hold: make(chan struct{}), holding: make(chan struct{})}
	ship := &shipping{shipments: map[string]int{}, refuse: map[string]bool{"o-9": true}}
	payURL, stopPay, err := listen(pay)
	if err != nil {
		return err
	}
	defer stopPay()
	shipURL, stopShip, err := listen(ship)
	if err != nil {
		return err
	}
	defer stopShip()

	const lease = time.Second
	a, err := startService(ctx, path, lease)
	if err != nil {
		return err
	}
	c := client{token: token}
	def := strings.NewReplacer("PAYMENTS", payURL, "SHIPPING", shipURL).Replace(workflow)
	if got, err := c.call("PUT", a.url+"/v1/workflows/checkout", "", def); err != nil || got.status != http.StatusCreated {
		a.stop()
		return fmt.Errorf("storing the workflow: %v %v", got, err)
	}
	fmt.Fprintln(out, "stored the checkout workflow, version 1")

	// Service A alone runs steps for now: it takes o-1's charge.
	b, err := startService(ctx, path, lease)
	if err != nil {
		a.stop()
		return err
	}
	defer b.stop()
	trigger := func(base, order string, amount int) (answer, error) {
		return c.call("POST", base+"/v1/workflows/checkout/trigger", "", fmt.Sprintf(`{"order": {"id": %q, "amount": %d}}`, order, amount))
	}

	// 1. The same order, 50 times at once, at both services.
	answers := make([]answer, 50)
	errs := make([]error, 50)
	var wg sync.WaitGroup
	for i := range answers {
		base := a.url
		if i%2 == 1 {
			base = b.url
		}
		wg.Go(func() { answers[i], errs[i] = trigger(base, "o-1", 1250) })
	}
	wg.Wait()
	runs, created, merged := map[string]bool{}, 0, 0
	for i, ans := range answers {
		if errs[i] != nil {
			a.stop()
			return errs[i]
		}
		id, _ := ans.execution()
		runs[id] = true
		switch {
		case ans.status == http.StatusCreated:
			created++
		case ans.status == http.StatusOK && ans.replayed:
			merged++
		}
	}
	fmt.Fprintf(out, "o-1 triggered 50 times at once: %d run (%d × 201, %d × 200 Idempotent-Replayed)\n", len(runs), created, merged)
	if len(runs) != 1 || created != 1 || merged != 49 {
		a.stop()
		return errors.New("50 identical triggers did not make one run")
	}
	var o1 string
	for id := range runs {
		o1 = id
	}

	// 2. The service running o-1's charge dies mid-call.
	select {
	case <-pay.holding:
	case <-time.After(30 * time.Second):
		a.stop()
		return errors.New("the charge of o-1 never reached the payments API")
	}
	a.stop()
	close(pay.hold)
	fmt.Fprintln(out, "the service charging o-1 died mid-call: the payments API charged, the answer was lost")
	if s, err := c.finished(b.url, o1); err != nil || s != "SUCCEEDED" {
		return fmt.Errorf("o-1's run after the takeover: %s %v", s, err)
	}
	steps, err := c.call("GET", b.url+"/v1/executions/"+o1+"/steps", "", "")
	if err != nil {
		return err
	}
	for _, it := range steps.body["items"].([]any) {
		st := it.(map[string]any)
		key, _ := st["idempotencyKey"].(string)
		if key == "" {
			key = "none (a legacy target: verified before each write)"
		}
		fmt.Fprintf(out, "  step %-6v %-9v epoch %v, attempts %v, key %s\n", st["name"], st["status"], st["epoch"], st["attempts"], key)
	}

	// 3. More orders; the payments API drops one answer in five.
	orders := []string{"o-1"}
	ids := map[string]string{"o-1": o1}
	for i := 2; i <= 9; i++ {
		order := fmt.Sprintf("o-%d", i)
		got, err := trigger(b.url, order, 100*i)
		if err != nil || got.status != http.StatusCreated {
			return fmt.Errorf("trigger %s: %v %v", order, got, err)
		}
		orders = append(orders, order)
		ids[order], _ = got.execution()
	}
	for _, order := range orders[1:] {
		s, err := c.finished(b.url, ids[order])
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %s\n", order, s)
		if (order == "o-9") != (s == "FAILED") {
			return fmt.Errorf("%s ended %s", order, s)
		}
	}

	// 4. An operator fixes o-9's address and retries its run: the same
	// run goes on at its failed step; the charge is not sent again.
	ship.mu.Lock()
	delete(ship.refuse, "o-9")
	ship.mu.Unlock()
	retried, err := c.call("POST", b.url+"/v1/executions/"+ids["o-9"]+"/retry", "", "")
	if err != nil || retried.status != http.StatusOK {
		return fmt.Errorf("retry: %v %v", retried, err)
	}
	if s, err := c.finished(b.url, ids["o-9"]); err != nil || s != "SUCCEEDED" {
		return fmt.Errorf("o-9 after the retry: %s %v", s, err)
	}
	fmt.Fprintln(out, "o-9: the operator retried the run after fixing the address: SUCCEEDED")

	// 5. An operator starts o-1 over: a new run, the same keys; the
	// targets absorb it.
	over, err := c.call("POST", b.url+"/v1/executions/"+o1+"/start-over", "start-over-o-1", `{"version": "original"}`)
	if err != nil || over.status != http.StatusCreated {
		return fmt.Errorf("start over: %v %v", over, err)
	}
	o1again, _ := over.execution()
	if s, err := c.finished(b.url, o1again); err != nil || s != "SUCCEEDED" {
		return fmt.Errorf("o-1's new run: %s %v", s, err)
	}
	fmt.Fprintf(out, "o-1: the operator started it over: run %s SUCCEEDED\n", o1again)

	// The promises.
	pay.mu.Lock()
	defer pay.mu.Unlock()
	ship.mu.Lock()
	defer ship.mu.Unlock()
	fmt.Fprintf(out, "payments: %d requests, %d answers lost after charging\n", pay.requests, pay.lost)
	fmt.Fprintf(out, "shipping: %d posts\n", ship.posts)
	fmt.Fprintln(out, "order  charges  shipments")
	bad := false
	for _, order := range orders {
		charges, shipments := pay.charges["charge-"+order], ship.shipments[order]
		fmt.Fprintf(out, "%-6s %7d  %9d\n", order, charges, shipments)
		bad = bad || charges != 1 || shipments != 1
	}
	if bad || len(pay.charges) != len(orders) || len(ship.shipments) != len(orders) {
		return errors.New("an order was charged or shipped other than once")
	}
	fmt.Fprintln(out, "every order: one charge, one shipment")
	return nil
}
