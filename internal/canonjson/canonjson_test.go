package canonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestDecimal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		lit    string
		digits string
		exp    int
	}{
		{"0", "", 0}, {"-0.000", "", 0}, {"1", "1", 1}, {"100", "1", 3}, {"1e2", "1", 3}, {"0.001", "1", -2},
		{"12.50", "125", 2}, {"1.5E-3", "15", -2}, {"-9007199254740993", "9007199254740993", 16},
		{"3.0000000000000004e-1", "30000000000000004", 0},
	} {
		if d, e := decimal(tt.lit); d != tt.digits || e != tt.exp {
			t.Errorf("decimal(%q) = %q, %d; want %q, %d", tt.lit, d, e, tt.digits, tt.exp)
		}
	}
}

// The strict check in front of jcs refuses exactly what jcs would get
// wrong, and accepts the I-JSON that JavaScript writes.
func TestCheckIJSON(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		`{"a":[1,2.5,-0,1e21,0.30000000000000004,5e-324,1.7976931348623157e308]}`,
		`"\ud83d\ude00 é"`, `{"a":{"a":{"a":1}}}`, `[{"a":1},{"a":1}]`, `123456789012345`, `9007199254740992`,
		`0.1234567890123456`, `true`, `null`,
	} {
		if err := Check([]byte(ok)); err != nil {
			t.Errorf("Check(%s) = %v, want ok", ok, err)
		}
		if _, err := Canonical([]byte(ok)); err != nil {
			t.Errorf("Canonical(%s) = %v", ok, err)
		}
	}
	for _, bad := range []string{
		`{"abc`, `[1 2]`, `[tr ue]`, `{"a":1,"a":2}`, `"\ud800\u0041"`, `"\udc00"`, "\"\xc3\x28\"",
		`9007199254740993`, `1e400`, `1e-400`, `0.12345678901234567`, `{"a":1}x`,
	} {
		if err := Check([]byte(bad)); err == nil {
			t.Errorf("Check(%q) accepted", bad)
		}
	}
}

func TestCanonicalForm(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		` { "b" : [ 1.0 , 2E1 ], "a" : "\u00e9\/" } `: `{"a":"é/","b":[1,20]}`,
		`{"\u20ac":1,"\ud83d\ude00":2,"a":3}`:         `{"a":3,"€":1,"😀":2}`, // UTF-16 order
		`1E21`:                                        `1e+21`,
		`-0`:                                          `0`,
		`"\u000f"`:                                    `"\u000f"`,
	} {
		got, err := Canonical([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%q does not decode: %v", b, err)
	}
	return v
}

// walk follows path through a decoded JSON value as lookup does.
func walk(v any, path []string) (any, bool) {
	for _, seg := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg]; !ok {
				return nil, false
			}
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || strconv.Itoa(n) != seg || n >= len(x) {
				return nil, false
			}
			v = x[n]
		default:
			return nil, false
		}
	}
	return v, true
}

// FuzzCanonicalJSON: an accepted body's canonical form is valid JSON,
// means the same as the body (so two bodies with one canonical form are
// the same data: no collisions), is a fixed point, and is what every
// member lookup agrees with.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,2e0,"x"]}`, ` {"a" : {"c":null,"b":true}} `, `"\u00e9\ud83d\ude00"`,
		`[0.30000000000000004,1e21,-0,1E-7]`, `{"a":1,"a":2}`, `{"abc`, `[1 2]`, `"\ud800\u0041"`, `9007199254740993`,
		`{"\u0061":1,"b":{"0":[{"x":1}]}}`, `[]`, `{}`, "", `{"a":"\u0000\u001f\u007f/"}`, `123456789012345.6`} {
		f.Add([]byte(s), "a")
	}
	f.Add([]byte(`{"b":{"0":[{"x":1}]}}`), "b.0.0.x")
	f.Add([]byte(`[[1],[2,{"k":"v"}]]`), "1.1.k")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		c, err := Canonical(body)
		if err != nil {
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("error of another type: %v", err)
			}
			return
		}
		trimmed := TrimSpace(body)
		if len(trimmed) == 0 {
			if len(c) != 0 {
				t.Fatalf("empty body gave %q", c)
			}
			return
		}
		if !json.Valid(c) || Check(c) != nil {
			t.Fatalf("%q -> canonical %q is not I-JSON", body, c)
		}
		if again, err := Canonical(c); err != nil || !bytes.Equal(again, c) {
			t.Fatalf("not a fixed point: %q -> %q -> %q, %v", body, c, again, err)
		}
		want := decodeAny(t, body)
		if got := decodeAny(t, c); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q -> %q changed the data: %#v, want %#v", body, c, got, want)
		}
		if path == "" {
			return
		}
		segs := strings.Split(path, ".")
		raw, found := Lookup(trimmed, segs)
		ref, ok := walk(want, segs)
		if found != ok {
			t.Fatalf("Lookup(%q, %q) found=%v, decoded says %v", body, path, found, ok)
		}
		if found {
			if got := decodeAny(t, raw); !reflect.DeepEqual(got, ref) {
				t.Fatalf("Lookup(%q, %q) = %q, want %#v", body, path, raw, ref)
			}
			if _, err := canonical(raw); err != nil {
				t.Fatalf("member %q of accepted body does not canonicalise: %v", raw, err)
			}
		}
	})
}
