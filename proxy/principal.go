package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
)

// principalHeader reads the caller's identity from one request header. The
// header is a singleton: sent twice with the same value it names one
// caller, with different values none can be told (errRepeated).
type principalHeader struct {
	name string // canonical
	// principal returns the principal a value names, false if none; the
	// value is trimmed, never empty.
	principal func(v string) (string, bool)
}

// errRepeated: the principal header's lines name different callers.
var errRepeated = errors.New("proxy: principal header repeated with different values")

// authorizationHeader is the default principal: the SHA-256 of the
// Authorization value, so that credentials never reach the store or the
// logs, and two callers share keys only when they present the same
// credentials. The auth-scheme is case-insensitive (RFC 9110 §11.1) and
// the spaces after it one separator, so the value hashed is "Scheme
// credentials": the scheme in its common spelling (Bearer, Basic), which
// keeps the keys stored before this folding with their callers, and the
// credentials as sent. A known scheme without credentials after it
// ("Bearer" with nothing after it) names no caller: the callers who send it
// would share one principal, and each other's stored answers. Any other
// lone word is a credential sent without a scheme (a raw API key, as some
// APIs take it) and names its caller as it is. A request without
// credentials has no principal.
func authorizationHeader() principalHeader {
	return principalHeader{name: "Authorization", principal: func(v string) (string, bool) {
		scheme, creds := v, ""
		if i := strings.IndexAny(v, " \t"); i >= 0 {
			scheme, creds = v[:i], strings.TrimLeft(v[i:], " \t")
		}
		switch {
		case creds != "":
			return hashed("authorization-sha256:", titleASCII(scheme)+" "+creds), true
		case knownScheme(scheme):
			return "", false
		}
		return hashed("authorization-sha256:", v), true
	}}
}

// knownSchemes are the HTTP authentication schemes in IANA's registry, and
// a few common unregistered ones, lower-cased: a lone one of them is a
// scheme without credentials, not a credential.
var knownSchemes = []string{
	"basic", "bearer", "concealed", "digest", "dpop", "gnap", "hoba", "mutual", "negotiate", "oauth",
	"privatetoken", "scram-sha-1", "scram-sha-256", "vapid",
	"ntlm", "token", "apikey", "api-key", "aws4-hmac-sha256", "kerberos",
}

func knownScheme(s string) bool {
	for _, k := range knownSchemes {
		if strings.EqualFold(s, k) {
			return true
		}
	}
	return false
}

// titleASCII returns s with its first byte upper-case and the others
// lower-case, ASCII letters only: other bytes stay as they are, so that two
// schemes fold into one only if they differ in case alone.
func titleASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case i == 0 && 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case i > 0 && 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// gatewayHeader reads the header name, set by a trusted gateway in front of
// the proxy (a user or tenant id): its value is the principal.
func gatewayHeader(name string) principalHeader {
	prefix := "header:" + http.CanonicalHeaderKey(name) + ":"
	return principalHeader{name: http.CanonicalHeaderKey(name), principal: func(v string) (string, bool) {
		return prefix + v, true
	}}
}

// of returns r's principal, false if it has none (no header, or an empty
// value), or errRepeated.
func (h principalHeader) of(r *http.Request) (string, bool, error) {
	vals := r.Header[h.name]
	if len(vals) == 0 {
		return "", false, nil
	}
	p, ok := h.value(vals[0])
	for _, v := range vals[1:] {
		if q, qok := h.value(v); q != p || qok != ok {
			return "", false, errRepeated
		}
	}
	return p, ok, nil
}

func (h principalHeader) value(v string) (string, bool) {
	if v = strings.TrimSpace(v); v == "" {
		return "", false
	}
	return h.principal(v)
}

// get is the middleware's Config.Principal. A request whose lines differ
// has none; the Proxy refuses it before the middleware sees it.
func (h principalHeader) get(r *http.Request) (string, bool) {
	p, ok, err := h.of(r)
	return p, ok && err == nil
}

// hashed returns prefix and the hex SHA-256 of v as a netstring ("len:v,"),
// the form principals have always been hashed in, so that keys stored
// before stay with their callers.
func hashed(prefix, v string) string {
	h := sha256.New()
	h.Write(strconv.AppendInt(nil, int64(len(v)), 10))
	h.Write([]byte{':'})
	h.Write([]byte(v))
	h.Write([]byte{','})
	return prefix + hex.EncodeToString(h.Sum(nil))
}
