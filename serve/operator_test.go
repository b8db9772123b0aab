package serve_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/serve"
)

// The orphan operation: the target did the work and its answer was lost.
// The retry sends the same key to the payments API, which answers with
// the first charge; the legacy shipping API is read first (verify), and
// the shipment it finds is the step's result. One effect each.
func TestOrphanOperations(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		ship, shipURL := newShipping(t)
		pay.set(func(p *payments) { p.drop = true })
		ship.set(func(s *shipping) { s.drop = true })
		e := start(&serve.Config{})
		e.putWorkflow("checkout", checkoutFlow(payURL, shipURL, ""))
		a := e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 5}}`)
		e.want(a, 201, "")
		if end := e.settled("tok-orders", a.str("execution", "id")); end.str("status") != "SUCCEEDED" {
			t.Fatalf("execution %s", end.raw)
		}
		if keys, charges, requests := pay.effects(); keys != 1 || charges != 1 || requests != 2 {
			t.Fatalf("payments: %d keys, %d charges, %d requests; want 1, 1 and 2 (the retry with the same key)", keys, charges, requests)
		}
		if orders, shipments, posts := ship.count(); orders != 1 || shipments != 1 || posts != 1 {
			t.Fatalf("shipping: %d orders, %d shipments, %d posts; want 1, 1 and 1 (the retry verified first)", orders, shipments, posts)
		}
		steps := e.call("tok-orders", "GET", "/v1/executions/"+a.str("execution", "id")+"/steps", "", "")
		if !strings.Contains(steps.raw, `"verified":true`) {
			t.Fatalf("the ship step's output does not say it was verified: %s", steps.raw)
		}
	})
}

// An operator's Retry resumes the same execution at its failed step with
// the same key, and never runs a completed step again; a Start over is a
// new execution whose keys are the first run's, so the targets absorb it;
// a trigger of the order then gets the new run. Both are recorded with
// who asked.
func TestOperatorRetryAndStartOver(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		ship, shipURL := newShipping(t)
		e := start(&serve.Config{})
		def := checkoutFlow(payURL, shipURL, "")
		e.putWorkflow("checkout", def)
		ship.set(func(s *shipping) { s.status = http.StatusUnprocessableEntity }) // the address is refused
		a := e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 5}}`)
		id := a.str("execution", "id")
		if end := e.settled("tok-orders", id); end.str("status") != "FAILED" {
			t.Fatalf("execution %s, want FAILED at ship", end.raw)
		}
		ship.set(func(s *shipping) { s.status = 0 }) // fixed
		operator := func(method, path, key, body string) answer {
			req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer tok-orders")
			req.Header.Set("Idem-Operator", "alice")
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
			}
			a, err := e.do(req)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		retried := operator("POST", "/v1/executions/"+id+"/retry", "", "")
		if retried.status != 200 || retried.str("id") != id || retried.str("status") != "QUEUED" || retried.body["error"] != nil {
			t.Fatalf("retry: %d %s", retried.status, retried.raw)
		}
		if end := e.settled("tok-orders", id); end.str("status") != "SUCCEEDED" {
			t.Fatalf("after the retry: %s", end.raw)
		}
		if want := []string{"charge COMPLETED charge-o-1", "ship FAILED ", "ship COMPLETED "}; !slices.Equal(e.steps("tok-orders", id), want) {
			t.Fatalf("steps %v, want %v", e.steps("tok-orders", id), want)
		}
		if _, charges, requests := pay.effects(); charges != 1 || requests != 1 {
			t.Fatalf("payments after the retry: %d charges, %d requests; the completed charge must not run again", charges, requests)
		}
		e.want(operator("POST", "/v1/executions/"+id+"/retry", "", ""), 409, "illegal-transition")
		e.want(operator("POST", "/v1/executions/"+id+"/start-over", "", `{}`), 400, "idempotency-key-missing")
		e.want(operator("POST", "/v1/executions/"+id+"/start-over", "so-1", `{"version": "newest"}`), 400, "request-invalid")

		e.want(e.call("tok-orders", "PUT", "/v1/workflows/checkout", "", strings.Replace(def, `"maxAttempts": 4`, `"maxAttempts": 5`, 1)), 201, "")
		over := operator("POST", "/v1/executions/"+id+"/start-over", "so-2", `{"version": "latest"}`)
		e.want(over, 201, "")
		newID := over.str("execution", "id")
		if newID == id || over.body["version"] != 2.0 || over.str("execution", "status") != "QUEUED" {
			t.Fatalf("start over: %s", over.raw)
		}
		if replay := operator("POST", "/v1/executions/"+id+"/start-over", "so-2", `{"version": "latest"}`); replay.str("execution", "id") != newID ||
			replay.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a retried click: %d %s, want the same new run", replay.status, replay.raw)
		}
		if end := e.settled("tok-orders", newID); end.str("status") != "SUCCEEDED" || end.body["number"] != 2.0 {
			t.Fatalf("the new run: %s", end.raw)
		}
		if _, charges, requests := pay.effects(); charges != 1 || requests != 2 {
			t.Fatalf("payments after the start over: %d charges, %d requests; want 1 and 2", charges, requests)
		}
		if _, shipments, posts := ship.count(); shipments != 1 || posts != 2 {
			t.Fatalf("shipping after the start over: %d shipments, %d posts; want 1 and 2 (the refused one, then one)", shipments, posts)
		}
		again := e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 5}}`)
		if again.status != 200 || again.str("execution", "id") != newID {
			t.Fatalf("a trigger of the order after the start over: %d %s, want the new run", again.status, again.raw)
		}
		evs := e.call("tok-orders", "GET", "/v1/executions/"+id+"/events", "", "")
		if strings.Count(evs.raw, "idem.execution.operator") != 2 || !strings.Contains(evs.raw, `"actor":"app:orders operator:alice"`) ||
			!strings.Contains(evs.raw, `"action":"start-over:`+newID+`"`) {
			t.Fatalf("the audit in the events: %s", evs.raw)
		}
	})
}
