package serve_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/serve"
)

// An idempotency checklist for workflows, one test per item: keys never
// from time, keys scoped by operation, 409 is done, duplicate payloads
// decided beforehand, the key in the reusable gateway configuration.

// 1. Never use timestamps: a key that reads the clock or randomness is
// refused when the definition is stored, at its path.
func TestChecklist1KeysNeverFromTime(t *testing.T) {
	t.Parallel()
	e := start(t, openSQLite)
	for _, expr := range []string{"$now()", "$millis()", "$random()", "$uuid()"} {
		def := strings.Replace(checkoutFlow("https://pay.example", "https://ship.example", ""), "payload.order.id\"}", expr+"\"}", 1)
		a := e.call("tok-orders", "PUT", "/v1/workflows/checkout", "", def)
		e.want(a, 422, "definition-invalid")
		if !strings.Contains(a.raw, `"path":"/vertices/1/config/headers/Idempotency-Key"`) {
			t.Fatalf("%s: %s, want the key's path", expr, a.raw)
		}
	}
}

// 2. Scope keys by operation: charge and ship keyed on the same order get
// different keys, from a connection's template that names no operation.
func TestChecklist2KeysScopedByOperation(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		e := start(&serve.Config{})
		e.want(e.call("tok-orders", "PUT", "/v1/connections/payments", "", `{"baseUrl": "`+payURL+`", "idempotencyKey": "= payload.order.id"}`), 201, "")
		e.putWorkflow("order", `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id"}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "connection": "payments", "path": "/v1/charges"}},
  {"id": "ship", "type": "GATEWAY", "config": {"method": "POST", "connection": "payments", "path": "/v1/shipments"}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "ship"}, {"from": "ship", "to": "done"}]}`)
		a := e.call("tok-orders", "POST", "/v1/workflows/order/trigger", "", `{"order": {"id": "o-1"}}`)
		e.want(a, 201, "")
		e.settled("tok-orders", a.str("execution", "id"))
		if got := e.steps("tok-orders", a.str("execution", "id")); len(got) != 2 || got[0] != "charge COMPLETED charge-o-1" || got[1] != "ship COMPLETED ship-o-1" {
			t.Fatalf("steps %v, want charge-o-1 and ship-o-1", got)
		}
		if keys, _, _ := pay.effects(); keys != 2 {
			t.Fatalf("the target saw %d keys, want 2", keys)
		}
	})
}

