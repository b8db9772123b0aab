package keytemplate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemhq/idem/keytemplate"
)

// sentinels are the errors Key may return; one of them must match.
var sentinels = []error{keytemplate.ErrBadInput, keytemplate.ErrMissingField, keytemplate.ErrNotString,
	keytemplate.ErrBadKey, keytemplate.ErrEval}

// FuzzKey: for any expression and input, defining and evaluating never
// panics or crashes, a definition error is one of the sentinels, the
// operands of an accepted expression are always found, and the same input
// gives the same key (or the same kind of error) every time, the key valid
// and prefixed.
func FuzzKey(f *testing.F) {
	f.Add("= 'charge-' & payload.order.id", []byte(`{"payload": {"order": {"id": "o-42"}}}`))
	f.Add("'$now' & payload.a", []byte(`{"payload": {"a": 1.5}}`))
	f.Add("$now()", []byte(`{}`))
	f.Add("$join(payload.items[qty > 1].sku, '.') ~> $uppercase", []byte(`{"payload": {"items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}]}}`))
	f.Add("payload.a ? 'x&' & payload.a : $error('no')", []byte(`{"payload": {"b": null}}`))
	f.Add("$replace(payload.s, /[&]+/, '-') & payload.n", []byte(`{"payload": {"s": "a&&b", "n": 12345678901234567890}}`))
	f.Fuzz(func(t *testing.T, expr string, input []byte) {
		if len(expr) > 512 {
			return // long enough to say anything; keeps the fuzzer fast
		}
		tp, err := keytemplate.Expr("fz", expr, nil)
		if err != nil {
			if !errors.Is(err, keytemplate.ErrSyntax) && !errors.Is(err, keytemplate.ErrNondeterministic) &&
				!errors.Is(err, keytemplate.ErrUnsupported) && !errors.Is(err, keytemplate.ErrBadOperation) {
				t.Fatalf("Expr(%q): %v is no sentinel", expr, err)
			}
			if strings.Contains(err.Error(), "cannot find the operands") {
				t.Fatalf("Expr(%q): %v", expr, err)
			}
			return
		}
		k1, err1 := tp.Key(input)
		k2, err2 := tp.Key(input)
		if k1 != k2 || kind(err1) != kind(err2) {
			t.Fatalf("%q on %q: %q, %v then %q, %v", expr, input, k1, err1, k2, err2)
		}
		if err1 != nil {
			if kind(err1) == nil {
				t.Fatalf("%q on %q: %v is no sentinel", expr, input, err1)
			}
			return
		}
		if !strings.HasPrefix(k1, "fz-") || len(k1) > 255 {
			t.Fatalf("%q on %q: key %q", expr, input, k1)
		}
		for i := 0; i < len(k1); i++ {
			if k1[i] < 0x21 || k1[i] > 0x7e {
				t.Fatalf("%q on %q: key %q has byte 0x%02x", expr, input, k1, k1[i])
			}
		}
	})
}

func kind(err error) error {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}
