package serve_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/serve"
)

// An application's secrets are set, listed by name and deleted; a
// definition may name only the ones it has; a run's requests carry their
// values, and nothing the service shows (steps, events, definitions, the
// list) ever does.
func TestSecrets(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		var mu sync.Mutex
		var auth []string
		target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			auth = append(auth, r.Header.Get("Authorization"))
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		}))
		defer target.Close()
		e := start(&serve.Config{})
		def := `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id"}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "` + target.URL + `/charges",
    "headers": {"Idempotency-Key": "= 'charge-' & payload.order.id", "Authorization": "Bearer {{ secrets.PAYMENTS_KEY }}"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "done"}]}`
		undefined := e.call("tok-orders", "PUT", "/v1/workflows/pay", "", def)
		e.want(undefined, 422, "definition-invalid")
		if !strings.Contains(undefined.raw, `"path":"/vertices/1/config/headers/Authorization"`) || !strings.Contains(undefined.raw, `no secret \"PAYMENTS_KEY\"`) {
			t.Fatalf("a definition naming a secret the application lacks: %s", undefined.raw)
		}
		const value = "sk_live_0123456789abcdef"
		e.want(e.call("tok-orders", "PUT", "/v1/secrets/PAYMENTS_KEY", "", `{"value": "`+value+`"}`), 204, "")
		e.want(e.call("tok-orders", "PUT", "/v1/secrets/bad-name", "", `{"value": "x"}`), 400, "request-invalid")
		e.want(e.call("tok-orders", "PUT", "/v1/secrets/EMPTY", "", `{"value": ""}`), 400, "request-invalid")
		list := e.call("tok-orders", "GET", "/v1/secrets", "", "")
		if list.status != 200 || list.raw != `{"items":[{"name":"PAYMENTS_KEY"}]}`+"\n" {
			t.Fatalf("list: %d %s", list.status, list.raw)
		}
		if other := e.call("tok-billing", "GET", "/v1/secrets", "", ""); other.raw != `{"items":[]}`+"\n" {
			t.Fatalf("another application's list: %s", other.raw)
		}
		e.putWorkflow("pay", def)
		a := e.call("tok-orders", "POST", "/v1/workflows/pay/trigger", "", `{"order": {"id": "o-1"}}`)
		id := a.str("execution", "id")
		if end := e.settled("tok-orders", id); end.str("status") != "SUCCEEDED" {
			t.Fatalf("execution %s", end.raw)
		}
		mu.Lock()
		sent := strings.Join(auth, ",")
		mu.Unlock()
		if sent != "Bearer "+value {
			t.Fatalf("the target got Authorization %q", sent)
		}
		for _, path := range []string{"/v1/executions/" + id, "/v1/executions/" + id + "/steps", "/v1/executions/" + id + "/events", "/v1/workflows/pay", "/v1/secrets"} {
			if got := e.call("tok-orders", "GET", path, "", ""); strings.Contains(got.raw, value) {
				t.Fatalf("GET %s shows the secret: %s", path, got.raw)
			}
		}
		// Deleted, it fails the runs that need it, without showing it.
		e.want(e.call("tok-orders", "DELETE", "/v1/secrets/PAYMENTS_KEY", "", ""), 204, "")
		e.want(e.call("tok-orders", "DELETE", "/v1/secrets/PAYMENTS_KEY", "", ""), 404, "not-found")
		b := e.call("tok-orders", "POST", "/v1/workflows/pay/trigger", "", `{"order": {"id": "o-2"}}`)
		end := e.settled("tok-orders", b.str("execution", "id"))
		if end.str("status") != "FAILED" || !strings.Contains(end.str("error"), `no secret "PAYMENTS_KEY"`) {
			t.Fatalf("a run whose secret was deleted: %s", end.raw)
		}
	})
}
