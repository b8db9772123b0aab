package keytemplate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/idemhq/idem/keytemplate"
)

// seed is the charge template of the package doc, as a configuration file
// writes it.
const seed = "= 'charge-' & payload.order.id"

func order(id any) []byte {
	b, err := json.Marshal(map[string]any{"payload": map[string]any{"order": map[string]any{"id": id}}})
	if err != nil {
		panic(err)
	}
	return b
}

func mustExpr(t testing.TB, op, expr string) *keytemplate.Template {
	t.Helper()
	tp, err := keytemplate.Expr(op, expr, nil)
	if err != nil {
		t.Fatalf("Expr(%q, %q): %v", op, expr, err)
	}
	return tp
}

func TestSeedTemplate(t *testing.T) {
	t.Parallel()
	in := []byte(`{"payload": {"order": {"id": "o-42"}}}`)
	for _, tc := range []struct {
		name, op string
		def      func(op, expr string, cfg *keytemplate.Config) (*keytemplate.Template, error)
	}{
		{"Parse", "charge", keytemplate.Parse},
		{"Expr", "charge", keytemplate.Expr},
		{"OperationFromTemplate", "", keytemplate.Expr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp, err := tc.def(tc.op, seed, nil)
			if err != nil {
				t.Fatal(err)
			}
			if k, err := tp.Key(in); k != "charge-o-42" || err != nil {
				t.Fatalf("Key: %q, %v; want charge-o-42", k, err)
			}
			if tp.Operation() != "charge" {
				t.Fatalf("Operation: %q", tp.Operation())
			}
			if tp.String() != "= 'charge-' & payload.order.id" {
				t.Fatalf("String: %q", tp.String())
			}
		})
	}
}

func TestOperationPrefix(t *testing.T) {
	t.Parallel()
	in := []byte(`{"payload": {"order": {"id": "o-42", "ref": "charge-7"}}, "target": "payments"}`)
	for _, tc := range []struct {
		name, op, expr, want string
	}{
		{"Added", "charge", "= payload.order.id", "charge-o-42"},
		{"AddedWithoutMarker", "charge", "payload.order.id", "charge-o-42"},
		{"KeptFromLiteral", "charge", "'charge-' & payload.order.id", "charge-o-42"},
		{"OtherOperationKeepsItsOwn", "ship", "'ship-' & payload.order.id", "ship-o-42"},
		{"LiteralOfAnotherOperation", "ship", "'charge-' & payload.order.id", "ship-charge-o-42"},
		// Decided per template, not per result: a result that happens
		// to start with the prefix still gets it, so the ref "charge-7"
		// and the ref "7" can never share a key.
		{"ResultThatLooksPrefixed", "charge", "payload.order.ref", "charge-charge-7"},
		{"LiteralWithoutDash", "charge", "'charge' & payload.order.id", "charge-chargeo-42"},
		{"DottedOperation", "orders.v2", "payload.order.id", "orders.v2-o-42"},
		{"ReadsTarget", "charge", "target & ':' & payload.order.id", "charge-payments:o-42"},
		{"Functions", "charge", "$uppercase(payload.order.id) & '-' & $substringAfter(payload.order.ref, '-')", "charge-O-42-7"},
		{"Condition", "charge", "payload.order.ref ? 'r-' & payload.order.ref : payload.order.id", "charge-r-charge-7"},
		{"ApplyOperator", "charge", "payload.order.id ~> $uppercase", "charge-O-42"},
		{"NumberLiteral", "charge", "payload.order.id & 1", "charge-o-421"},
		{"Whitespace", "charge", "  =   'charge-'&payload.order.id  ", "charge-o-42"},
		{"AmpersandInString", "charge", "payload.order.id & '&' & payload.order.ref", "charge-o-42&charge-7"},
		{"StringLiteralWithNow", "charge", "'$now()-' & payload.order.id", "charge-$now()-o-42"},
		{"BackquotedFieldNamedNow", "charge", "'x' & payload.`$now` & payload.order.id", "charge-xNo-42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := in
			if tc.name == "BackquotedFieldNamedNow" {
				in = []byte(`{"payload": {"$now": "N", "order": {"id": "o-42"}}}`)
			}
			k, err := mustExpr(t, tc.op, tc.expr).Key(in)
			if err != nil || k != tc.want {
				t.Fatalf("Key: %q, %v; want %q", k, err, tc.want)
			}
		})
	}
}

