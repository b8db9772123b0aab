package key

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// FingerprintV1 is the version byte of SHA-256 fingerprints over
// length-prefixed parts, the one FingerprintOf writes. A caller that
// changes its choice of parts writes another with FingerprintVersion
// (package httpidem writes version 2).
const FingerprintV1 byte = 1

// Fingerprint identifies a request's content: a version byte, then the
// digest. The version is stored with it, so that a new algorithm can be
// introduced without turning every stored key into a conflict: the guard
// compares like with like (see Request.FingerprintFor).
type Fingerprint []byte

// FingerprintOf returns the version-1 fingerprint of the request parts, in
// order: SHA-256 over each part as a netstring, so that moving a byte from
// one part to the next changes the fingerprint. Pass what makes two requests
// "the same" (method, path, canonical query, significant headers, body).
func FingerprintOf(parts ...[]byte) Fingerprint {
	h := sha256.New()
	var lenbuf [20]byte
	for _, p := range parts {
		h.Write(strconv.AppendInt(lenbuf[:0], int64(len(p)), 10))
		h.Write([]byte{':'})
		h.Write(p)
		h.Write([]byte{','})
	}
	fp := make(Fingerprint, 1, 1+sha256.Size)
	fp[0] = FingerprintV1
	return h.Sum(fp)
}

// FingerprintVersion is FingerprintOf under another version byte (1 to
// 255), for a caller that changed which parts it hashes: the digest is the
// same SHA-256 over netstrings, and the version tells a stored fingerprint
// of the old choice of parts from one of the new, so that the caller can
// recompute the old one for a retry (Request.FingerprintFor) instead of
// seeing a conflict.
func FingerprintVersion(version byte, parts ...[]byte) Fingerprint {
	fp := FingerprintOf(parts...)
	if version != 0 {
		fp[0] = version
	}
	return fp
}

// Version returns the fingerprint's version byte, or 0 if it is empty.
func (f Fingerprint) Version() byte {
	if len(f) == 0 {
		return 0
	}
	return f[0]
}

// String formats f as "v<version>:<hex digest>".
func (f Fingerprint) String() string {
	if len(f) == 0 {
		return ""
	}
	return "v" + strconv.Itoa(int(f[0])) + ":" + hex.EncodeToString(f[1:])
}

// ParseFingerprint parses what String produced.
func ParseFingerprint(s string) (Fingerprint, error) {
	var v int
	var digest string
	if len(s) < 3 || s[0] != 'v' {
		return nil, errors.New("key: fingerprint must look like v1:<hex>")
	}
	i := 1
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 1 || i >= len(s) || s[i] != ':' || s[1] == '0' {
		return nil, errors.New("key: fingerprint must look like v1:<hex>")
	}
	v, err := strconv.Atoi(s[1:i])
	if err != nil || v < 1 || v > 255 {
		return nil, fmt.Errorf("key: fingerprint version %q out of range", s[1:i])
	}
	digest = s[i+1:]
	b, err := hex.DecodeString(digest)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("key: fingerprint digest: not hex")
	}
	return append(Fingerprint{byte(v)}, b...), nil
}
