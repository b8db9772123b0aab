package keytemplate_test

import (
	"errors"
	"testing"

	"github.com/idemhq/idem/keytemplate"
)

// Expressions follow the templates' rules, may be constants and give any
// JSON value; an undefined result is nil.
func TestExpression(t *testing.T) {
	in := []byte(`{"payload": {"order": {"id": "o-42", "amount": 150, "lines": [1, 2]}}, "steps": {"charge": {"status": 409}}}`)
	for _, c := range []struct{ expr, want string }{
		{"= payload.order.amount > 100", "true"},
		{"= steps.charge.status = 409", "true"},
		{"payload.order.id", `"o-42"`},
		{"= 'ship-' & payload.order.id", `"ship-o-42"`},
		{"= payload.order.lines", "[1,2]"},
		{"= payload.order", `{"amount":150,"id":"o-42","lines":[1,2]}`},
		{"= true", "true"},
		{"= 'Bearer x'", `"Bearer x"`},
		{"= payload.order.missing", ""},
	} {
		e, err := keytemplate.Compile(c.expr, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		got, err := e.Eval(in)
		if err != nil || string(got) != c.want {
			t.Errorf("%s = %s (%v), want %s", c.expr, got, err, c.want)
		}
	}
	for _, c := range []struct {
		expr string
		want error
	}{
		{"= $now()", keytemplate.ErrNondeterministic},
		{"= payload.order.id & $random()", keytemplate.ErrNondeterministic},
		{"= $keys(payload)", keytemplate.ErrNondeterministic},
		{"= function($x) { $x }", keytemplate.ErrUnsupported},
		{"= payload.(", keytemplate.ErrSyntax},
	} {
		if _, err := keytemplate.Compile(c.expr, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.expr, err, c.want)
		}
	}
}