func TestBadOperation(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"Charge", "charge-v2", "-x", "_x", ".x", "a b", "é", strings.Repeat("a", keytemplate.MaxOperationLen+1)} {
		if _, err := keytemplate.Expr(op, seed, nil); !errors.Is(err, keytemplate.ErrBadOperation) {
			t.Errorf("Expr(%q): %v, want ErrBadOperation", op, err)
		}
		if _, err := keytemplate.Func(op, func(map[string]any) (string, error) { return "x", nil }, nil); !errors.Is(err, keytemplate.ErrBadOperation) {
			t.Errorf("Func(%q): %v, want ErrBadOperation", op, err)
		}
	}
	// Without an operation, the template must name it with a literal.
	for _, expr := range []string{"payload.order.id", "'Charge-' & payload.order.id", "'charge' & payload.order.id", "'-x' & payload.order.id"} {
		if _, err := keytemplate.Expr("", expr, nil); !errors.Is(err, keytemplate.ErrBadOperation) {
			t.Errorf("Expr(\"\", %q): %v, want ErrBadOperation", expr, err)
		}
	}
	if _, err := keytemplate.Func("", func(map[string]any) (string, error) { return "x", nil }, nil); !errors.Is(err, keytemplate.ErrBadOperation) {
		t.Errorf("Func without operation: %v", err)
	}
}

