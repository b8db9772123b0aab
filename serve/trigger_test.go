package serve_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/serve"
)

// A trigger starts a run of the latest version; its vertices run as steps
// with the keys computed from the order, and the run ends SUCCEEDED with
// one charge and one shipment. Its execution names the workflow and its
// version, and no task: the tasks API does not show its task.
func TestTriggerRunsTheWorkflow(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		ship, shipURL := newShipping(t)
		e := start(&serve.Config{})
		e.putWorkflow("checkout", checkoutFlow(payURL, shipURL, ""))
		a := e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 1250}}`)
		e.want(a, 201, "")
		id := a.str("execution", "id")
		if a.str("workflow") != "checkout" || a.body["version"] != 1.0 || a.str("execution", "workflow") != "checkout" {
			t.Fatalf("trigger: %s", a.raw)
		}
		done := e.settled("tok-orders", id)
		if done.str("status") != "SUCCEEDED" || done.body["taskId"] != nil || done.body["version"] != 1.0 {
			t.Fatalf("execution %s", done.raw)
		}
		if want := []string{"charge COMPLETED charge-o-1", "ship COMPLETED "}; !slices.Equal(e.steps("tok-orders", id), want) {
			t.Fatalf("steps %v, want %v", e.steps("tok-orders", id), want)
		}
		if keys, charges, _ := pay.effects(); keys != 1 || charges != 1 {
			t.Fatalf("payments: %d keys, %d charges", keys, charges)
		}
		if orders, shipments, _ := ship.count(); orders != 1 || shipments != 1 {
			t.Fatalf("shipping: %d orders, %d shipments", orders, shipments)
		}
		if tasks := e.call("tok-orders", "GET", "/v1/tasks", "", ""); strings.Contains(tasks.raw, "idem.workflow") {
			t.Fatalf("the tasks API shows a workflow's run: %s", tasks.raw)
		}
		if other := e.call("tok-billing", "GET", "/v1/executions/"+id, "", ""); other.status != 404 {
			t.Fatalf("another application reads the run: %d", other.status)
		}
		evs := e.call("tok-orders", "GET", "/v1/executions/"+id+"/events", "", "")
		if !strings.Contains(evs.raw, `"subject":"checkout"`) || strings.Contains(evs.raw, "taskId") {
			t.Fatalf("events: %s", evs.raw)
		}
	})
}

// 100 identical triggers at once start one execution: one 201, 99 200s
// with Idempotent-Replayed and the same execution; 1,000 distinct ones
// start 1,000. Every order is charged once.
func TestTriggerStorms(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		e := start(&serve.Config{})
		e.putWorkflow("checkout", `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id"}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "`+payURL+`/v1/charges",
    "headers": {"Idempotency-Key": "= 'charge-' & payload.order.id"}, "retry": {"maxAttempts": 4, "backoff": "10ms"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "done"}]}`)
		storm := func(n int, body func(i int) string) []answer {
			out := make([]answer, n)
			var wg sync.WaitGroup
			sem := make(chan struct{}, 32)
			for i := range n {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					a, err := e.try("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", body(i))
					if err != nil {
						a.raw = err.Error()
					}
					out[i] = a
				})
			}
			wg.Wait()
			return out
		}
		same := storm(100, func(int) string { return `{"order": {"id": "o-same", "amount": 5}}` })
		created, ids := 0, map[string]bool{}
		for _, a := range same {
			switch {
			case a.status == 201:
				created++
			case a.status == 200 && a.header.Get("Idempotent-Replayed") == "true":
			default:
				t.Fatalf("an identical trigger: %d %s", a.status, a.raw)
			}
			ids[a.str("execution", "id")] = true
		}
		if created != 1 || len(ids) != 1 {
			t.Fatalf("100 identical triggers: %d created, %d executions; want 1 and 1", created, len(ids))
		}
		distinct := storm(1000, func(i int) string { return fmt.Sprintf(`{"order": {"id": "o-%d", "amount": 5}}`, i) })
		ids = map[string]bool{}
		for _, a := range distinct {
			if a.status != 201 {
				t.Fatalf("a distinct trigger: %d %s", a.status, a.raw)
			}
			ids[a.str("execution", "id")] = true
		}
		if len(ids) != 1000 {
			t.Fatalf("1,000 distinct triggers started %d executions", len(ids))
		}
		// Runs finish as fast as the store commits them: on SQLite under
		// the race detector, with every package's tests beside, that is
		// slow; so the wait is for them all, not for each.
		deadline := time.Now().Add(3 * time.Minute)
		for id := range ids {
			for {
				got := e.call("tok-orders", "GET", "/v1/executions/"+id, "", "")
				if got.str("status") == "SUCCEEDED" {
					break
				}
				if s := got.str("status"); s == "FAILED" || s == "CANCELED" || time.Now().After(deadline) {
					t.Fatalf("execution %s", got.raw)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if keys, charges, _ := pay.effects(); keys != 1001 || charges != 1001 {
			t.Fatalf("payments: %d keys, %d charges; want 1,001 of each", keys, charges)
		}
	})
}

// A trigger's identity is bound to its payload: the same
// idempotencyFields values or clientIdempotencyId with another payload is
// 422, never the other's run. A trigger the workflow cannot run is 422
// trigger-invalid, forceNewExecution is for test runs only, and a test run
// always starts a new execution.
func TestTriggerIdentity(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		_, payURL := newPayments(t)
		_, shipURL := newShipping(t)
		e := start(&serve.Config{})
		e.putWorkflow("checkout", checkoutFlow(payURL, shipURL, ""))
		trigger := func(query, body string) answer {
			return e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger"+query, "", body)
		}
		first := trigger("", `{"order": {"id": "o-1", "amount": 5}}`)
		e.want(first, 201, "")
		// The same payload, written otherwise (RFC 8785): the same run.
		same := trigger("", `{ "order" : { "amount" : 5.0, "id" : "o-1" } }`)
		if same.status != 200 || same.header.Get("Idempotent-Replayed") != "true" || same.str("execution", "id") != first.str("execution", "id") {
			t.Fatalf("the same payload again: %d %s", same.status, same.raw)
		}
		e.want(trigger("", `{"order": {"id": "o-1", "amount": 6}}`), 422, "idempotency-key-reused")
		byClient := trigger("?clientIdempotencyId=req-7", `{"order": {"id": "o-2", "amount": 5}}`)
		e.want(byClient, 201, "")
		e.want(trigger("?clientIdempotencyId=req-7", `{"order": {"id": "o-3", "amount": 5}}`), 422, "idempotency-key-reused")
		if again := trigger("?clientIdempotencyId=req-7", `{"order": {"id": "o-2", "amount": 5}}`); again.status != 200 ||
			again.str("execution", "id") != byClient.str("execution", "id") {
			t.Fatalf("the same clientIdempotencyId and payload: %d %s", again.status, again.raw)
		}
		e.want(trigger("", `{"order": {"amount": 5}}`), 422, "trigger-invalid")
		e.want(trigger("?clientIdempotencyId=has%20space", `{"order": {"id": "o-4"}}`), 422, "trigger-invalid")
		e.want(trigger("", `{"order": `), 400, "body-invalid-json")
		e.want(trigger("?forceNewExecution=true", `{"order": {"id": "o-1", "amount": 5}}`), 400, "force-new-execution-not-allowed")
		e.want(e.call("tok-orders", "POST", "/v1/workflows/nope/trigger", "", `{}`), 404, "not-found")
		e.want(e.call("tok-billing", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 5}}`), 404, "not-found")
		t1 := e.call("tok-orders", "POST", "/v1/workflows/checkout/test-run", "", `{"order": {"id": "o-1", "amount": 5}}`)
		t2 := e.call("tok-orders", "POST", "/v1/workflows/checkout/test-run?forceNewExecution=true", "", `{"order": {"id": "o-1", "amount": 5}}`)
		e.want(t1, 201, "")
		e.want(t2, 201, "")
		if ids := []string{first.str("execution", "id"), t1.str("execution", "id"), t2.str("execution", "id")}; ids[1] == ids[0] || ids[2] == ids[1] {
			t.Fatalf("test runs %v: each a new execution", ids)
		}
	})
}

