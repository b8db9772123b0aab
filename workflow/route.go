package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrNoRoute: no edge from a vertex holds for a run's data; the run fails
// there (Compile warns of vertices whose every edge has a condition).
var ErrNoRoute = errors.New("workflow: no edge holds")

// Entry returns the id of the ENTRY_POINT.
func (w *Workflow) Entry() string { return w.entry }

// Route returns the vertex a run goes to from the vertex from, given the
// step's input (a JSON object: {"payload": ..., "steps": {id: output}}):
// the first edge from it, in the definition's order, whose condition
// holds; an edge without one always does. A condition holds when it gives
// true; undefined (a missing field) and false do not, and any other value
// is an error, so that a typo never takes a branch silently. Route is
// deterministic: the same input always takes the same edge.
func (w *Workflow) Route(from string, input []byte) (string, error) {
	if _, ok := w.steps[from]; !ok {
		return "", fmt.Errorf("workflow: no vertex %q", from)
	}
	for _, r := range w.out[from] {
		if r.cond == nil {
			return r.to, nil
		}
		v, err := r.cond.Eval(input)
		if err != nil {
			return "", fmt.Errorf("workflow: the condition of the edge %s -> %s: %w", from, r.to, err)
		}
		var holds bool
		switch {
		case v == nil:
		case json.Unmarshal(v, &holds) != nil:
			return "", fmt.Errorf("workflow: the condition of the edge %s -> %s gave %s, not true or false", from, r.to, v)
		}
		if holds {
			return r.to, nil
		}
	}
	return "", fmt.Errorf("%w from %q", ErrNoRoute, from)
}

// Type returns the type of the vertex id ("" for none).
func (w *Workflow) Type(id string) string {
	if st, ok := w.steps[id]; ok {
		return st.typ
	}
	return ""
}