// TestOperationsNeverCollide: for any two order ids, the charge and ship
// keys differ, and within one operation two ids share a key only if they
// are equal.
func TestOperationsNeverCollide(t *testing.T) {
	t.Parallel()
	charge := mustExpr(t, "charge", seed)
	chargeBare := mustExpr(t, "charge", "payload.order.id")
	ship := mustExpr(t, "ship", "'ship-' & payload.order.id")
	shipOther := mustExpr(t, "ship", "payload.order.id")
	id := rapid.StringMatching(`[!-~]{1,40}`)
	rapid.Check(t, func(rt *rapid.T) {
		a, b := id.Draw(rt, "a"), id.Draw(rt, "b")
		keys := map[string]string{}
		for _, c := range []struct {
			name string
			tp   *keytemplate.Template
			id   string
		}{{"charge a", charge, a}, {"ship a", ship, a}, {"charge b", charge, b}, {"ship b", ship, b},
			{"chargeBare b", chargeBare, b}, {"shipOther a", shipOther, a}} {
			k, err := c.tp.Key(order(c.id))
			if err != nil {
				rt.Fatalf("%s: %v", c.name, err)
			}
			op, _, _ := strings.Cut(k, "-")
			if op != c.tp.Operation() {
				rt.Fatalf("%s: key %q does not start with %q-", c.name, k, c.tp.Operation())
			}
			keys[c.name] = k
		}
		if keys["charge a"] == keys["ship a"] || keys["charge a"] == keys["ship b"] || keys["shipOther a"] == keys["charge a"] {
			rt.Fatalf("a charge key equals a ship key: %v", keys)
		}
		if (keys["charge a"] == keys["charge b"]) != (a == b) || (keys["ship a"] == keys["ship b"]) != (a == b) {
			rt.Fatalf("ids %q and %q: keys %v", a, b, keys)
		}
		// Two templates of one operation that produce the same text
		// give the same key: the literal prefix is not added twice.
		if keys["charge b"] != keys["chargeBare b"] || keys["ship a"] != keys["shipOther a"] {
			rt.Fatalf("bare and prefixed templates disagree: %v", keys)
		}
	})
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	tp := mustExpr(t, "charge", "'charge-' & payload.order.id & '-' & $join(payload.items.sku, '.') & '-' & $sum(payload.items.qty) & '-' & $string(payload.order)")
	in := []byte(`{"payload": {"order": {"id": "o-42", "b": 1, "a": 2, "c": {"z": 1, "y": [1, 2]}, "d": 3, "e": 4, "f": 5, "g": 6, "h": 7, "i": 8},
		"items": [{"sku": "s1", "qty": 2}, {"sku": "s2", "qty": 3.5}]}}`)
	want, err := tp.Key(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(want, `charge-o-42-s1.s2-5.5-{"a":2,"b":1,"c":{"y":[1,2],"z":1}`) {
		t.Fatalf("key %q", want)
	}
	for range 500 {
		if k, err := tp.Key(in); k != want || err != nil {
			t.Fatalf("Key gave %q, %v, then %q", want, nil, k)
		}
	}
	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		// Every kind of node the check accepts, evaluated at once by
		// many goroutines: the race detector sees any shared state.
		wide := mustExpr(t, "charge", `'charge-' & payload.order.id & '-' & (
			$n := $count(payload.items[qty > 1]);
			$s := $join(payload.items^(>qty).sku, '.');
			$n > 0 ? $s & '-' & $pad($string($n), -3, '0') : 'none'
		) & '-' & $replace($lowercase(payload.order.id), /[^a-z0-9]/, '') & '-' & (payload.order.id ~> $uppercase)
		& '-' & $string(payload.items[0]) & '-' & $substring(payload.order.id, 0, 1) & '-' & (payload.items[sku in ['s1']].qty * 2)`)
		wantWide := "charge-o-42-s2.s1-002-o42-O-42-{\"qty\":2,\"sku\":\"s1\"}-o-4"
		if k, err := wide.Key(in); k != wantWide || err != nil {
			t.Fatalf("wide: %q, %v; want %q", k, err, wantWide)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := range 16 {
			wg.Go(func() {
				for i := range 200 {
					// Half the goroutines on the shared input, half on
					// their own inputs: no state leaks between calls.
					if g%2 == 0 {
						if k, err := tp.Key(in); k != want || err != nil {
							errs <- fmt.Errorf("shared input: %q, %v", k, err)
							return
						}
						if k, err := wide.Key(in); k != wantWide || err != nil {
							errs <- fmt.Errorf("wide: %q, %v", k, err)
							return
						}
						continue
					}
					own := mustExpr(t, "ship", "'ship-' & payload.order.id")
					id := fmt.Sprintf("o-%d-%d", g, i)
					if k, err := own.Key(order(id)); k != "ship-"+id || err != nil {
						errs <- fmt.Errorf("own input: %q, %v", k, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestMissingField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr, in, mention string
	}{
		{"FieldAbsent", seed, `{"payload": {"order": {}}}`, "payload.order.id is not in the input"},
		{"ParentAbsent", seed, `{"payload": {}}`, "payload.order is not in the input"},
		{"NoPayload", seed, `{}`, "payload is not in the input"},
		{"Null", seed, `{"payload": {"order": {"id": null}}}`, "payload.order.id is null"},
		{"Empty", seed, `{"payload": {"order": {"id": ""}}}`, "payload.order.id is the empty string"},
		{"WholeTemplate", "= payload.order.id", `{"payload": {"order": {}}}`, "payload.order.id is not in the input"},
		{"InsideFunction", "= 'charge-' & $lowercase(payload.order.id)", `{"payload": {"order": {}}}`, "operand 2 ($lowercase(payload.order.id)) is undefined (payload.order.id is not in the input)"},
		{"SecondOfThree", "= 'charge-' & payload.order.id & '-' & payload.order.line", `{"payload": {"order": {"id": "o-1"}}}`, "payload.order.line is not in the input"},
		{"EmptyArray", "= 'charge-' & payload.items.sku", `{"payload": {"items": []}}`, "payload.items.sku is undefined"},
		{"ConditionFalseNoElse", "= payload.paid ? 'p-' & payload.order.id", `{"payload": {"paid": false, "order": {"id": "o-1"}}}`, "the template is undefined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := mustExpr(t, "charge", tc.expr).Key([]byte(tc.in))
			if !errors.Is(err, keytemplate.ErrMissingField) || k != "" {
				t.Fatalf("Key: %q, %v; want ErrMissingField", k, err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %q does not say %q", err, tc.mention)
			}
		})
	}
}

func TestValueTypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string // JSON
		want string
		err  error
	}{
		{"String", `"o-42"`, "charge-o-42", nil},
		{"Integer", `42`, "charge-42", nil},
		{"Fraction", `4.5`, "charge-4.5", nil},
		{"Negative", `-7`, "charge--7", nil},
		{"Exponent", `1e21`, "charge-1e+21", nil},
		{"MaxExactInteger", `9007199254740992`, "charge-9007199254740992", nil},
		// Beyond 2^53 a float64 would round: 9007199254740993 would
		// become ...992 and share its key.
		{"BigIntegerKeepsDigits", `9007199254740993`, "charge-9007199254740993", nil},
		{"HugeIntegerKeepsDigits", `123456789012345678901234567890`, "charge-123456789012345678901234567890", nil},
		{"Boolean", `true`, "", keytemplate.ErrNotString},
		{"Array", `["a", "b"]`, "", keytemplate.ErrNotString},
		{"Object", `{"a": 1}`, "", keytemplate.ErrNotString},
		{"SingletonArray", `["a"]`, "", keytemplate.ErrNotString},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := []byte(`{"payload": {"order": {"id": ` + tc.id + `}}}`)
			for _, expr := range []string{seed, "payload.order.id"} {
				k, err := mustExpr(t, "charge", expr).Key(in)
				if k != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
					t.Fatalf("%s: %q, %v; want %q, %v", expr, k, err, tc.want, tc.err)
				}
			}
		})
	}
	t.Run("BigIntegersDoNotCollide", func(t *testing.T) {
		t.Parallel()
		tp := mustExpr(t, "charge", seed)
		a, _ := tp.Key([]byte(`{"payload": {"order": {"id": 9007199254740993}}}`))
		b, _ := tp.Key([]byte(`{"payload": {"order": {"id": 9007199254740992}}}`))
		if a == b {
			t.Fatalf("both %q", a)
		}
	})
	t.Run("TypeErrorInExpression", func(t *testing.T) {
		t.Parallel()
		_, err := mustExpr(t, "charge", "$uppercase(payload.order.id)").Key(order(42))
		if !errors.Is(err, keytemplate.ErrEval) {
			t.Fatalf("got %v, want ErrEval", err)
		}
	})
	t.Run("ErrorFunction", func(t *testing.T) {
		t.Parallel()
		_, err := mustExpr(t, "charge", "payload.order.id ? payload.order.id : $error('no order id')").Key([]byte(`{"payload": {}}`))
		if !errors.Is(err, keytemplate.ErrEval) || !strings.Contains(err.Error(), "no order id") {
			t.Fatalf("got %v, want ErrEval with the message", err)
		}
	})
	t.Run("PadIsBounded", func(t *testing.T) {
		t.Parallel()
		tp := mustExpr(t, "charge", "$pad(payload.order.id, -10, '0')")
		if k, err := tp.Key(order("42")); k != "charge-0000000042" || err != nil {
			t.Fatalf("pad: %q, %v", k, err)
		}
		if _, err := mustExpr(t, "charge", "$pad(payload.order.id, 1000000000)").Key(order("42")); !errors.Is(err, keytemplate.ErrEval) {
			t.Fatalf("a billion-wide pad: %v, want ErrEval", err)
		}
	})
}

func TestSyntaxError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, expr, mention string
	}{
		{"UnclosedParen", "= 'charge-' & $string(payload.order.id", "at byte 38: expected token ')' before end of expression"},
		{"UnterminatedString", "'charge- & payload.order.id", "at byte 1: unterminated string literal"},
		{"OffsetCountsMarker", "=  payload.order.id &", "at byte 21: unexpected end of expression"},
		{"BadInfix", "payload.order.id & & 'x'", "at byte 19"},
		{"Empty", "=", "unexpected end of expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := keytemplate.Expr("charge", tc.expr, nil)
			if !errors.Is(err, keytemplate.ErrSyntax) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v; want ErrSyntax saying %q", err, tc.mention)
			}
		})
	}
	t.Run("Caret", func(t *testing.T) {
		t.Parallel()
		_, err := keytemplate.Expr("charge", "= 'x' & (payload.a", nil)
		want := "keytemplate: syntax error: at byte 18: expected token ')' before end of expression\n\t= 'x' & (payload.a\n\t                  ^"
		if err == nil || err.Error() != want {
			t.Fatalf("got\n%v\nwant\n%s", err, want)
		}
	})
}

