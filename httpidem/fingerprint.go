package httpidem

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/idemhq/idem/internal/canonjson"
	"github.com/idemhq/idem/key"
)

// fingerprintTag versions this package's choice of parts; it is hashed
// first, so that a later change of parts never matches an old fingerprint
// by accident.
var fingerprintTag = []byte("idem.http.v1")

// fingerprintVersion is the version byte of this package's fingerprints.
// Version 2 keeps the order of the values of one query parameter (version
// 1 sorted them, so ?a=1&a=2 and ?a=2&a=1 were the same request). Records
// written with version 1 are compared against a version-1 fingerprint of
// the retry (key.Request.FingerprintFor), so that the change never turns a
// retry of a stored key into a conflict.
const fingerprintVersion = 2

// request returns the key request's fingerprint (the current version) and
// the function that recomputes it under an older version.
func (s *settings) request(r *http.Request, body []byte) (key.Fingerprint, func(byte) (key.Fingerprint, bool), error) {
	fp, err := s.fingerprint(r, body, fingerprintVersion)
	if err != nil {
		return nil, nil, err
	}
	older := func(v byte) (key.Fingerprint, bool) {
		if v != key.FingerprintV1 {
			return nil, false
		}
		old, err := s.fingerprint(r, body, key.FingerprintV1)
		return old, err == nil
	}
	return fp, older, nil
}

// fingerprint hashes what makes two requests "the same": method, path,
// canonical query, the significant headers, and the body as the mode says,
// under the given version (see fingerprintVersion). It returns a
// *canonjson.Error when the body does not suit a JSON mode.
func (s *settings) fingerprint(r *http.Request, body []byte, version byte) (key.Fingerprint, error) {
	parts := make([][]byte, 0, 8+2*len(s.sig)+2*len(s.fields))
	parts = append(parts, fingerprintTag, []byte(r.Method), []byte(normalisePath(r.URL.EscapedPath())))
	parts = append(parts, canonicalQuery(r.URL.RawQuery, version >= 2))
	for _, name := range s.sig {
		parts = append(parts, []byte(name), encodeValues(r.Header[name]))
	}
	parts = append(parts, s.modeTag)
	switch s.mode {
	case bodyRaw:
		parts = append(parts, body)
	case bodyJSON:
		c, err := canonjson.Canonical(body)
		if err != nil {
			return nil, err
		}
		parts = append(parts, c)
	case bodyFields:
		vals, err := canonjson.Fields(body, s.fields)
		if err != nil {
			return nil, err
		}
		parts = append(parts, vals...)
	}
	return key.FingerprintVersion(version, parts...), nil
}

// encodeValues writes a header's values as netstrings, so that absent, one
// empty value, and several values all differ.
func encodeValues(vals []string) []byte {
	var b []byte
	b = strconv.AppendInt(b, int64(len(vals)), 10)
	b = append(b, '#')
	for _, v := range vals {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
		b = append(b, ',')
	}
	return b
}

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// normalisePath applies RFC 3986 §6.2.2 normalisation to an escaped path:
// percent-encoded unreserved characters are decoded and the hex digits of
// the others upper-cased. Reserved characters keep their form ("%2F" is not
// "/"). A '%' not followed by two hex digits is kept as it is.
func normalisePath(p string) string {
	if strings.IndexByte(p, '%') < 0 {
		return p
	}
	const hexUpper = "0123456789ABCDEF"
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			hi, ok1 := unhex(p[i+1])
			lo, ok2 := unhex(p[i+2])
			if ok1 && ok2 {
				if c := hi<<4 | lo; unreserved(c) {
					b = append(b, c)
				} else {
					b = append(b, '%', hexUpper[hi], hexUpper[lo])
				}
				i += 2
				continue
			}
		}
		b = append(b, p[i])
	}
	return string(b)
}

// canonicalQuery returns the query in one canonical form: pairs decoded
// (form encoding: '+' is a space), sorted by name (with keepOrder, the
// values of one name keep the order they came in, as an application reading
// them in order sees them; without it, version 1, by value too), and encoded
// again with url.QueryEscape; "a" and "a=" are the same pair, as for
// url.ParseQuery, and empty pairs are dropped. A query that does not decode
// (a bad percent escape) is kept raw behind another tag, so it never equals
// a decodable one.
func canonicalQuery(raw string, keepOrder bool) []byte {
	if raw == "" {
		return []byte("q:")
	}
	type pair struct{ k, v string }
	var pairs []pair
	for seg := range strings.SplitSeq(raw, "&") {
		if seg == "" {
			continue
		}
		k, v, _ := strings.Cut(seg, "=")
		uk, err1 := url.QueryUnescape(k)
		uv, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return append([]byte("r:"), raw...)
		}
		pairs = append(pairs, pair{uk, uv})
	}
	slices.SortStableFunc(pairs, func(a, b pair) int {
		if c := strings.Compare(a.k, b.k); c != 0 || keepOrder {
			return c
		}
		return strings.Compare(a.v, b.v)
	})
	b := []byte("q:")
	for i, p := range pairs {
		if i > 0 {
			b = append(b, '&')
		}
		b = append(b, url.QueryEscape(p.k)...)
		b = append(b, '=')
		b = append(b, url.QueryEscape(p.v)...)
	}
	return b
}
