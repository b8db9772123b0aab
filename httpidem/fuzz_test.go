package httpidem

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/key"
)

// quoteKey writes k as an sf-string.
func quoteKey(k string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

// FuzzParseKey: whatever the header line, an accepted key is 1 to 255
// bytes of printable ASCII; a bare key is the trimmed line itself; the
// quoted form of any accepted key names the same key, and so does the bare
// form when it has one; two lines are always refused.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, " abc\t", `"a b"`, `"a\"b\\c"`, "a b", "", `""`, `"abc`,
		`"abc";x=1`, "ключ", "a\x00", strings.Repeat("k", 255), strings.Repeat("k", 256), `"\x"`, `a"b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if _, err := parseKey([]string{line, line}); err == nil {
			t.Fatalf("two lines accepted")
		}
		k, err := parseKey([]string{line})
		if err != nil {
			var ke *keyError
			if k != "" || !(errors.Is(err, errKeyEmpty) || errors.As(err, &ke)) {
				t.Fatalf("parseKey(%q) = %q, %v", line, k, err)
			}
			return
		}
		if len(k) < 1 || len(k) > key.MaxKeyLen {
			t.Fatalf("key %q is %d bytes", k, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("key %q has byte 0x%02x", k, k[i])
			}
		}
		trimmed := strings.Trim(line, " \t")
		if trimmed[0] != '"' && (k != trimmed || strings.Contains(k, " ")) {
			t.Fatalf("bare line %q gave key %q", line, k)
		}
		if q, err := parseKey([]string{quoteKey(k)}); err != nil || q != k {
			t.Fatalf("quoted %q gave %q, %v; want %q", quoteKey(k), q, err, k)
		}
		if !strings.Contains(k, " ") && k[0] != '"' {
			if b, err := parseKey([]string{k}); err != nil || b != k {
				t.Fatalf("bare %q gave %q, %v", k, b, err)
			}
		}
	})
}

// FuzzCanonicalQuery: the canonical query is a fixed point, does not
// depend on the order of the names, keeps the order of each name's values,
// and (when net/url can parse the query) holds the same pairs in the same
// order per name.
func FuzzCanonicalQuery(f *testing.F) {
	for _, s := range []string{"", "a=1&b=2", "b=2&a=1", "a=%31", "a=1&a=0", "a+b=c%20d", "a", "a=", "&&a=1&",
		"%zz=1", "a=%", "x=%2F%2f", "k=v;w", "%E2%82%AC=%e2%82%ac", "a=1=2", "b=1&a=2&a=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c := canonicalQuery(raw, true)
		if !bytes.HasPrefix(c, []byte("q:")) {
			if !bytes.Equal(c, append([]byte("r:"), raw...)) {
				t.Fatalf("undecodable %q gave %q", raw, c)
			}
			return
		}
		if again := canonicalQuery(string(c[2:]), true); !bytes.Equal(again, c) {
			t.Fatalf("not a fixed point: %q -> %q -> %q", raw, c, again)
		}
		// The names in reverse order, each name's segments in their order.
		var names []string
		groups := map[string][]string{}
		for seg := range strings.SplitSeq(raw, "&") {
			if seg == "" {
				continue
			}
			k, _, _ := strings.Cut(seg, "=")
			name, _ := url.QueryUnescape(k)
			if _, ok := groups[name]; !ok {
				names = append(names, name)
			}
			groups[name] = append(groups[name], seg)
		}
		slices.Reverse(names)
		var segs []string
		for _, n := range names {
			segs = append(segs, groups[n]...)
		}
		if rev := canonicalQuery(strings.Join(segs, "&"), true); !bytes.Equal(rev, c) {
			t.Fatalf("the order of names matters: %q -> %q, reordered -> %q", raw, c, rev)
		}
		want, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		got, err := url.ParseQuery(string(c[2:]))
		if err != nil {
			t.Fatalf("canonical %q does not parse: %v", c, err)
		}
		if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("%q: canonical %q holds %v, want %v", raw, c, got, want)
		}
	})
}

// FuzzStoredResponse: the decoder never panics, and what it accepts
// encodes back to something that decodes the same.
func FuzzStoredResponse(f *testing.F) {
	h := http.Header{"Content-Type": {"text/plain"}, "Location": {"/a", "/b"}}
	f.Add(encodeResponse(201, h, []string{"Content-Type", "Location"}, []byte("body\x00")))
	f.Add(encodeResponse(200, nil, nil, nil))
	f.Add(encodeMarker(200))
	f.Add([]byte{1, 1, 0, 200, 1, 1})
	f.Add([]byte{2, 1, 0, 200, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		sr, err := decodeResponse(b)
		if err != nil {
			return
		}
		var again []byte
		if sr.marker {
			again = encodeMarker(sr.status)
		} else {
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range sr.header {
					if !yield(n) {
						return
					}
				}
			})
			again = encodeResponse(sr.status, sr.header, names, sr.body)
		}
		sr2, err := decodeResponse(again)
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", again, err)
		}
		if sr2.marker != sr.marker || sr2.status != sr.status || !bytes.Equal(sr2.body, sr.body) ||
			len(sr2.header) != len(sr.header) || (len(sr.header) > 0 && !reflect.DeepEqual(sr2.header, sr.header)) {
			t.Fatalf("round trip changed %+v into %+v", sr, sr2)
		}
	})
}
