package workflow_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/workflow"
)

// checkout charges an order, with a key derived from the order's id,
// between an ENTRY_POINT and an END.
func checkout() map[string]any {
	return map[string]any{
		"vertices": []any{
			map[string]any{"id": "start", "type": "ENTRY_POINT", "config": map[string]any{"idempotencyFields": "order.id"}},
			map[string]any{"id": "charge", "type": "GATEWAY", "config": map[string]any{
				"method": "POST", "url": "https://api.payments.example/v1/charges",
				"headers": map[string]any{
					"Idempotency-Key": "= 'charge-' & payload.order.id",
					"Authorization":   "Bearer {{ secrets.PAYMENTS_KEY }}",
				},
				"body": map[string]any{"amount": "= payload.order.amount", "currency": "EUR"},
			}},
			map[string]any{"id": "done", "type": "END"},
		},
		"edges": []any{
			map[string]any{"from": "start", "to": "charge"},
			map[string]any{"from": "charge", "to": "done"},
		},
	}
}

func vertex(d map[string]any, i int) map[string]any { return d["vertices"].([]any)[i].(map[string]any) }
func config(d map[string]any, i int) map[string]any { return vertex(d, i)["config"].(map[string]any) }
func addVertex(d map[string]any, v map[string]any)  { d["vertices"] = append(d["vertices"].([]any), v) }
func addEdge(d map[string]any, from, to, cond string) {
	e := map[string]any{"from": from, "to": to}
	if cond != "" {
		e["condition"] = cond
	}
	d["edges"] = append(d["edges"].([]any), e)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func compile(t *testing.T, d map[string]any, opts *workflow.Options) ([]workflow.Problem, error) {
	t.Helper()
	def, err := workflow.Parse(mustJSON(t, d))
	if err != nil {
		return nil, err
	}
	_, warns, err := workflow.Compile(def, opts)
	return warns, err
}

func TestCheckoutCompiles(t *testing.T) {
	warns, err := compile(t, checkout(), &workflow.Options{Secrets: []string{"PAYMENTS_KEY"}})
	if err != nil || len(warns) != 0 {
		t.Fatalf("the checkout: %v, warnings %v", err, warns)
	}
	w, _, _, err := workflow.Load(mustJSON(t, checkout()), nil)
	if err != nil || w.Window() != workflow.DefaultWindow || w.Reuse() != workflow.AllowDuplicateFailedOnly {
		t.Fatalf("defaults: %v %v %v", w.Window(), w.Reuse(), err)
	}
	if n, b := w.Retry("charge"); n != workflow.DefaultMaxAttempts || b != workflow.DefaultBackoff {
		t.Fatalf("charge's retry: %d %v", n, b)
	}
	d := checkout()
	config(d, 0)["idempotencyWindow"], config(d, 0)["reusePolicy"] = "1h", "REJECT_DUPLICATE"
	if w, _, _, err = workflow.Load(mustJSON(t, d), nil); err != nil || w.Window() != time.Hour || w.Reuse() != workflow.RejectDuplicate {
		t.Fatalf("set: %v %v %v", w.Window(), w.Reuse(), err)
	}
}

// Every bad definition is refused with the path of the field at fault and
// why; the other problems of the same definition are listed with it.
func TestInvalidDefinitions(t *testing.T) {
	opts := &workflow.Options{Secrets: []string{"PAYMENTS_KEY"}, Connections: []string{"payments"}}
	for _, c := range []struct {
		name, path, reason string
		edit               func(d map[string]any)
	}{
		{"UnknownVertexType", "/vertices/1/type", `unknown vertex type "LAMBDA"`, func(d map[string]any) { vertex(d, 1)["type"] = "LAMBDA" }},
		{"WebhookSecretUndefined", "/vertices/0/config/webhook/secrets/0", `no secret "HOOK"`, func(d map[string]any) {
			config(d, 0)["webhook"] = map[string]any{"scheme": "standard", "secrets": []any{"HOOK"}}
		}},
		{"WebhookScheme", "/vertices/0/config/webhook/scheme", `"hmac"`, func(d map[string]any) {
			config(d, 0)["webhook"] = map[string]any{"scheme": "hmac", "secrets": []any{"PAYMENTS_KEY"}}
		}},
		{"BadInputSchema", "/vertices/0/config/inputSchema", "not a valid JSON Schema", func(d map[string]any) {
			config(d, 0)["inputSchema"] = map[string]any{"type": "strng"}
		}},
		{"InputSchemaReadsAFile", "/vertices/0/config/inputSchema", "refers to nothing outside itself", func(d map[string]any) {
			config(d, 0)["inputSchema"] = map[string]any{"$ref": "file:///etc/passwd"}
		}},
		{"BadCron", "/vertices/0/config/schedule/cron", `"every hour"`, func(d map[string]any) { config(d, 0)["schedule"] = map[string]any{"cron": "every hour"} }},
		{"BadCatchUp", "/vertices/0/config/schedule/catchUp", `"some"`, func(d map[string]any) {
			config(d, 0)["schedule"] = map[string]any{"cron": "@hourly", "catchUp": "some"}
		}},
		{"WindowTooShort", "/vertices/0/config/idempotencyWindow", "a duration from 1m0s", func(d map[string]any) { config(d, 0)["idempotencyWindow"] = "5s" }},
		{"UnknownReusePolicy", "/vertices/0/config/reusePolicy", `"TERMINATE_IF_RUNNING"`, func(d map[string]any) { config(d, 0)["reusePolicy"] = "TERMINATE_IF_RUNNING" }},
		{"DanglingEdge", "/edges/1/to", `no vertex "finish"`, func(d map[string]any) { d["edges"].([]any)[1].(map[string]any)["to"] = "finish" }},
		{"DanglingEdgeFrom", "/edges/2/from", `no vertex "ghost"`, func(d map[string]any) { addEdge(d, "ghost", "done", "") }},
		{"CycleWithoutExit", "/vertices/3", "cycle without exit", func(d map[string]any) {
			addVertex(d, map[string]any{"id": "poll", "type": "TRANSFORM", "config": map[string]any{"output": map[string]any{"n": 1}}})
			addEdge(d, "charge", "poll", "= payload.order.slow")
			d["edges"].([]any)[1], d["edges"].([]any)[2] = d["edges"].([]any)[2], d["edges"].([]any)[1]
			addEdge(d, "poll", "poll", "")
		}},
		{"KeyReadsTheClock", "/vertices/1/config/headers/Idempotency-Key", "not deterministic", func(d map[string]any) {
			config(d, 1)["headers"].(map[string]any)["Idempotency-Key"] = "= 'charge-' & $now()"
		}},
		{"KeyReadsRandomness", "/vertices/1/config/headers/Idempotency-Key", "not deterministic", func(d map[string]any) {
			config(d, 1)["headers"].(map[string]any)["Idempotency-Key"] = "= 'charge-' & $random()"
		}},
		{"KeyIsALiteral", "/vertices/1/config/headers/Idempotency-Key", "literal", func(d map[string]any) {
			config(d, 1)["headers"].(map[string]any)["Idempotency-Key"] = "charge-1"
		}},
		{"KeyCarriesASecret", "/vertices/1/config/headers/Idempotency-Key", "must not carry a secret", func(d map[string]any) {
			config(d, 1)["headers"].(map[string]any)["Idempotency-Key"] = "{{ secrets.PAYMENTS_KEY }}"
		}},
		{"BodyReadsTheClock", "/vertices/1/config/body/at", "not deterministic", func(d map[string]any) {
			config(d, 1)["body"].(map[string]any)["at"] = "= $millis()"
		}},
		{"ConditionReadsRandomness", "/edges/1/condition", "not deterministic", func(d map[string]any) {
			d["edges"].([]any)[1].(map[string]any)["condition"] = "= $random() > 0.5"
		}},
		{"ConditionIsNotAnExpression", "/edges/1/condition", "an expression", func(d map[string]any) {
			d["edges"].([]any)[1].(map[string]any)["condition"] = "payload.ok"
		}},
		{"UndefinedSecret", "/vertices/1/config/headers/Authorization", `no secret "STRIPE"`, func(d map[string]any) {
			config(d, 1)["headers"].(map[string]any)["Authorization"] = "Bearer {{ secrets.STRIPE }}"
		}},
		{"SecretInABody", "/vertices/1/config/body/token", "secrets go in headers only", func(d map[string]any) {
			config(d, 1)["body"].(map[string]any)["token"] = "{{ secrets.PAYMENTS_KEY }}"
		}},
		{"SecretInAURL", "/vertices/1/config/url", "never in a url", func(d map[string]any) {
			config(d, 1)["url"] = "https://x.example/?k={{ secrets.PAYMENTS_KEY }}"
		}},
		{"SecretInAnExpression", "/vertices/1/config/headers/Authorization", "cannot read secrets", func(d map[string]any) {
			config(d, 1)["headers"].(map[string]any)["Authorization"] = "= 'Bearer {{ secrets.PAYMENTS_KEY }}'"
		}},
		{"NoEntryPoint", "/vertices", "no ENTRY_POINT", func(d map[string]any) {
			vertex(d, 0)["type"] = "TRANSFORM"
			vertex(d, 0)["config"] = map[string]any{"output": 1}
		}},
		{"TwoEntryPoints", "/vertices/3/type", "a second ENTRY_POINT", func(d map[string]any) {
			addVertex(d, map[string]any{"id": "again", "type": "ENTRY_POINT"})
		}},
		{"NoEnd", "/vertices", "no END", func(d map[string]any) {
			vertex(d, 2)["type"] = "TRANSFORM"
			vertex(d, 2)["config"] = map[string]any{"output": 1}
		}},
		{"EdgeIntoTheEntryPoint", "/edges/2/to", "only a trigger enters it", func(d map[string]any) { addEdge(d, "charge", "start", "= false") }},
		{"EdgeOutOfAnEnd", "/edges/2/from", "nothing leaves it", func(d map[string]any) { addEdge(d, "done", "charge", "") }},
		{"Unreachable", "/vertices/3", "not reached from the ENTRY_POINT", func(d map[string]any) {
			addVertex(d, map[string]any{"id": "orphan", "type": "TRANSFORM", "config": map[string]any{"output": 1}})
			addEdge(d, "orphan", "done", "")
		}},
		{"LeadsNowhere", "/vertices/3", "leads nowhere", func(d map[string]any) {
			addVertex(d, map[string]any{"id": "dead-end", "type": "TRANSFORM", "config": map[string]any{"output": 1}})
			addEdge(d, "start", "dead-end", "= payload.x")
			d["edges"].([]any)[0], d["edges"].([]any)[2] = d["edges"].([]any)[2], d["edges"].([]any)[0]
		}},
		{"BadIdempotencyField", "/vertices/0/config/idempotencyFields/1", `"order..id"`, func(d map[string]any) {
			config(d, 0)["idempotencyFields"] = []any{"customer", "order..id"}
		}},
		{"UnknownConfigField", "/vertices/1/config/urll", "unknown field", func(d map[string]any) { config(d, 1)["urll"] = "x" }},
		{"UnknownTopField", "/vertx", "unknown field", func(d map[string]any) { d["vertx"] = []any{} }},
		{"DuplicateID", "/vertices/2/id", "an earlier vertex", func(d map[string]any) { vertex(d, 2)["id"] = "charge" }},
		{"BadID", "/vertices/1/id", "lowercase", func(d map[string]any) { vertex(d, 1)["id"] = "Charge Card" }},
		{"BadMethod", "/vertices/1/config/method", `"FETCH"`, func(d map[string]any) { config(d, 1)["method"] = "FETCH" }},
		{"RelativeURL", "/vertices/1/config/url", "absolute http or https", func(d map[string]any) { config(d, 1)["url"] = "/v1/charges" }},
		{"URLAndConnection", "/vertices/1/config/url", "not both", func(d map[string]any) {
			config(d, 1)["connection"] = "payments"
			config(d, 1)["path"] = "/v1/charges"
		}},
		{"UnknownConnection", "/vertices/1/config/connection", `no connection "shipping"`, func(d map[string]any) {
			delete(config(d, 1), "url")
			config(d, 1)["connection"] = "shipping"
			config(d, 1)["path"] = "/v1/shipments"
		}},
		{"ConnectionWithoutPath", "/vertices/1/config/path", "needs the path", func(d map[string]any) {
			delete(config(d, 1), "url")
			config(d, 1)["connection"] = "payments"
		}},
		{"BadClientErrorMode", "/vertices/1/config/clientErrorMode", `"ignore"`, func(d map[string]any) { config(d, 1)["clientErrorMode"] = "ignore" }},
		{"BadOnConflict", "/vertices/1/config/onConflict", `"skip"`, func(d map[string]any) { config(d, 1)["onConflict"] = "skip" }},
		{"TimeoutTooLong", "/vertices/1/config/timeout", `"1h"`, func(d map[string]any) { config(d, 1)["timeout"] = "1h" }},
		{"NoAttempts", "/vertices/1/config/retry/maxAttempts", "1 to", func(d map[string]any) { config(d, 1)["retry"] = map[string]any{"maxAttempts": 0} }},
		{"VerifyFoundIsNotAnExpression", "/vertices/1/config/verify/found", "an expression", func(d map[string]any) {
			config(d, 1)["verify"] = map[string]any{"url": "https://api.payments.example/v1/charges?order=1", "found": "yes"}
		}},
		{"TransformWithoutOutput", "/vertices/3/config/output", "needs an output", func(d map[string]any) {
			addVertex(d, map[string]any{"id": "shape", "type": "TRANSFORM"})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := checkout()
			c.edit(d)
			_, err := compile(t, d, opts)
			var inv *workflow.InvalidError
			if !errors.Is(err, workflow.ErrInvalid) || !errors.As(err, &inv) {
				t.Fatalf("accepted, or not an InvalidError: %v", err)
			}
			for _, p := range inv.Problems {
				if p.Path == c.path && strings.Contains(p.Reason, c.reason) {
					return
				}
			}
			t.Fatalf("no problem at %s saying %q: %v", c.path, c.reason, inv.Problems)
		})
	}
}

// Warnings do not refuse a definition: a POST with no key and no verify, an
// edge that is never taken, a vertex whose every edge has a condition.
func TestWarnings(t *testing.T) {
	d := checkout()
	delete(config(d, 1)["headers"].(map[string]any), "Idempotency-Key")
	addEdge(d, "charge", "done", "= payload.again")
	addVertex(d, map[string]any{"id": "audit", "type": "TRANSFORM", "config": map[string]any{"output": 1}})
	addEdge(d, "charge", "audit", "")
	addEdge(d, "audit", "done", "= payload.ok")
	warns, err := compile(t, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/vertices/1/config/headers": "without an Idempotency-Key", "/edges/2": "never taken",
		"/vertices/3": "every edge from \"audit\""}
	for _, w := range warns {
		if strings.Contains(w.Reason, want[w.Path]) {
			delete(want, w.Path)
		}
	}
	if len(want) != 0 {
		t.Fatalf("warnings %v; missing %v", warns, want)
	}
}

// A key without a leading literal takes the vertex's id as its operation.
func TestKeyOperationFromTheVertex(t *testing.T) {
	d := checkout()
	config(d, 1)["headers"].(map[string]any)["Idempotency-Key"] = "= payload.order.id"
	if _, err := compile(t, d, nil); err != nil {
		t.Fatal(err)
	}
}

// YAML is the same structure.
func TestYAML(t *testing.T) {
	def, err := workflow.Parse([]byte(`# a flow-style definition
vertices: [{id: start, type: ENTRY_POINT}, {id: ship, type: TRANSFORM, config: {output: {order: "= payload.order.id"}}}, {id: done, type: END}]
edges: [{from: start, to: ship}, {from: ship, to: done, condition: "= steps.ship.order != null"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := workflow.Compile(def, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := workflow.Parse([]byte("vertices: [")); !errors.Is(err, workflow.ErrInvalid) {
		t.Fatalf("bad YAML: %v", err)
	}
}