// After a run finished, the reuse policy decides within the window: by
// default a failed run is followed by a new one and a succeeded run is
// not; REJECT_DUPLICATE gets the first run whatever its end; after the
// window a new run starts.
func TestTriggerReusePolicy(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		_, shipURL := newShipping(t)
		clock := newClock()
		e := start(&serve.Config{Now: clock.Now})
		e.putWorkflow("checkout", checkoutFlow(payURL, shipURL, `{"idempotencyFields": "order.id", "idempotencyWindow": "1h"}`))
		e.putWorkflow("strict", checkoutFlow(payURL, shipURL, `{"idempotencyFields": "order.id", "reusePolicy": "REJECT_DUPLICATE"}`))
		run := func(name, order string) (answer, answer) {
			a := e.call("tok-orders", "POST", "/v1/workflows/"+name+"/trigger", "", `{"order": {"id": "`+order+`", "amount": 5}}`)
			if a.status != 200 && a.status != 201 {
				t.Fatalf("trigger: %d %s", a.status, a.raw)
			}
			return a, e.settled("tok-orders", a.str("execution", "id"))
		}
		pay.set(func(p *payments) { p.status = 422 }) // the card is declined
		failed, end := run("checkout", "o-1")
		if end.str("status") != "FAILED" || !strings.Contains(end.str("error"), "422") {
			t.Fatalf("a declined charge: %s", end.raw)
		}
		pay.set(func(p *payments) { p.status = 0 })
		second, end := run("checkout", "o-1")
		if second.status != 201 || second.str("execution", "id") == failed.str("execution", "id") || end.str("status") != "SUCCEEDED" {
			t.Fatalf("after a failed run: %d %s", second.status, end.raw)
		}
		third, _ := run("checkout", "o-1")
		if third.status != 200 || third.str("execution", "id") != second.str("execution", "id") {
			t.Fatalf("after a succeeded run: %d %s, want 200 and that run", third.status, third.raw)
		}
		clock.Advance(2 * time.Hour)
		fourth, _ := run("checkout", "o-1")
		if fourth.status != 201 || fourth.str("execution", "id") == second.str("execution", "id") {
			t.Fatalf("after the window: %d %s, want a new run", fourth.status, fourth.raw)
		}
		pay.set(func(p *payments) { p.status = 422 })
		strictFailed, _ := run("strict", "o-9")
		pay.set(func(p *payments) { p.status = 0 })
		if again, _ := run("strict", "o-9"); again.status != 200 || again.str("execution", "id") != strictFailed.str("execution", "id") {
			t.Fatalf("REJECT_DUPLICATE after a failure: %d %s, want the failed run", again.status, again.raw)
		}
	})
}

