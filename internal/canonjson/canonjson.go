// Package canonjson puts JSON documents in their RFC 8785 canonical form,
// strictly: only I-JSON (RFC 7493) whose canonical form is faithful is
// accepted, so that two documents share a canonical form only when they
// hold the same data. Request fingerprints (httpidem) and workflow trigger
// identities (workflow) are computed from it.
package canonjson

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Error says why a document cannot be put in canonical form.
type Error struct{ Reason string }

// Error returns the reason.
func (e *Error) Error() string { return e.Reason }

func errorf(format string, args ...any) error {
	return &Error{fmt.Sprintf(format, args...)}
}

// Canonical returns the RFC 8785 canonical form of an I-JSON body, or
// an empty slice for an empty (or all-whitespace) body. Canonical JSON is
// never empty, so the two never meet.
//
// github.com/gowebpki/jcs does the canonicalisation, but it is lenient with
// malformed input ("[1 2]" comes out as "[12]", "{\"a" as "{}", an unpaired
// surrogate swallows the next escape), which would let two different bodies
// share a fingerprint. So the body is first checked strictly: json.Valid
// for the syntax, then Check for what I-JSON (RFC 7493) adds.
func Canonical(body []byte) ([]byte, error) {
	b := TrimSpace(body)
	if len(b) == 0 {
		return []byte{}, nil
	}
	if err := Check(b); err != nil {
		return nil, err
	}
	return canonical(b)
}

// canonical canonicalises b, which Check accepted (or a part of it).
func canonical(b []byte) ([]byte, error) {
	out, err := jcs.Transform(b)
	if err != nil {
		return nil, errorf("the body cannot be put in RFC 8785 canonical form: %v", err)
	}
	return out, nil
}

// Fields returns, for each path (sorted), the canonical form of the
// member it names, or an empty slice when it is missing. An empty body has
// every member missing.
func Fields(body []byte, paths [][]string) ([][]byte, error) {
	b := TrimSpace(body)
	if len(b) > 0 {
		if err := Check(b); err != nil {
			return nil, err
		}
	}
	out := make([][]byte, 0, 2*len(paths))
	for _, p := range paths {
		out = append(out, []byte(strings.Join(p, ".")))
		raw, ok := Lookup(b, p)
		if !ok {
			out = append(out, []byte{})
			continue
		}
		c, err := canonical(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// TrimSpace returns b without the JSON whitespace around it.
func TrimSpace(b []byte) []byte {
	for len(b) > 0 && isJSONSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isJSONSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// Check accepts b when it is one JSON value (RFC 8259) that is also
// I-JSON (RFC 7493) and whose canonical form is faithful:
//   - no object has two members with the same name (after unescaping);
//   - strings are valid UTF-8 and every \u escape of a surrogate is one
//     half of a correct pair;
//   - every number is a finite IEEE 754 double that names exactly one
//     decimal among those accepted: zero, or a normal double written with
//     at most 15 significant digits (any two such decimals are different
//     doubles), or exactly the shortest decimal of its double (as
//     JavaScript writes 0.30000000000000004); 1e-400 (which would become
//     0) and 9007199254740993 (which RFC 8785 would turn into
//     9007199254740992) are refused rather than confused with another.
func Check(b []byte) error {
	if !json.Valid(b) {
		return errorf("the body is not valid JSON")
	}
	s := scanner{b: b}
	s.ws()
	if err := s.check(); err != nil {
		return err
	}
	return nil
}

// scanner walks JSON that json.Valid accepted. It stays within bounds on
// any input (fuzzed), but its answers mean something only for valid JSON.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) ws() {
	for s.i < len(s.b) && isJSONSpace(s.b[s.i]) {
		s.i++
	}
}

// element checks a member's or an item's value and moves past it and the
// comma after it, if any.
func (s *scanner) element() error {
	if err := s.check(); err != nil {
		return err
	}
	s.ws()
	if s.peek() == ',' {
		s.i++
		s.ws()
	}
	return nil
}

// check validates the value at s.i and moves past it.
func (s *scanner) check() error {
	switch s.peek() {
	case '{':
		s.i++
		s.ws()
		seen := map[string]struct{}{}
		for s.peek() == '"' {
			name, err := s.str(true)
			if err != nil {
				return err
			}
			if _, dup := seen[name]; dup {
				return errorf("the body has two members named %q in one object", name)
			}
			seen[name] = struct{}{}
			s.ws()
			s.i++ // ':'
			s.ws()
			if err := s.element(); err != nil {
				return err
			}
		}
		s.i++ // '}'
	case '[':
		s.i++
		s.ws()
		for s.i < len(s.b) && s.peek() != ']' {
			if err := s.element(); err != nil {
				return err
			}
		}
		s.i++ // ']'
	case '"':
		_, err := s.str(false)
		return err
	case 't', 'n':
		s.i += 4
	case 'f':
		s.i += 5
	default:
		return s.num()
	}
	return nil
}

// str reads a string at s.i, checking its escapes and UTF-8, and returns
// its value when decode is set.
func (s *scanner) str(decode bool) (string, error) {
	s.i++ // opening quote
	var out []byte
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if !utf8.Valid(raw) {
				return "", errorf("the body has a string that is not valid UTF-8")
			}
			if decode {
				out = append(out, raw...)
			}
			return string(out), nil
		case c != '\\':
			s.i++
			continue
		}
		// An escape: flush the plain bytes before it.
		raw := s.b[start:s.i]
		if !utf8.Valid(raw) {
			return "", errorf("the body has a string that is not valid UTF-8")
		}
		if decode {
			out = append(out, raw...)
		}
		s.i++
		e := s.peek()
		s.i++
		if e != 'u' {
			if decode {
				out = append(out, unescape(e))
			}
			start = s.i
			continue
		}
		r, ok := s.hex4()
		if !ok {
			return "", errorf("the body has a bad \\u escape")
		}
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // high half: a low half must follow
			if s.i+1 >= len(s.b) || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
				return "", errorf("the body has an unpaired surrogate escape \\u%04x", r)
			}
			s.i += 2
			lo, ok := s.hex4()
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return "", errorf("the body has an unpaired surrogate escape \\u%04x", r)
			}
			r = utf16.DecodeRune(r, lo)
		case utf16.IsSurrogate(r):
			return "", errorf("the body has an unpaired surrogate escape \\u%04x", r)
		}
		if decode {
			out = utf8.AppendRune(out, r)
		}
		start = s.i
	}
	return "", errorf("the body has an unterminated string")
}