func TestNondeterministicRejected(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, expr, mention string }{
		{"Now", "'charge-' & $now()", "$now() reads the clock"},
		{"NowWithPicture", "'charge-' & $now('[Y0001]')", "$now() reads the clock"},
		{"Millis", "'charge-' & $millis()", "$millis() reads the clock"},
		{"Random", "'charge-' & $random()", "$random() returns a random number"},
		{"Shuffle", "'charge-' & $shuffle(payload.items)[0]", "$shuffle() returns the array in a random order"},
		{"Uuid", "'charge-' & $uuid()", "$uuid() returns a random UUID"},
		{"FromMillisOfNow", "'charge-' & $fromMillis($millis())", "$millis() reads the clock"},
		{"NamedNotCalled", "($f := $now; 'charge-' & $f())", "$now reads the clock"},
		{"InCondition", "payload.order.id ? 'charge-' & payload.order.id : $millis()", "$millis() reads the clock"},
		{"InConditionTest", "$random() > 0.5 ? 'a-' & payload.x : 'b-' & payload.x", "$random()"},
		{"InLambda", "'charge-' & $map(payload.items, function($i){ $i.sku & $now() })", "$now() reads the clock"},
		{"InLambdaCalledLater", "($f := function(){ $millis() }; 'charge-' & payload.id & $f())", "$millis() reads the clock"},
		{"InNestedLambda", "(function($a){ function($b){ $random() } })(1)", "$random()"},
		{"InPathStep", "payload.order.$millis()", "$millis() reads the clock"},
		{"InPredicate", "payload.items[$random() < 0.5].sku", "$random()"},
		{"InSortTerm", "$join(payload.items^($random()).sku)", "$random()"},
		{"ApplyOperator", "payload.id ~> $now", "$now() reads the clock"},
		{"AsArgument", "$string($now)", "$now reads the clock"},
		{"InPartial", "'x' & payload.id & $now(?)('[Y]')", "$now() reads the clock"},
		{"InTransform", "payload ~> |order|{'at': $now()}|", "$now() reads the clock"},
		{"InBlock", "(payload.id; $millis())", "$millis()"},
		{"InArray", "$join([payload.id, $string($millis())])", "$millis()"},
		{"Keys", "$join($keys(payload), ',')", "$keys() follows the order of an object's fields"},
		{"Each", "$join($each(payload, function($v){$v}))", "$each()"},
		{"Spread", "$string($spread(payload))", "$spread()"},
		{"Wildcard", "$join(payload.order.*, '-')", "the wildcard * follows the order"},
		{"Descendants", "$join(payload.**.id, '-')", "the descendant operator **"},
		{"ShadowedNow", "($now := payload.x; $now)", "$now reads the clock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := keytemplate.Expr("charge", tc.expr, nil)
			if !errors.Is(err, keytemplate.ErrNondeterministic) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v; want ErrNondeterministic saying %q", err, tc.mention)
			}
		})
	}
}