// clock is the real time moved on by Advance: the service's leases and
// backoffs keep running while a test jumps past a window.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func newClock() *clock { return &clock{} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// A payload that does not match the ENTRY_POINT's inputSchema starts no
// run: 422, saying where.
func TestTriggerInputSchema(t *testing.T) {
	t.Parallel()
	e := start(t, openSQLite)
	e.putWorkflow("checkout", checkoutFlow("https://pay.example", "https://ship.example",
		`{"idempotencyFields": "order.id", "inputSchema": {"type": "object", "required": ["order"],
		  "properties": {"order": {"type": "object", "required": ["id", "amount"], "properties": {"amount": {"type": "integer", "minimum": 1}}}}}}`))
	bad := e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": -5}}`)
	e.want(bad, 422, "trigger-invalid")
	if !strings.Contains(bad.str("detail"), "/order/amount") {
		t.Fatalf("detail %q, want the field's path", bad.str("detail"))
	}
	e.want(e.call("tok-orders", "POST", "/v1/workflows/checkout/test-run", "", `{"order": {"id": "o-1"}}`), 422, "trigger-invalid")
	e.want(e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 5}}`), 201, "")
}

// Read-Verify-Write composed from steps, the pattern for targets without
// keys: a
// GET gateway whose 404 is data (clientErrorMode: complete), a condition
// on the edges, and the POST only when the read found nothing. A second
// run of the same order reads the shipment and ends without writing.
func TestReadVerifyWriteComposed(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		ship, shipURL := newShipping(t)
		e := start(&serve.Config{})
		e.putWorkflow("ship", `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id", "reusePolicy": "ALLOW_DUPLICATE"}},
  {"id": "check", "type": "GATEWAY", "config": {"method": "GET", "url": "= '`+shipURL+`/shipments/' & payload.order.id", "clientErrorMode": "complete"}},
  {"id": "create", "type": "GATEWAY", "config": {"method": "POST", "url": "`+shipURL+`/shipments", "body": {"order": "= payload.order.id"}}},
  {"id": "done", "type": "END"}],
 "edges": [
  {"from": "start", "to": "check"},
  {"from": "check", "to": "done", "condition": "= steps.check.status = 200"},
  {"from": "check", "to": "create"},
  {"from": "create", "to": "done"}]}`)
		for i, want := range [][]string{
			{"check COMPLETED ", "create COMPLETED "},
			{"check COMPLETED "},
		} {
			a := e.call("tok-orders", "POST", "/v1/workflows/ship/trigger", "", `{"order": {"id": "o-1"}}`)
			e.want(a, 201, "")
			if end := e.settled("tok-orders", a.str("execution", "id")); end.str("status") != "SUCCEEDED" {
				t.Fatalf("run %d: %s", i+1, end.raw)
			}
			if got := e.steps("tok-orders", a.str("execution", "id")); !slices.Equal(got, want) {
				t.Fatalf("run %d's steps %v, want %v", i+1, got, want)
			}
		}
		if orders, shipments, posts := ship.count(); orders != 1 || shipments != 1 || posts != 1 {
			t.Fatalf("shipping: %d orders, %d shipments, %d posts; want one each", orders, shipments, posts)
		}
	})
}
