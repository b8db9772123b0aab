package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
)

// authorizationPrincipal is the default principal: the SHA-256 of the
// request's Authorization header values, so that credentials never reach
// the store or the logs, and two callers share keys only when they present
// the same credentials. A request without a non-empty Authorization header
// has no principal.
func authorizationPrincipal(r *http.Request) (string, bool) {
	return hashedValues(r.Header.Values("Authorization"), "authorization-sha256:")
}

// headerPrincipal returns a principal function that reads the header name,
// set by a trusted gateway in front of the proxy (a user or tenant id).
func headerPrincipal(name string) func(*http.Request) (string, bool) {
	prefix := "header:" + http.CanonicalHeaderKey(name) + ":"
	return func(r *http.Request) (string, bool) {
		vals := r.Header.Values(name)
		switch {
		case len(vals) == 0:
			return "", false
		case len(vals) == 1:
			v := strings.TrimSpace(vals[0])
			if v == "" {
				return "", false
			}
			return prefix + v, true
		}
		// Several values: a client may have added its own next to the
		// gateway's. Hash them all, so that no combination aliases the
		// principal of one of its values.
		return hashedValues(vals, prefix+"sha256:")
	}
}

// hashedValues hashes the header values as netstrings, so that moving bytes
// from one value to the next changes the hash. Empty values are ignored; no
// non-empty value means no principal.
func hashedValues(vals []string, prefix string) (string, bool) {
	h := sha256.New()
	found := false
	var lenbuf [20]byte
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		found = true
		h.Write(strconv.AppendInt(lenbuf[:0], int64(len(v)), 10))
		h.Write([]byte{':'})
		h.Write([]byte(v))
		h.Write([]byte{','})
	}
	if !found {
		return "", false
	}
	return prefix + hex.EncodeToString(h.Sum(nil)), true
}
