package httpidem

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestNormalisePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/charges":         "/charges",
		"/a%62c":           "/abc",
		"/a%7e":            "/a~",
		"/a%2f":            "/a%2F",
		"/a%2Fb":           "/a%2Fb",
		"/%e2%82%ac":       "/%E2%82%AC",
		"/100%":            "/100%",
		"/bad%zz":          "/bad%zz",
		"/a%2":             "/a%2",
		"/%41%42%43%2d%5F": "/ABC-_",
	} {
		if got := normalisePath(in); got != want {
			t.Errorf("normalisePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCanonicalQuery(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ a, b string }{
		{"a=1&b=2", "b=2&a=1"},
		{"a=%31", "a=1"},
		{"q=a+b", "q=a%20b"},
		{"a", "a="},
		{"a=1&&b=2&", "b=2&a=1"},
		{"x=%e2%82%ac", "x=%E2%82%AC"},
		{"b=1&a=2&a=1", "a=2&a=1&b=1"},
	} {
		if a, b := canonicalQuery(tt.a, true), canonicalQuery(tt.b, true); !bytes.Equal(a, b) {
			t.Errorf("%q -> %q and %q -> %q, want equal", tt.a, a, tt.b, b)
		}
	}
	for _, tt := range []struct{ a, b string }{
		{"a=1", "a=2"},
		{"a=1", "a=1&a=1"},
		{"a=1&b=2", "a=1%26b%3D2"},
		{"%zz", "%25zz"},
		{"", "a"},
		// The values of one name keep their order: an application that
		// reads ?item=a&item=b as a list gets another list.
		{"a=1&a=2", "a=2&a=1"},
	} {
		if a, b := canonicalQuery(tt.a, true), canonicalQuery(tt.b, true); bytes.Equal(a, b) {
			t.Errorf("%q and %q both -> %q, want different", tt.a, tt.b, a)
		}
	}
}

// Every part of the request that docs/http.md names changes the fingerprint;
// nothing else does.
func TestFingerprintParts(t *testing.T) {
	t.Parallel()
	s, err := (&Config{Principal: func(*http.Request) (string, bool) { return "", false },
		SignificantHeaders: []string{"X-Account"}}).settings()
	if err != nil {
		t.Fatal(err)
	}
	fp := func(method, target, account, body string, extra ...string) string {
		r := httptest.NewRequest(method, target, nil)
		if account != "" {
			r.Header.Set("X-Account", account)
		}
		for i := 0; i+1 < len(extra); i += 2 {
			r.Header.Set(extra[i], extra[i+1])
		}
		f, _, err := s.request(r, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return f.String()
	}
	base := fp("POST", "/c?a=1", "x", "body")
	if fp("POST", "/c?a=1", "x", "body", "X-Trace", "1", "Idempotency-Key", "other") != base {
		t.Error("a header that is not significant changed the fingerprint")
	}
	if fp("POST", "/%63?a=%31", "x", "body") != base {
		t.Error("percent-encoding changed the fingerprint")
	}
	for name, other := range map[string]string{
		"method":  fp("PATCH", "/c?a=1", "x", "body"),
		"path":    fp("POST", "/d?a=1", "x", "body"),
		"query":   fp("POST", "/c?a=2", "x", "body"),
		"header":  fp("POST", "/c?a=1", "y", "body"),
		"noheadr": fp("POST", "/c?a=1", "", "body"),
		"body":    fp("POST", "/c?a=1", "x", "bodY"),
		"nobody":  fp("POST", "/c?a=1", "x", ""),
	} {
		if other == base {
			t.Errorf("the %s did not change the fingerprint", name)
		}
	}
}

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
		if err := checkIJSON([]byte(ok)); err != nil {
			t.Errorf("checkIJSON(%s) = %v, want ok", ok, err)
		}
		if _, err := canonicalBody([]byte(ok)); err != nil {
			t.Errorf("canonicalBody(%s) = %v", ok, err)
		}
	}
	for _, bad := range []string{
		`{"abc`, `[1 2]`, `[tr ue]`, `{"a":1,"a":2}`, `"\ud800\u0041"`, `"\udc00"`, "\"\xc3\x28\"",
		`9007199254740993`, `1e400`, `1e-400`, `0.12345678901234567`, `{"a":1}x`,
	} {
		if err := checkIJSON([]byte(bad)); err == nil {
			t.Errorf("checkIJSON(%q) accepted", bad)
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
		got, err := canonicalBody([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("canonicalBody(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

func TestStoredEncoding(t *testing.T) {
	t.Parallel()
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/x"}, "Set-Cookie": {"s=1"}}
	b := encodeResponse(201, h, []string{"Content-Type", "Location"}, []byte(`{"ok":true}`))
	sr, err := decodeResponse(b)
	if err != nil || sr.marker || sr.status != 201 || string(sr.body) != `{"ok":true}` ||
		len(sr.header) != 2 || sr.header.Get("Location") != "/x" {
		t.Fatalf("decode: %+v %v", sr, err)
	}
	m, err := decodeResponse(encodeMarker(200))
	if err != nil || !m.marker || m.status != 200 {
		t.Fatalf("marker: %+v %v", m, err)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 1, 0, 200, 0}, {1, 3, 0, 200, 0}, {1, 1, 0, 0, 0}, {1, 2, 0, 200, 0, 'x'},
		{1, 1, 0, 200, 1, 5, 'a'}, {1, 1, 0, 200, 2, 1, 'b', 0, 1, 'a', 0}} {
		if _, err := decodeResponse(bad); err == nil {
			t.Errorf("decodeResponse(%v) accepted", bad)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "1", -time.Second: "1", time.Nanosecond: "1", time.Second: "1", time.Second + 1: "2",
		1500 * time.Millisecond: "2", 30 * time.Second: "30", 24 * time.Hour: "86400",
	} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestFingerprintFieldsMode(t *testing.T) {
	t.Parallel()
	m := FingerprintFields("b.c", "a", "with:colon,comma")
	mode, paths, err := m.parse()
	if err != nil || mode != bodyFields {
		t.Fatalf("parse: %v", err)
	}
	var got []string
	for _, p := range paths {
		got = append(got, strings.Join(p, "."))
	}
	if strings.Join(got, "|") != "a|b.c|with:colon,comma" {
		t.Fatalf("paths %q", got)
	}
}