func TestDataThatLooksLikeCode(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		"'$now' & payload.id",
		`"$now()" & payload.id`,
		"'$millis() $random() $keys(x) * **' & payload.id",
		`"\"$now\"" & payload.id`,
		"payload.`$now`",
		"payload.`$random()`",
		"$nowhere & payload.id", // an unbound variable, not $now
		"$contains(payload.id, /\\$now/) ? 'n-' & payload.id : payload.id",
	} {
		if _, err := keytemplate.Expr("charge", expr, nil); err != nil {
			t.Errorf("Expr(%q): %v", expr, err)
		}
	}
	k, err := mustExpr(t, "charge", "'$now-' & payload.`$now`").Key([]byte(`{"payload": {"$now": "x"}}`))
	if k != "charge-$now-x" || err != nil {
		t.Fatalf("Key: %q, %v", k, err)
	}
}

func TestUnsupported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, expr, mention string }{
		{"Lambda", "(function($x){ $x })(payload.id)", "function definitions are not allowed"},
		{"Recursion", "($f := function($x){ $f($x) }; $f(payload.id))", "function definitions are not allowed"},
		{"SelfApplication", "(λ($f){ $f($f) })(λ($f){ $f($f) })", "function definitions are not allowed"},
		{"Map", "$join($map(payload.items, $string))", "$map() takes a function"},
		{"FunctionValue", "payload.id & $string", "$string without a call is a function value"},
		{"Partial", "payload.id ~> $substring(?, 1)", "partial application"},
		// The library inserts payload.id into the call's arguments in the
		// shared syntax tree on every evaluation: the second key would
		// fail ("takes 2 arguments, got 3") or differ.
		{"ApplyWithArguments", "payload.items.sku ~> $join('.')", "lhs ~> $f(args) is not supported"},
		{"Eval", "$eval('payload.id')", "$eval()"},
		{"Unknown", "$frobnicate(payload.id)", "$frobnicate() is not a built-in function"},
		{"CallVariable", "($f := payload.id; $f())", "$f() is not a built-in function"},
		{"Range", "$join([1..100000000].$string(), '') & payload.id", "ranges"},
		{"Object", "$string({'a': payload.id})", "object constructors"},
		{"Group", "$string(payload.items{sku: qty})", "grouping"},
		{"RegexValue", "payload.id & /x/", "a regular expression is a function value"},
		{"HideBuiltin", "($string := payload.id; $string)", "would hide the built-in function $string"},
		{"Constant", "'charge-' & 'o-42'", "reads nothing from the intent"},
		{"ConstantNumber", "42", "reads nothing from the intent"},
		{"ConstantFunction", "$uppercase('charge-x')", "reads nothing from the intent"},
		{"TooLong", "payload.id & '" + strings.Repeat("x", keytemplate.MaxExprBytes) + "'", "longer than 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := keytemplate.Expr("charge", tc.expr, nil)
			if !errors.Is(err, keytemplate.ErrUnsupported) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v; want ErrUnsupported saying %q", err, tc.mention)
			}
		})
	}
	t.Run("ParseRefusesLiteral", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"charge-o-42", "'charge-' & payload.order.id", ""} {
			if _, err := keytemplate.Parse("charge", v, nil); !errors.Is(err, keytemplate.ErrUnsupported) || !strings.Contains(err.Error(), "literal") {
				t.Errorf("Parse(%q): %v, want ErrUnsupported (literal)", v, err)
			}
		}
	})
}

