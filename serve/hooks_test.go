package serve_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/signature"
)

// A workflow's signed webhook starts a run per event id, with no token:
// a redelivered event gets its run, another event starts another; a bad
// signature, an unknown workflow and one without a webhook are refused.
func TestWebhookTrigger(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		e := start(&serve.Config{})
		const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		e.want(e.call("tok-orders", "PUT", "/v1/secrets/HOOK_SECRET", "", `{"value": "`+secret+`"}`), 204, "")
		e.putWorkflow("paid", `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"webhook": {"scheme": "standard", "secrets": ["HOOK_SECRET"]}}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "`+payURL+`/v1/charges",
    "headers": {"Idempotency-Key": "= 'capture-' & payload.invoice"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "done"}]}`)
		e.putWorkflow("plain", checkoutFlow(payURL, payURL, ""))
		signer, err := signature.NewSigner(signature.SchemeStandard, []string{secret}, nil)
		if err != nil {
			t.Fatal(err)
		}
		deliver := func(path, id, body string, tamper bool) answer {
			h, err := signer.Sign([]byte(body), &signature.SignOpts{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			if tamper {
				body += " "
			}
			req, _ := http.NewRequest("POST", e.url+path, strings.NewReader(body))
			for k, v := range h {
				req.Header[k] = v
			}
			a, err := e.do(req)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		first := deliver("/v1/hooks/orders/paid", "evt_1", `{"invoice": "in-1"}`, false)
		e.want(first, 201, "")
		again := deliver("/v1/hooks/orders/paid", "evt_1", `{"invoice": "in-1"}`, false)
		if again.status != 200 || again.header.Get("Idempotent-Replayed") != "true" || again.str("execution", "id") != first.str("execution", "id") {
			t.Fatalf("a redelivered event: %d %s", again.status, again.raw)
		}
		other := deliver("/v1/hooks/orders/paid", "evt_2", `{"invoice": "in-2"}`, false)
		e.want(other, 201, "")
		e.want(deliver("/v1/hooks/orders/paid", "evt_1", `{"invoice": "in-9"}`, false), 422, "idempotency-key-reused")
		e.want(deliver("/v1/hooks/orders/paid", "evt_3", `{"invoice": "in-3"}`, true), 401, "signature-invalid")
		e.want(deliver("/v1/hooks/orders/nope", "evt_3", `{}`, false), 404, "not-found")
		e.want(deliver("/v1/hooks/orders/plain", "evt_3", `{}`, false), 404, "not-found")
		e.want(deliver("/v1/hooks/nobody/paid", "evt_3", `{}`, false), 404, "not-found")
		e.want(deliver("/v1/hooks/billing/paid", "evt_3", `{}`, false), 404, "not-found")
		for _, id := range []string{first.str("execution", "id"), other.str("execution", "id")} {
			if end := e.settled("tok-orders", id); end.str("status") != "SUCCEEDED" {
				t.Fatalf("execution %s", end.raw)
			}
		}
		if keys, charges, _ := pay.effects(); keys != 2 || charges != 2 {
			t.Fatalf("payments: %d keys, %d charges; want one per event", keys, charges)
		}
	})
}
