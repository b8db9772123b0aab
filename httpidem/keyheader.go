package httpidem

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemhq/idem/key"
)

var (
	// errKeyAbsent: no Idempotency-Key header line.
	errKeyAbsent = errors.New("no Idempotency-Key header")
	// errKeyEmpty: a header line whose key is empty ("" or blanks).
	errKeyEmpty = errors.New("the Idempotency-Key header is empty")
)

// keyError says why a present key is malformed.
type keyError struct{ reason string }

func (e *keyError) Error() string { return "malformed Idempotency-Key: " + e.reason }

func badKey(format string, args ...any) error {
	return &keyError{fmt.Sprintf(format, args...)}
}

// parseKey reads the idempotency key from the header's lines (as in
// http.Header, one string per line). The key is accepted bare (abc) or as an
// RFC 9651 sf-string ("abc"), both naming the same key; surrounding spaces
// and tabs are trimmed. It must be 1 to key.MaxKeyLen bytes of printable
// ASCII (0x21-0x7E, plus spaces inside a quoted string) and is never
// truncated or case-folded.
//
// Errors: errKeyAbsent (no line), errKeyEmpty, or a *keyError (repeated
// lines, a byte out of range, a bad quoted string, too long).
func parseKey(lines []string) (string, error) {
	switch len(lines) {
	case 0:
		return "", errKeyAbsent
	case 1:
	default:
		return "", badKey("the header is repeated (%d lines); send it once", len(lines))
	}
	v := strings.Trim(lines[0], " \t")
	if v == "" {
		return "", errKeyEmpty
	}
	var k string
	if v[0] == '"' {
		var err error
		if k, err = unquote(v); err != nil {
			return "", err
		}
		if k == "" {
			return "", errKeyEmpty
		}
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x21 || c > 0x7e {
				return "", badByte(c, i, "a bare key")
			}
		}
		k = v
	}
	if len(k) > key.MaxKeyLen {
		return "", badKey("the key is %d bytes, longer than %d (keys are never truncated)", len(k), key.MaxKeyLen)
	}
	return k, nil
}

// unquote parses an sf-string: DQUOTE *(unescaped / "\" DQUOTE / "\\")
// DQUOTE, nothing after it (parameters are not accepted).
func unquote(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			if i != len(v)-1 {
				return "", badKey("unexpected %q after the quoted key (parameters are not accepted)", v[i+1:])
			}
			return b.String(), nil
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", badKey("a backslash in a quoted key may only escape \" or \\")
			}
			b.WriteByte(v[i])
		case c < 0x20 || c > 0x7e:
			return "", badByte(c, i, "a quoted key")
		default:
			b.WriteByte(c)
		}
		if b.Len() > key.MaxKeyLen {
			return "", badKey("the key is longer than %d bytes (keys are never truncated)", key.MaxKeyLen)
		}
	}
	return "", badKey("the quoted key has no closing quote")
}

func badByte(c byte, i int, where string) error {
	switch {
	case c == ' ':
		return badKey("space at byte %d in %s (spaces are allowed only inside a quoted key)", i, where)
	case c >= 0x80:
		return badKey("non-ASCII byte 0x%02x at byte %d in %s (only printable ASCII is allowed)", c, i, where)
	default:
		return badKey("control byte 0x%02x at byte %d in %s (only printable ASCII is allowed)", c, i, where)
	}
}
