package event_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/event"
)

func TestParseSequence(t *testing.T) {
	t.Parallel()
	good := map[string]int64{"1": 1, "8": 8, "10": 10, "2147483648": 2147483648, "9223372036854775807": 9223372036854775807}
	for in, want := range good {
		got, err := event.ParseSequence(in)
		if err != nil || got != want {
			t.Errorf("ParseSequence(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "00", "-1", "+1", "01", " 8", "8 ", "\t8", "1e3", "1.0", "0x10", "1_000", "eight", "٨", "9223372036854775808", "99999999999999999999"} {
		got, err := event.ParseSequence(in)
		if !errors.Is(err, event.ErrBadSequence) {
			t.Errorf("ParseSequence(%q) = %d, %v; want ErrBadSequence", in, got, err)
			continue
		}
		if !strings.Contains(err.Error(), "sequence") {
			t.Errorf("ParseSequence(%q) error %q does not name the attribute", in, err)
		}
	}
}

func FuzzParseSequence(f *testing.F) {
	for _, s := range []string{"1", "8", "0", "-1", "01", " 8", "1e3", "9223372036854775807", "9223372036854775808", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := event.ParseSequence(s)
		if err != nil {
			if !errors.Is(err, event.ErrBadSequence) {
				t.Fatalf("ParseSequence(%q): error %v is not ErrBadSequence", s, err)
			}
			// Rejected: it must not be the canonical form of a positive int64.
			if v, perr := strconv.ParseInt(s, 10, 64); perr == nil && v >= 1 && strconv.FormatInt(v, 10) == s {
				t.Fatalf("ParseSequence(%q) rejected a canonical positive integer: %v", s, err)
			}
			return
		}
		if n < 1 || event.FormatSequence(n) != s {
			t.Fatalf("ParseSequence(%q) = %d: not the canonical form of a positive integer", s, n)
		}
	})
}
