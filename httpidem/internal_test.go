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
