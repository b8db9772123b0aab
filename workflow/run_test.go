package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/workflow"
)

// target is a stand-in for a gateway's target: it records each request
// and answers what answer says.
type target struct {
	mu       sync.Mutex
	requests []string // "METHOD path key body"
	auth     []string
	answer   func(r *http.Request) (int, string, http.Header)
}

func newTarget(t *testing.T, answer func(r *http.Request) (int, string, http.Header)) (*target, string) {
	t.Helper()
	tg := &target{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		tg.mu.Lock()
		tg.requests = append(tg.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get("Idempotency-Key")+" "+string(b))
		tg.auth = append(tg.auth, r.Header.Get("Authorization"))
		tg.mu.Unlock()
		status, body, h := tg.answer(r)
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return tg, srv.URL
}

func (tg *target) seen() []string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]string(nil), tg.requests...)
}

// gatewayFlow is start → charge (a GATEWAY to base) → done, with cfg
// merged into charge's config.
func gatewayFlow(t *testing.T, base string, cfg map[string]any) *workflow.Workflow {
	t.Helper()
	d := checkout()
	c := config(d, 1)
	c["url"] = base + "/v1/charges"
	for k, v := range cfg {
		c[k] = v
	}
	w, _, _, err := workflow.Load(mustJSON(t, d), nil)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

var secrets = &workflow.Caller{Secret: func(ctx context.Context, name string) (string, error) {
	if name == "PAYMENTS_KEY" {
		return "sk_test", nil
	}
	return "", errors.New("no such secret")
}}

func runInput(t *testing.T, payload string) []byte {
	t.Helper()
	in, err := workflow.Input(json.RawMessage(payload), nil)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// The key is computed once from business data; every attempt sends it,
// with the body computed from the payload and the secret filled in.
func TestGatewaySendsTheKey(t *testing.T) {
	tg, base := newTarget(t, func(r *http.Request) (int, string, http.Header) { return 201, `{"id":"ch_1"}`, nil })
	w := gatewayFlow(t, base, nil)
	in := runInput(t, `{"order": {"id": "o-42", "amount": 1250}}`)
	next, err := w.Next(context.Background(), w.Entry(), in, nil)
	if err != nil || next.Vertex != "charge" || next.Key != "charge-o-42" || next.Once || next.End {
		t.Fatalf("Next from the entry: %+v %v", next, err)
	}
	for range 2 {
		out, err := w.Run(context.Background(), next.Vertex, in, next.Key, secrets)
		if err != nil || string(out) != `{"body":{"id":"ch_1"},"status":201}` {
			t.Fatalf("Run: %s %v", out, err)
		}
	}
	want := `POST /v1/charges charge-o-42 {"amount":1250,"currency":"EUR"}`
	if got := tg.seen(); len(got) != 2 || got[0] != want || got[1] != want {
		t.Fatalf("requests %q, want twice %q", got, want)
	}
	if tg.auth[0] != "Bearer sk_test" {
		t.Fatalf("Authorization %q", tg.auth[0])
	}
	out, _ := w.Run(context.Background(), next.Vertex, in, next.Key, secrets)
	in2, _ := workflow.Input(json.RawMessage(`{"order": {"id": "o-42"}}`), map[string]json.RawMessage{"charge": out})
	if end, err := w.Next(context.Background(), "charge", in2, nil); err != nil || !end.End || end.Vertex != "done" {
		t.Fatalf("Next from charge: %+v %v", end, err)
	}
}

// The response policy: what is done, what is retried (with the target's
// Retry-After) and what fails for good.
func TestGatewayResponsePolicy(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    map[string]any
		status int
		header http.Header
		want   error // nil: done
		after  time.Duration
	}{
		{"2xx", nil, 200, nil, nil, 0},
		{"409 done by default", nil, 409, nil, nil, 0},
		{"409 retry", map[string]any{"onConflict": "retry"}, 409, nil, workflow.ErrTransient, 0},
		{"422 fails", nil, 422, nil, workflow.ErrRejected, 0},
		{"422 as data", map[string]any{"clientErrorMode": "complete"}, 422, nil, nil, 0},
		{"429 Retry-After", nil, 429, http.Header{"Retry-After": {"7"}}, workflow.ErrTransient, 7 * time.Second},
		{"408", nil, 408, nil, workflow.ErrTransient, 0},
		{"503", nil, 503, nil, workflow.ErrTransient, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, base := newTarget(t, func(r *http.Request) (int, string, http.Header) { return c.status, `{"error":"x"}`, c.header })
			w := gatewayFlow(t, base, c.cfg)
			out, err := w.Run(context.Background(), "charge", runInput(t, `{"order": {"id": "o-1", "amount": 1}}`), "charge-o-1", secrets)
			if !errors.Is(err, c.want) || (c.want == nil && !strings.Contains(string(out), `"status":`)) {
				t.Fatalf("got %s %v, want %v", out, err, c.want)
			}
			if ce, ok := errors.AsType[*workflow.CallError](err); c.want == workflow.ErrTransient && (!ok || ce.RetryAfter != c.after) {
				t.Fatalf("transient error %v, want a CallError with RetryAfter %v", err, c.after)
			}
		})
	}
	t.Run("no answer", func(t *testing.T) {
		_, base := newTarget(t, func(r *http.Request) (int, string, http.Header) { return 200, "", nil })
		w := gatewayFlow(t, base, map[string]any{"url": "http://127.0.0.1:1/v1/charges"})
		if _, err := w.Run(context.Background(), "charge", runInput(t, `{"order": {"id": "o-1", "amount": 1}}`), "k", secrets); !errors.Is(err, workflow.ErrTransient) {
			t.Fatalf("a target that does not answer: %v, want ErrTransient", err)
		}
	})
}

