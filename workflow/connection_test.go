package workflow_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/workflow"
)

// A connection is checked as a definition is: every problem with its path.
func TestInvalidConnections(t *testing.T) {
	for _, c := range []struct{ name, body, path, reason string }{
		{"NoBaseURL", `{}`, "/baseUrl", "needs its API's base URL"},
		{"RelativeBaseURL", `{"baseUrl": "/v1"}`, "/baseUrl", "absolute http or https URL"},
		{"SecretInTheURL", `{"baseUrl": "https://x.example/{{ secrets.K }}"}`, "/baseUrl", "never in a url"},
		{"UnknownField", `{"baseUrl": "https://x.example", "retries": 3}`, "/retries", "unknown"},
		{"KeyReadsTheClock", `{"baseUrl": "https://x.example", "idempotencyKey": "= $now()"}`, "/idempotencyKey", "not deterministic"},
		{"UnknownAuth", `{"baseUrl": "https://x.example", "auth": {"type": "oauth"}}`, "/auth/type", `"oauth": bearer or header`},
		{"BearerWithoutToken", `{"baseUrl": "https://x.example", "auth": {"type": "bearer"}}`, "/auth/token", "needs its token"},
		{"UndefinedSecret", `{"baseUrl": "https://x.example", "auth": {"type": "bearer", "token": "{{ secrets.NOPE }}"}}`, "/auth/token", `no secret "NOPE"`},
		{"VerifyWithoutPath", `{"baseUrl": "https://x.example", "verify": {"found": "= response.status = 200"}}`, "/verify/path", "needs the path"},
		{"BadConflictPolicy", `{"baseUrl": "https://x.example", "onConflict": "ignore"}`, "/onConflict", `"ignore"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := workflow.LoadConnection([]byte(c.body), &workflow.Options{Secrets: []string{"K"}})
			inv, ok := errors.AsType[*workflow.InvalidError](err)
			if !ok {
				t.Fatalf("%s: %v, want an *InvalidError", c.body, err)
			}
			for _, p := range inv.Problems {
				if p.Path == c.path && strings.Contains(p.Reason, c.reason) {
					return
				}
			}
			t.Fatalf("problems %v, want %s: …%s…", inv.Problems, c.path, c.reason)
		})
	}
	conn, canon, err := workflow.LoadConnection([]byte("baseUrl: https://x.example/\nauth: {type: bearer, token: '{{ secrets.K }}'}\n"), nil)
	if err != nil || conn == nil || string(canon) != `{"auth":{"token":"{{ secrets.K }}","type":"bearer"},"baseUrl":"https://x.example/"}` {
		t.Fatalf("a connection in YAML: %s %v", canon, err)
	}
}

// A GATEWAY on a connection inherits its base URL, auth, key template (the
// operation the vertex's id) and response policy; what the step says
// itself wins.
func TestGatewayOnAConnection(t *testing.T) {
	tg, base := newTarget(t, func(r *http.Request) (int, string, http.Header) { return 409, `{}`, nil })
	conn, _, err := workflow.LoadConnection([]byte(`{"baseUrl": "`+base+`/api", "auth": {"type": "bearer", "token": "{{ secrets.PAYMENTS_KEY }}"},
		"headers": {"Accept": "application/json"}, "idempotencyKey": "= payload.order.id", "onConflict": "retry"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := checkout()
	c := config(d, 1)
	delete(c, "url")
	delete(c, "headers")
	c["connection"], c["path"] = "payments", "= '/charges/' & payload.order.id"
	w, _, warns, err := workflow.Load(mustJSON(t, d), &workflow.Options{Connections: []string{"payments"}})
	if err != nil || len(warns) != 0 {
		t.Fatalf("a step on a connection: %v %v", err, warns)
	}
	caller := &workflow.Caller{Secret: secrets.Secret, Connection: func(ctx context.Context, name string) (*workflow.Connection, error) {
		if name != "payments" {
			return nil, errors.New("no such connection")
		}
		return conn, nil
	}}
	in := runInput(t, `{"order": {"id": "o-5", "amount": 3}}`)
	n, err := w.Next(context.Background(), w.Entry(), in, caller)
	if err != nil || n.Key != "charge-o-5" || n.Once {
		t.Fatalf("Next: %+v %v, want the connection's key with the vertex's operation", n, err)
	}
	if _, err := w.Run(context.Background(), "charge", in, n.Key, caller); !errors.Is(err, workflow.ErrTransient) {
		t.Fatalf("a 409 on a connection whose onConflict is retry: %v", err)
	}
	if got := tg.seen(); len(got) != 1 || got[0] != `POST /api/charges/o-5 charge-o-5 {"amount":3,"currency":"EUR"}` || tg.auth[0] != "Bearer sk_test" {
		t.Fatalf("requests %q, auth %q", got, tg.auth)
	}
	// The step's own policy and key win over the connection's.
	c["onConflict"] = "done"
	c["headers"] = map[string]any{"Idempotency-Key": "= 'pay-' & payload.order.id"}
	w, _, _, err = workflow.Load(mustJSON(t, d), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err = w.Next(context.Background(), w.Entry(), in, caller); err != nil || n.Key != "pay-o-5" {
		t.Fatalf("the step's own key: %+v %v", n, err)
	}
	if _, err := w.Run(context.Background(), "charge", in, n.Key, caller); err != nil {
		t.Fatalf("a 409 with the step's onConflict done: %v", err)
	}
	if _, err := w.Next(context.Background(), w.Entry(), in, nil); !errors.Is(err, workflow.ErrData) {
		t.Fatalf("a step on a connection without one to bind: %v, want ErrData", err)
	}
}