func TestBadKey(t *testing.T) {
	t.Parallel()
	tp := mustExpr(t, "charge", seed)
	for _, tc := range []struct{ name, id, mention string }{
		{"TooLong", strings.Repeat("x", 256-len("charge-")), "256 bytes, longer than 255"},
		{"Space", "o 42", "space at byte 8"},
		{"NonASCII", "café", "non-ASCII byte 0xc3 at byte 10"},
		{"Tab", "o\t42", "control byte 0x09"},
		{"Newline", "o\n42", "control byte 0x0a"},
		{"Delete", "o\x7f42", "control byte 0x7f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := tp.Key(order(tc.id))
			if !errors.Is(err, keytemplate.ErrBadKey) || k != "" || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("Key: %q, %v; want ErrBadKey saying %q", k, err, tc.mention)
			}
		})
	}
	t.Run("MaxLength", func(t *testing.T) {
		t.Parallel()
		id := strings.Repeat("x", 255-len("charge-"))
		if k, err := tp.Key(order(id)); err != nil || len(k) != 255 {
			t.Fatalf("255-byte key: %d bytes, %v", len(k), err)
		}
	})
	t.Run("AllPrintable", func(t *testing.T) {
		t.Parallel()
		var b strings.Builder
		for c := byte(0x21); c <= 0x7e; c++ {
			b.WriteByte(c)
		}
		if k, err := tp.Key(order(b.String())); err != nil || k != "charge-"+b.String() {
			t.Fatalf("printable ASCII: %q, %v", k, err)
		}
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	tp := mustExpr(t, "charge", seed)
	for _, tc := range []struct{ name, in, mention string }{
		{"NotJSON", `{"payload": `, "not JSON"},
		{"Empty", ``, "not JSON"},
		{"Array", `[{"payload": {}}]`, "must be a JSON object"},
		{"Null", `null`, "must be a JSON object"},
		{"String", `"o-42"`, "must be a JSON object"},
		{"Trailing", `{"payload": {"order": {"id": "a"}}} {}`, "more than one JSON value"},
		{"TrailingGarbage", `{"payload": {"order": {"id": "a"}}} x`, "more than one JSON value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tp.Key([]byte(tc.in)); !errors.Is(err, keytemplate.ErrBadInput) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v; want ErrBadInput saying %q", err, tc.mention)
			}
		})
	}
	t.Run("TrailingSpace", func(t *testing.T) {
		t.Parallel()
		if k, err := tp.Key([]byte("{\"payload\": {\"order\": {\"id\": \"a\"}}}\n\n")); k != "charge-a" || err != nil {
			t.Fatalf("%q, %v", k, err)
		}
	})
	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		small, err := keytemplate.Expr("charge", seed, &keytemplate.Config{MaxInputBytes: 64})
		if err != nil {
			t.Fatal(err)
		}
		in := order(strings.Repeat("x", 64))
		if _, err := small.Key(in); !errors.Is(err, keytemplate.ErrBadInput) || !strings.Contains(err.Error(), "more than 64") {
			t.Fatalf("got %v", err)
		}
		if k, err := small.Key(order("o-1")); k != "charge-o-1" || err != nil {
			t.Fatalf("small input: %q, %v", k, err)
		}
		if _, err := tp.Key(make([]byte, keytemplate.DefaultMaxInputBytes+1)); !errors.Is(err, keytemplate.ErrBadInput) {
			t.Fatalf("default bound: %v", err)
		}
	})
	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{-1, 256<<20 + 1} {
			if _, err := keytemplate.Expr("charge", seed, &keytemplate.Config{MaxInputBytes: n}); !errors.Is(err, keytemplate.ErrBadConfig) || !strings.Contains(err.Error(), "MaxInputBytes") {
				t.Errorf("MaxInputBytes %d: %v", n, err)
			}
		}
	})
}

