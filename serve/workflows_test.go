package serve_test

import (
	"strings"
	"testing"
)

const checkoutJSON = `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id"}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "https://api.payments.example/v1/charges",
    "headers": {"Idempotency-Key": "= 'charge-' & payload.order.id"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "done"}]}`

// The same definition in YAML, its keys in another order.
const checkoutYAML = `
edges:
  - {to: charge, from: start}
  - {from: charge, to: done}
vertices:
  - {type: ENTRY_POINT, id: start, config: {idempotencyFields: order.id}}
  - id: charge
    type: GATEWAY
    config:
      url: https://api.payments.example/v1/charges
      method: POST
      headers: {Idempotency-Key: "= 'charge-' & payload.order.id"}
  - {id: done, type: END}
`

// Workflow definitions are checked, versioned per application, and the
// same definition again (in JSON or YAML, in any key order) is no new
// version.
func TestWorkflowDefinitions(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) *env{
		"SQLite":   func(t *testing.T) *env { return start(t, openSQLite) },
		"Postgres": func(t *testing.T) *env { return start(t, openPostgres) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := open(t)
			put := func(token, name, body string) answer { return e.call(token, "PUT", "/v1/workflows/"+name, "", body) }
			first := put("tok-orders", "checkout", checkoutJSON)
			e.want(first, 201, "")
			if first.body["version"] != 1.0 || first.str("name") != "checkout" {
				t.Fatalf("first put: %s", first.raw)
			}
			if again := put("tok-orders", "checkout", checkoutYAML); again.status != 200 || again.body["version"] != 1.0 {
				t.Fatalf("the same definition in YAML: %d %s, want 200 and version 1", again.status, again.raw)
			}
			changed := strings.Replace(checkoutJSON, "v1/charges", "v2/charges", 1)
			if second := put("tok-orders", "checkout", changed); second.status != 201 || second.body["version"] != 2.0 {
				t.Fatalf("a changed definition: %d %s", second.status, second.raw)
			}
			latest := e.call("tok-orders", "GET", "/v1/workflows/checkout", "", "")
			e.want(latest, 200, "")
			if latest.body["version"] != 2.0 || !strings.Contains(latest.raw, "v2/charges") || latest.body["vertices"] == nil {
				t.Fatalf("latest: %s", latest.raw)
			}
			if v1 := e.call("tok-orders", "GET", "/v1/workflows/checkout?version=1", "", ""); v1.body["version"] != 1.0 || !strings.Contains(v1.raw, "v1/charges") {
				t.Fatalf("version 1: %s", v1.raw)
			}
			// Another application's workflows are not its own.
			e.want(e.call("tok-billing", "GET", "/v1/workflows/checkout", "", ""), 404, "not-found")
			if b := put("tok-billing", "checkout", changed); b.body["version"] != 1.0 {
				t.Fatalf("billing's first checkout: %s", b.raw)
			}
			// Warnings are answered, and do not refuse a definition.
			nokey := put("tok-orders", "nokey", strings.Replace(checkoutJSON, `"headers": {"Idempotency-Key": "= 'charge-' & payload.order.id"}`, `"headers": {}`, 1))
			if ws, _ := nokey.body["warnings"].([]any); nokey.status != 201 || len(ws) != 1 || ws[0].(map[string]any)["path"] != "/vertices/1/config/headers" {
				t.Fatalf("a POST without a key: %d %s", nokey.status, nokey.raw)
			}
			// Bad requests change nothing.
			bad := put("tok-orders", "checkout", strings.Replace(checkoutJSON, `payload.order.id"`, `$now()"`, 1))
			e.want(bad, 422, "definition-invalid")
			errs, _ := bad.body["errors"].([]any)
			if len(errs) != 1 || errs[0].(map[string]any)["path"] != "/vertices/1/config/headers/Idempotency-Key" {
				t.Fatalf("errors %s", bad.raw)
			}
			e.want(put("tok-orders", "checkout", `{"vertices": [`), 422, "definition-invalid")
			e.want(put("tok-orders", "Check Out", checkoutJSON), 400, "request-invalid")
			e.want(e.call("tok-orders", "GET", "/v1/workflows/checkout?version=x", "", ""), 400, "request-invalid")
			e.want(e.call("tok-orders", "GET", "/v1/workflows/checkout?version=9", "", ""), 404, "not-found")
			e.want(put("", "checkout", checkoutJSON), 401, "unauthorized")
			if l := e.call("tok-orders", "GET", "/v1/workflows/checkout", "", ""); l.body["version"] != 2.0 {
				t.Fatalf("after the bad requests: %s", l.raw)
			}
		})
	}
}
