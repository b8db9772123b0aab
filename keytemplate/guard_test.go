package keytemplate

import (
	"errors"
	"testing"
)

// TestGuards: behind the definition check, every compiled template has the
// clock and randomness replaced by functions that fail. compile skips the
// check, as a hole in it would.
func TestGuards(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"$now()", "$millis()", "$random()", "$shuffle([1, 2, 3])", "$fromMillis($millis())"} {
		e, err := compile(expr)
		if err != nil {
			t.Fatalf("compile(%q): %v", expr, err)
		}
		if v, err := evalExpr(e, map[string]any{}); !errors.Is(err, errGuard) {
			t.Errorf("%s: %v, %v; want errGuard", expr, v, err)
		}
	}
}

// TestSplitParts: the operands' text is found whatever the "&" characters
// inside strings, names, regular expressions and parentheses.
func TestSplitParts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"'charge-' & payload.order.id", []string{"'charge-'", "payload.order.id"}},
		{"'a&b' & payload.`x&y` & \"c&\" & payload.z", []string{"'a&b'", "payload.`x&y`", "\"c&\"", "payload.z"}},
		{"$replace(payload.a, /&+/, '&') & ('x' & payload.b)", []string{"$replace(payload.a, /&+/, '&')", "('x' & payload.b)"}},
		{`"\"&" & payload.a`, []string{`"\"&"`, "payload.a"}},
		{"payload.a ? 'x' & payload.a : 'y'", []string{"payload.a ? 'x' & payload.a : 'y'"}},
		{"payload.a&payload.b&payload.c", []string{"payload.a", "payload.b", "payload.c"}},
	} {
		root, err := parse(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		parts, err := splitParts(tc.expr, root)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		var got []string
		for _, p := range parts {
			got = append(got, p.src)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %q, want %q", tc.expr, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: %q, want %q", tc.expr, got, tc.want)
			}
		}
	}
}