func TestKeyOf(t *testing.T) {
	t.Parallel()
	tp := mustExpr(t, "charge", seed)
	type ord struct {
		ID int64 `json:"id"`
	}
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"Map", map[string]any{"payload": map[string]any{"order": map[string]any{"id": "o-42"}}}, "charge-o-42"},
		{"Struct", struct {
			Payload struct {
				Order ord `json:"order"`
			} `json:"payload"`
		}{Payload: struct {
			Order ord `json:"order"`
		}{ord{9007199254740993}}}, "charge-9007199254740993"},
		{"RawMessage", json.RawMessage(`{"payload": {"order": {"id": "o-42"}}}`), "charge-o-42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if k, err := tp.KeyOf(tc.in); k != tc.want || err != nil {
				t.Fatalf("KeyOf: %q, %v; want %q", k, err, tc.want)
			}
		})
	}
	t.Run("Unmarshalable", func(t *testing.T) {
		t.Parallel()
		if _, err := tp.KeyOf(map[string]any{"payload": make(chan int)}); !errors.Is(err, keytemplate.ErrBadInput) {
			t.Fatalf("got %v, want ErrBadInput", err)
		}
	})
}

func TestFunc(t *testing.T) {
	t.Parallel()
	orderID := func(in map[string]any) (string, error) {
		p, _ := in["payload"].(map[string]any)
		o, _ := p["order"].(map[string]any)
		switch id := o["id"].(type) {
		case string:
			return id, nil
		case json.Number:
			return id.String(), nil
		}
		return "", errors.New("no order id")
	}
	tp, err := keytemplate.Func("charge", orderID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Operation() != "charge" || tp.String() != "func" {
		t.Fatalf("Operation %q, String %q", tp.Operation(), tp.String())
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		err  error
	}{
		{"String", order("o-42"), "charge-o-42", nil},
		// Always prefixed: the function returns what follows "charge-".
		{"LooksPrefixed", order("charge-o-42"), "charge-charge-o-42", nil},
		{"ExactNumber", []byte(`{"payload": {"order": {"id": 12345678901234567890.50}}}`), "charge-12345678901234567890.50", nil},
		{"Missing", []byte(`{"payload": {}}`), "", keytemplate.ErrEval},
		{"Empty", order(""), "", keytemplate.ErrMissingField},
		{"BadKey", order("o 42"), "", keytemplate.ErrBadKey},
		{"BadInput", []byte(`[]`), "", keytemplate.ErrBadInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := tp.Key(tc.in)
			if k != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Key: %q, %v; want %q, %v", k, err, tc.want, tc.err)
			}
		})
	}
	t.Run("ErrorPropagates", func(t *testing.T) {
		t.Parallel()
		mine := errors.New("mine")
		tp, _ := keytemplate.Func("charge", func(map[string]any) (string, error) { return "", mine }, nil)
		if _, err := tp.Key(order("x")); !errors.Is(err, mine) || !errors.Is(err, keytemplate.ErrEval) {
			t.Fatalf("got %v; want it to wrap both mine and ErrEval", err)
		}
	})
	t.Run("PanicBecomesError", func(t *testing.T) {
		t.Parallel()
		tp, _ := keytemplate.Func("charge", func(in map[string]any) (string, error) {
			return in["payload"].(map[string]any)["nope"].(string), nil
		}, nil)
		if _, err := tp.Key(order("x")); !errors.Is(err, keytemplate.ErrEval) || !strings.Contains(err.Error(), "panicked") {
			t.Fatalf("got %v; want ErrEval (panicked)", err)
		}
	})
	t.Run("FreshInputEachCall", func(t *testing.T) {
		t.Parallel()
		n := 0
		tp, _ := keytemplate.Func("charge", func(in map[string]any) (string, error) {
			n++
			if _, seen := in["seen"]; seen {
				return "", errors.New("the input of an earlier call leaked")
			}
			in["seen"] = true
			return "x", nil
		}, nil)
		in := order("x")
		for range 3 {
			if _, err := tp.Key(in); err != nil {
				t.Fatal(err)
			}
		}
		if n != 3 {
			t.Fatalf("called %d times", n)
		}
	})
	t.Run("NilFunction", func(t *testing.T) {
		t.Parallel()
		if _, err := keytemplate.Func("charge", nil, nil); !errors.Is(err, keytemplate.ErrUnsupported) {
			t.Fatalf("got %v", err)
		}
	})
}

