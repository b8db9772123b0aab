package key

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
)

// MaxKeyLen is the longest idempotency key accepted, in bytes (docs/http.md).
const MaxKeyLen = 255

// scopeTag versions the scope encoding; a new encoding gets a new tag, so an
// old and a new encoding of one triple never name the same record by chance.
const scopeTag = "idem.scope.v1"

// Scope names one attempted operation of one caller: (principal, operation,
// key). Two scopes that differ in any part are independent keys; they never
// see each other's results and never block each other.
type Scope struct {
	// Principal is who is calling, from authentication (a user, an API key's
	// hash, a tenant). Required.
	Principal string
	// Operation is what is being done, e.g. "POST /charges". Required.
	Operation string
	// Key is the caller's idempotency key: 1 to MaxKeyLen bytes, compared
	// exactly (case-sensitive, never truncated).
	Key string
}

// Validate reports whether s can be stored: every part present and the key
// within MaxKeyLen. It returns an error wrapping ErrInvalidScope.
func (s Scope) Validate() error {
	switch {
	case s.Principal == "":
		return fmt.Errorf("%w: empty principal", ErrInvalidScope)
	case s.Operation == "":
		return fmt.Errorf("%w: empty operation", ErrInvalidScope)
	case s.Key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidScope)
	case len(s.Key) > MaxKeyLen:
		return fmt.Errorf("%w: key is %d bytes, longer than %d", ErrInvalidScope, len(s.Key), MaxKeyLen)
	}
	return nil
}

// Encode returns the scope as one unambiguous byte string: a version tag,
// then each part as a netstring ("<decimal length>:<bytes>,"). Because every
// part carries its length, no two different triples encode alike, whatever
// bytes the parts hold ("a:b" + "c" never equals "a" + "b:c").
func (s Scope) Encode() []byte {
	b := make([]byte, 0, len(scopeTag)+len(s.Principal)+len(s.Operation)+len(s.Key)+24)
	b = append(b, scopeTag...)
	for _, part := range [...]string{s.Principal, s.Operation, s.Key} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
		b = append(b, ',')
	}
	return b
}

// StoreKey returns the key the record is stored under: the SHA-256 of
// Encode, 32 raw bytes. A fixed size keeps index entries small whatever the
// parts' lengths, and the hash keeps principals out of the store.
func (s Scope) StoreKey() string {
	sum := sha256.Sum256(s.Encode())
	return string(sum[:])
}

var errBadEncoding = errors.New("key: malformed scope encoding")

// DecodeScope parses what Encode produced. It exists for tools that show a
// record's scope and to prove, by fuzzing, that the encoding is injective.
func DecodeScope(b []byte) (Scope, error) {
	if len(b) < len(scopeTag) || string(b[:len(scopeTag)]) != scopeTag {
		return Scope{}, errBadEncoding
	}
	b = b[len(scopeTag):]
	var parts [3]string
	for i := range parts {
		colon := -1
		for j, c := range b {
			if c == ':' {
				colon = j
				break
			}
			if c < '0' || c > '9' || j >= 10 {
				return Scope{}, errBadEncoding
			}
		}
		if colon < 1 || (colon > 1 && b[0] == '0') {
			return Scope{}, errBadEncoding
		}
		n, err := strconv.Atoi(string(b[:colon]))
		if err != nil || n > len(b)-colon-2 {
			return Scope{}, errBadEncoding
		}
		b = b[colon+1:]
		if b[n] != ',' {
			return Scope{}, errBadEncoding
		}
		parts[i] = string(b[:n])
		b = b[n+1:]
	}
	if len(b) != 0 {
		return Scope{}, errBadEncoding
	}
	return Scope{Principal: parts[0], Operation: parts[1], Key: parts[2]}, nil
}