// unescape returns the byte a one-letter JSON escape stands for.
func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"', '\\', '/'
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// num reads a number at s.i and checks that it names one double exactly
// (see Check).
func (s *scanner) num() error {
	start := s.i
	for s.i < len(s.b) && strings.IndexByte("+-0123456789.eE", s.b[s.i]) >= 0 {
		s.i++
	}
	lit := string(s.b[start:s.i])
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return errorf("the body has a number out of the IEEE 754 double range: %.40s", lit)
	}
	digits, exp := decimal(lit)
	// Fifteen significant digits always survive the trip through a normal
	// double; subnormals (and underflow to zero) hold fewer.
	if digits == "" || (len(digits) <= 15 && math.Abs(f) >= 0x1p-1022) {
		return nil
	}
	sd, se := decimal(strconv.FormatFloat(f, 'e', -1, 64))
	if sd != digits || se != exp {
		return errorf("the body has a number with more precision than a double holds (%.40s); "+
			"RFC 8785 would merge it with a neighbour: send it as a string", lit)
	}
	return nil
}

// decimal returns the significant digits of a JSON or %e number literal,
// without leading or trailing zeros, and the exponent e such that the value
// is 0.digits × 10^e. Zero is ("", 0). The sign is ignored: it never
// changes how many decimals map to a double.
func decimal(lit string) (string, int) {
	mant, expPart, _ := strings.Cut(strings.ToLower(lit), "e")
	mant = strings.TrimLeft(mant, "+-")
	intPart, frac, _ := strings.Cut(mant, ".")
	d := intPart + frac
	exp := len(intPart)
	if expPart != "" {
		x, err := strconv.Atoi(expPart)
		if err != nil {
			return "?", 0
		}
		exp += x
	}
	trimmed := strings.TrimLeft(d, "0")
	exp -= len(d) - len(trimmed)
	d = strings.TrimRight(trimmed, "0")
	if d == "" {
		return "", 0
	}
	return d, exp
}

// lookup returns the raw JSON of the member that path names in b (valid,
// checked by Check, trimmed; empty means no body), and whether it
// exists. A segment selects an object member by name, or an array element
// by a canonical decimal index.
func Lookup(b []byte, path []string) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	s := scanner{b: b}
	for _, seg := range path {
		if !s.enter(seg) {
			return nil, false
		}
	}
	start := s.i
	s.skip()
	return b[start:s.i], true
}

// enter moves from the container at s.i to its member seg.
func (s *scanner) enter(seg string) bool {
	switch s.peek() {
	case '{':
		s.i++
		s.ws()
		for s.peek() == '"' {
			name, err := s.str(true)
			if err != nil {
				return false
			}
			s.ws()
			s.i++ // ':'
			s.ws()
			if name == seg {
				return true
			}
			s.skip()
			s.ws()
			if s.peek() == ',' {
				s.i++
				s.ws()
			}
		}
	case '[':
		n, err := strconv.Atoi(seg)
		if err != nil || n < 0 || strconv.Itoa(n) != seg {
			return false
		}
		s.i++
		s.ws()
		for k := 0; s.i < len(s.b) && s.peek() != ']'; k++ {
			if k == n {
				return true
			}
			s.skip()
			s.ws()
			if s.peek() == ',' {
				s.i++
				s.ws()
			}
		}
	}
	return false
}

// skip moves past the value at s.i.
func (s *scanner) skip() {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			s.i++
			for s.i < len(s.b) && s.b[s.i] != '"' {
				if s.b[s.i] == '\\' {
					s.i++
				}
				s.i++
			}
			s.i++
		case '{', '[':
			depth++
			s.i++
			continue
		case '}', ']':
			if depth == 0 { // the end of the container around a scalar
				return
			}
			depth--
			s.i++
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return
			}
			s.i++
			continue
		default:
			s.i++
			continue
		}
		if depth <= 0 {
			return
		}
	}
}