// TestLibrarySemantics pins the behaviour of the JSONata library that keys
// depend on, so that an upgrade that changes them fails here.
func TestLibrarySemantics(t *testing.T) {
	t.Parallel()
	in := []byte(`{"payload": {"n": 3, "s": "Ab", "t": "2024-01-02T03:04:05Z", "items": [{"sku": "b", "p": 2}, {"sku": "a", "p": 1}]}}`)
	for _, tc := range []struct{ expr, want string }{
		{"$string(1 / payload.n)", "0.3333333333333333"},
		{"$string(2 / payload.n * 3)", "2"},
		{"$string(payload.n * 0.1)", "0.30000000000000004"},
		{"$lowercase(payload.s)", "ab"},
		{"$join(payload.items.sku, ',')", "b,a"},
		{"$join(payload.items^(p).sku, ',')", "a,b"},
		{"$join(payload.items[p > 1].sku, ',')", "b"},
		{"payload.items[0].sku", "b"},
		{"$string(payload.items[1])", `{"p":1,"sku":"a"}`},
		{"$substring(payload.s, 1)", "b"},
		{"$replace(payload.s, /[a-z]/, 'x')", "Ax"},
		{"$fromMillis(payload.n - 3)", "1970-01-01T00:00:00.000Z"},
		{"$string($toMillis(payload.t))", "1704164645000"},
	} {
		k, err := mustExpr(t, "t", tc.expr).Key(in)
		if k != "t-"+tc.want || err != nil {
			t.Errorf("%s: %q, %v; want %q", tc.expr, k, err, "t-"+tc.want)
		}
	}
}