// 3. Handle 409: a target that has seen the key answers 409, and the step
// is done; with onConflict: retry it is retried, then fails.
func TestChecklist3ConflictIsDone(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		_, shipURL := newShipping(t)
		pay.set(func(p *payments) { p.status = http.StatusConflict })
		e := start(&serve.Config{})
		e.putWorkflow("checkout", checkoutFlow(payURL, shipURL, ""))
		e.putWorkflow("strict", strings.Replace(checkoutFlow(payURL, shipURL, ""), `"timeout": "5s"`, `"onConflict": "retry", "timeout": "5s"`, 1))
		a := e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 5}}`)
		if end := e.settled("tok-orders", a.str("execution", "id")); end.str("status") != "SUCCEEDED" {
			t.Fatalf("409 by default: %s", end.raw)
		}
		b := e.call("tok-orders", "POST", "/v1/workflows/strict/trigger", "", `{"order": {"id": "o-2", "amount": 5}}`)
		end := e.settled("tok-orders", b.str("execution", "id"))
		if end.str("status") != "FAILED" || !strings.Contains(end.str("error"), "attempt 4 of 4") {
			t.Fatalf("409 with onConflict retry: %s", end.raw)
		}
	})
}

// 4. Decide on duplicate payloads beforehand: two real orders with the
// same body are one run unless idempotencyFields or a clientIdempotencyId
// tell them apart; forceNewExecution exists on test runs only.
func TestChecklist4DuplicatePayloads(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		_, payURL := newPayments(t)
		_, shipURL := newShipping(t)
		e := start(&serve.Config{})
		e.putWorkflow("bycontent", checkoutFlow(payURL, shipURL, `{}`))
		body := `{"order": {"id": "o-1", "amount": 5}}`
		first := e.call("tok-orders", "POST", "/v1/workflows/bycontent/trigger", "", body)
		second := e.call("tok-orders", "POST", "/v1/workflows/bycontent/trigger", "", body)
		if first.status != 201 || second.status != 200 || second.str("execution", "id") != first.str("execution", "id") {
			t.Fatalf("the same body twice: %d, %d %s; want the second merged", first.status, second.status, second.raw)
		}
		a := e.call("tok-orders", "POST", "/v1/workflows/bycontent/trigger?clientIdempotencyId=cart-1", "", body)
		b := e.call("tok-orders", "POST", "/v1/workflows/bycontent/trigger?clientIdempotencyId=cart-2", "", body)
		if a.status != 201 || b.status != 201 || a.str("execution", "id") == b.str("execution", "id") {
			t.Fatalf("two clientIdempotencyIds: %d %d, want two runs", a.status, b.status)
		}
		e.want(e.call("tok-orders", "POST", "/v1/workflows/bycontent/trigger?forceNewExecution=true", "", body), 400, "force-new-execution-not-allowed")
		e.want(e.call("tok-orders", "POST", "/v1/workflows/bycontent/test-run?forceNewExecution=true", "", body), 201, "")
	})
}

// 5. Make the key part of the template: a step on a connection sends the
// connection's key without writing one; a workflow that names a
// connection the application lacks is refused at its path.
func TestChecklist5KeyInTheConnection(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		pay.set(func(p *payments) { p.drop = true }) // the first answer is lost: the retry must carry the same key
		e := start(&serve.Config{})
		def := `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id"}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "connection": "payments", "path": "/v1/charges", "retry": {"maxAttempts": 3, "backoff": "10ms"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "done"}]}`
		missing := e.call("tok-orders", "PUT", "/v1/workflows/pay", "", def)
		e.want(missing, 422, "definition-invalid")
		if !strings.Contains(missing.raw, `"path":"/vertices/1/config/connection"`) {
			t.Fatalf("a missing connection: %s", missing.raw)
		}
		conn := e.call("tok-orders", "PUT", "/v1/connections/payments", "", "baseUrl: "+payURL+"\nidempotencyKey: \"= payload.order.id\"\n")
		e.want(conn, 201, "")
		if again := e.call("tok-orders", "PUT", "/v1/connections/payments", "", `{"idempotencyKey": "= payload.order.id", "baseUrl": "`+payURL+`"}`); again.status != 200 {
			t.Fatalf("the same connection in JSON: %d %s", again.status, again.raw)
		}
		if got := e.call("tok-orders", "GET", "/v1/connections/payments", "", ""); got.str("baseUrl") != payURL || got.body["version"] != 1.0 {
			t.Fatalf("GET: %s", got.raw)
		}
		e.want(e.call("tok-billing", "GET", "/v1/connections/payments", "", ""), 404, "not-found")
		e.putWorkflow("pay", def)
		a := e.call("tok-orders", "POST", "/v1/workflows/pay/trigger", "", `{"order": {"id": "o-7"}}`)
		if end := e.settled("tok-orders", a.str("execution", "id")); end.str("status") != "SUCCEEDED" {
			t.Fatalf("execution %s", end.raw)
		}
		if keys, charges, requests := pay.effects(); keys != 1 || charges != 1 || requests != 2 {
			t.Fatalf("payments: %d keys, %d charges, %d requests; want one charge under one key, sent twice", keys, charges, requests)
		}
		if got := e.steps("tok-orders", a.str("execution", "id")); len(got) != 1 || got[0] != "charge COMPLETED charge-o-7" {
			t.Fatalf("steps %v", got)
		}
	})
}
