package event

import (
	"fmt"
	"strconv"
)

// ParseSequence parses the wire form of the sequence extension: a decimal
// integer >= 1 written with ASCII digits only, no sign, no leading zero, no
// surrounding space, no exponent or fraction, and no larger than
// math.MaxInt64. Anything else is an error wrapping [ErrBadSequence] that
// names the attribute and quotes the value.
//
// Accepted: "1", "8", "9223372036854775807".
// Rejected: "", "0", "-1", "+1", "01", " 8", "8 ", "1e3", "1.0", "0x10",
// "9223372036854775808".
func ParseSequence(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: sequence %q: empty", ErrBadSequence, s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: sequence %q: not a decimal integer (digits 0-9 only)", ErrBadSequence, s)
		}
	}
	if s[0] == '0' {
		if len(s) == 1 {
			return 0, fmt.Errorf("%w: sequence %q: must be >= 1", ErrBadSequence, s)
		}
		return 0, fmt.Errorf("%w: sequence %q: leading zero", ErrBadSequence, s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil { // only overflow remains possible here
		return 0, fmt.Errorf("%w: sequence %q: exceeds the int64 range", ErrBadSequence, s)
	}
	return n, nil
}

// FormatSequence is the inverse of [ParseSequence] for n >= 1.
func FormatSequence(n int64) string { return strconv.FormatInt(n, 10) }