// Read-Verify-Write: the read before every write attempt finds an effect
// that is there already, and then nothing is written again.
func TestGatewayVerifiesBeforeEachWrite(t *testing.T) {
	shipped := false
	tg, base := newTarget(t, func(r *http.Request) (int, string, http.Header) {
		switch {
		case r.Method == "GET" && shipped:
			return 200, `{"shipment":"s-1"}`, nil
		case r.Method == "GET":
			return 404, `{}`, nil
		}
		shipped = true
		return 201, `{"shipment":"s-1"}`, nil
	})
	w := gatewayFlow(t, base, map[string]any{
		"url":     base + "/shipments",
		"headers": map[string]any{},
		"verify":  map[string]any{"url": "= '" + base + "/shipments/' & payload.order.id", "found": "= response.status = 200"},
	})
	in := runInput(t, `{"order": {"id": "o-7", "amount": 1}}`)
	if n, _ := w.Next(context.Background(), w.Entry(), in, nil); n.Once || n.Key != "" {
		t.Fatalf("a verified write: %+v, want neither once-only nor keyed", n)
	}
	first, err := w.Run(context.Background(), "charge", in, "", secrets)
	if err != nil || !strings.Contains(string(first), `"status":201`) {
		t.Fatalf("first attempt: %s %v", first, err)
	}
	again, err := w.Run(context.Background(), "charge", in, "", secrets)
	if err != nil || string(again) != `{"body":{"shipment":"s-1"},"status":200,"verified":true}` {
		t.Fatalf("second attempt: %s %v", again, err)
	}
	if got := tg.seen(); len(got) != 3 || !strings.HasPrefix(got[1], "POST ") || !strings.HasPrefix(got[2], "GET /shipments/o-7") {
		t.Fatalf("requests %q: want GET, POST, GET (no second POST)", got)
	}
}

// Data that does not fit fails the step for good: a missing field in the
// key, a missing secret.
func TestGatewayDataErrors(t *testing.T) {
	_, base := newTarget(t, func(r *http.Request) (int, string, http.Header) { return 200, `{}`, nil })
	w := gatewayFlow(t, base, nil)
	if _, err := w.Next(context.Background(), w.Entry(), runInput(t, `{"order": {}}`), nil); !errors.Is(err, workflow.ErrData) {
		t.Fatalf("a key without its field: %v, want ErrData", err)
	}
	noSecret := &workflow.Caller{Secret: func(context.Context, string) (string, error) { return "", errors.New("none") }}
	if _, err := w.Run(context.Background(), "charge", runInput(t, `{"order": {"id": "o-1", "amount": 1}}`), "k", noSecret); !errors.Is(err, workflow.ErrData) {
		t.Fatalf("a missing secret: %v, want ErrData", err)
	}
	// An undefined body member is left out; a keyless POST is once-only.
	w = gatewayFlow(t, base, map[string]any{"headers": map[string]any{}})
	if n, err := w.Next(context.Background(), w.Entry(), runInput(t, `{"order": {"id": "o-1"}}`), nil); err != nil || !n.Once {
		t.Fatalf("a keyless, unverified POST: %+v %v, want once-only", n, err)
	}
	if out, err := w.Run(context.Background(), "charge", runInput(t, `{"order": {"id": "o-1"}}`), "", nil); err != nil || !strings.Contains(string(out), `"status":200`) {
		t.Fatalf("a body with an undefined member: %s %v", out, err)
	}
}

func TestTransformRuns(t *testing.T) {
	d := checkout()
	addVertex(d, map[string]any{"id": "summary", "type": "TRANSFORM", "config": map[string]any{
		"output": map[string]any{"order": "= payload.order.id", "paid": "= steps.charge.status = 201", "n": 1}}})
	d["edges"] = []any{
		map[string]any{"from": "start", "to": "summary"},
		map[string]any{"from": "summary", "to": "done"},
	}
	d["vertices"] = []any{vertex(d, 0), vertex(d, 2), vertex(d, 3)}
	w, _, _, err := workflow.Load(mustJSON(t, d), nil)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := workflow.Input(json.RawMessage(`{"order": {"id": "o-3"}}`), map[string]json.RawMessage{"charge": json.RawMessage(`{"status":201}`)})
	out, err := w.Run(context.Background(), "summary", in, "", nil)
	if err != nil || string(out) != `{"n":1,"order":"o-3","paid":true}` {
		t.Fatalf("transform: %s %v", out, err)
	}
}
