package workflow_test

import (
	"errors"
	"testing"

	"github.com/idemhq/idem/workflow"
)

// A run goes along the first edge whose condition holds, in the order the
// edges are written; false and a missing field do not hold, anything but a
// boolean is an error.
func TestRoute(t *testing.T) {
	d := checkout()
	addVertex(d, map[string]any{"id": "review", "type": "TRANSFORM", "config": map[string]any{"output": 1}})
	edges := []any{
		map[string]any{"from": "start", "to": "review", "condition": "= payload.order.amount > 1000"},
		map[string]any{"from": "start", "to": "charge", "condition": "= payload.order.flagged"},
		map[string]any{"from": "start", "to": "charge"},
		map[string]any{"from": "review", "to": "done"},
		map[string]any{"from": "charge", "to": "done", "condition": "= steps.charge.status = 200"},
	}
	d["edges"] = edges
	def, err := workflow.Parse(mustJSON(t, d))
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := workflow.Compile(def, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Entry() != "start" || w.Type("charge") != workflow.Gateway || w.Type("nope") != "" {
		t.Fatalf("entry %q, types %q %q", w.Entry(), w.Type("charge"), w.Type("nope"))
	}
	for _, c := range []struct{ from, input, want string }{
		{"start", `{"payload": {"order": {"amount": 5000}}}`, "review"},
		{"start", `{"payload": {"order": {"amount": 10}}}`, "charge"},
		{"start", `{"payload": {"order": {"amount": 10, "flagged": false}}}`, "charge"},
		{"start", `{"payload": {}}`, "charge"},
		{"review", `{"payload": {}}`, "done"},
		{"charge", `{"payload": {}, "steps": {"charge": {"status": 200}}}`, "done"},
	} {
		if got, err := w.Route(c.from, []byte(c.input)); err != nil || got != c.want {
			t.Errorf("Route(%s, %s) = %q, %v; want %q", c.from, c.input, got, err, c.want)
		}
	}
	if _, err := w.Route("charge", []byte(`{"payload": {}, "steps": {"charge": {"status": 500}}}`)); !errors.Is(err, workflow.ErrNoRoute) {
		t.Errorf("no edge holds: %v, want ErrNoRoute", err)
	}
	if _, err := w.Route("start", []byte(`{"payload": {"order": {"flagged": "yes"}}}`)); err == nil || errors.Is(err, workflow.ErrNoRoute) {
		t.Errorf("a condition that gives a string: %v, want an error", err)
	}
	if _, err := w.Route("nowhere", []byte(`{}`)); err == nil {
		t.Error("an unknown vertex routed")
	}
}
