package keytemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	jsonata "github.com/blues/jsonata-go"
	"github.com/blues/jsonata-go/jparse"

	"github.com/idemhq/idem/key"
)

// Sentinel errors, matched with errors.Is. The first five are returned when
// a template is defined (Expr, Parse, Func); the others by Key and KeyOf.
var (
	// ErrSyntax is returned when an expression is not valid JSONata. The
	// message gives the byte offset of the problem in the expression as
	// given (a leading "=" counts).
	ErrSyntax = errors.New("keytemplate: syntax error")
	// ErrNondeterministic is returned when an expression could give another
	// key for the same intent: it reads the clock ($now, $millis), draws
	// random numbers ($random, $shuffle), or follows the order of an
	// object's fields ($keys, $each, $spread, the wildcards * and **),
	// which this implementation does not keep stable. The message names
	// the function or operator.
	ErrNondeterministic = errors.New("keytemplate: not deterministic")
	// ErrUnsupported is returned for an expression outside the part of
	// JSONata that key templates accept (see the package doc): function
	// definitions and function values, ranges, object constructors,
	// transforms, unknown functions, $eval, lhs ~> $f(args) (which this
	// library evaluates differently each time); a template that reads
	// nothing from the intent (a
	// constant key would collide across intents); a configuration value
	// without the leading "=" (Parse); an expression over MaxExprBytes.
	ErrUnsupported = errors.New("keytemplate: not allowed in a key template")
	// ErrBadOperation is returned for an operation that is not a lowercase
	// token ([a-z0-9][a-z0-9_.]*, at most MaxOperationLen bytes), or an
	// empty operation that the template does not name (see Expr).
	ErrBadOperation = errors.New("keytemplate: bad operation")
	// ErrBadConfig is returned for a Config field out of bounds; the
	// message names the field.
	ErrBadConfig = errors.New("keytemplate: bad config")

	// ErrBadInput is returned by Key and KeyOf when the input is not one
	// JSON object, or is larger than Config.MaxInputBytes.
	ErrBadInput = errors.New("keytemplate: bad input")
	// ErrMissingField is returned when the template gives no key for this
	// input: its result, or an operand of its top-level "&" chain, is
	// undefined (a field is missing), null, or the empty string. The
	// message names the operand and the missing field when it can.
	ErrMissingField = errors.New("keytemplate: missing field")
	// ErrNotString is returned when the result, or an operand of the
	// top-level "&" chain, is a boolean, an array or an object. Strings and
	// numbers are accepted; a number is written as JSONata's $string
	// writes it (42, 4.5, 1e+21).
	ErrNotString = errors.New("keytemplate: not a string")
	// ErrBadKey is returned when the key (with its operation prefix) is not
	// a valid Idempotency-Key: 1 to 255 bytes of printable ASCII
	// (0x21-0x7E, so no spaces), the rule idem's own receivers enforce.
	ErrBadKey = errors.New("keytemplate: not a valid Idempotency-Key")
	// ErrEval is returned when evaluation fails: a type error in the
	// expression ($uppercase of a number), a call to $error, a bound
	// exceeded ($pad wider than 255), or a Func that returned an error or
	// panicked (its error is wrapped too, so errors.Is finds it).
	ErrEval = errors.New("keytemplate: evaluation failed")
)

const (
	// DefaultMaxInputBytes is Config.MaxInputBytes' default: 1 MiB.
	DefaultMaxInputBytes = 1 << 20
	// maxInputBytesLimit is the largest Config.MaxInputBytes accepted.
	maxInputBytesLimit = 256 << 20
	// MaxExprBytes bounds the length of an expression, with its "=".
	MaxExprBytes = 4096
	// MaxOperationLen bounds the length of an operation name.
	MaxOperationLen = 64
)

// Config tunes a Template. A nil *Config means the defaults.
type Config struct {
	// MaxInputBytes bounds the JSON that Key accepts (for KeyOf: the input
	// once marshalled); a larger input fails with ErrBadInput. At most
	// 256 MiB. Defaults to DefaultMaxInputBytes (1 MiB).
	MaxInputBytes int
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if err := out.validate(); err != nil {
		return Config{}, err
	}
	if out.MaxInputBytes == 0 {
		out.MaxInputBytes = DefaultMaxInputBytes
	}
	return out, nil
}

func (c *Config) validate() error {
	if c.MaxInputBytes < 0 || c.MaxInputBytes > maxInputBytesLimit {
		return fmt.Errorf("%w: MaxInputBytes %d: want 0 (default) to %d", ErrBadConfig, c.MaxInputBytes, maxInputBytesLimit)
	}
	return nil
}

// A Template computes an Idempotency-Key from an intent. It is compiled and
// checked once, when it is defined, and is safe for concurrent use.
type Template struct {
	op       string
	source   string // the expression as given, for String; "" for Func
	maxInput int

	// Expression templates: the operands of the top-level "&" chain, or
	// one part holding the whole expression.
	parts []part
	// prefixed: the template's own output always starts with op+"-" (its
	// first operand is a string literal that does), so the prefix is not
	// added again.
	prefixed bool

	// Go function templates.
	fn func(in map[string]any) (string, error)
}

// part is one operand of the top-level "&" chain, or the whole expression.
type part struct {
	src   string // its source text, trimmed, for messages
	lit   string // its value, when it is a string or number literal
	isLit bool
	expr  *jsonata.Expr
	path  []string   // when the operand is a plain field path (a.b.c)
	paths [][]string // plain field paths it reads from the input's root
}

// Parse defines a template from a configuration value such as
// `= 'charge-' & payload.order.id`: the value must start with "=", which
// marks a JSONata expression (see Expr). A value without it would be a
// literal: the same key for every intent, so every intent after the first
// would be taken for a duplicate of it; Parse refuses it with
// ErrUnsupported.
func Parse(operation, value string, cfg *Config) (*Template, error) {
	v := strings.TrimLeft(value, " \t\r\n")
	if !strings.HasPrefix(v, "=") {
		return nil, fmt.Errorf("%w: %q is a literal, which would give every intent the same key; start an expression with \"=\" (e.g. \"= 'charge-' & payload.order.id\")", ErrUnsupported, value)
	}
	return Expr(operation, value, cfg)
}

// Expr defines a template from a JSONata expression that reads the intent
// (its business data is the field payload) and gives the key, e.g.
// `'charge-' & payload.order.id`. One leading "=" (the configuration
// marker, see Parse) is allowed and ignored.
//
// The key is operation + "-" + the expression's result, unless the
// expression starts with a string literal that already begins with
// operation + "-" (as 'charge-' does for operation "charge"):
// then the result is the key as it is. The decision is made once, from
// the expression, never from one result, so two intents never share a key
// because one result happened to start with the prefix.
//
// An empty operation is taken from that leading literal: the text before
// its first "-" ('charge-' names "charge"). Otherwise it must be a
// lowercase token, [a-z0-9][a-z0-9_.]* (no "-", so that the text before a
// key's first "-" names its operation, and keys of two operations never
// collide).
//
// The expression is checked here, once: a syntax error is ErrSyntax; the
// clock, randomness or object-field order is ErrNondeterministic; anything
// else outside the accepted subset is ErrUnsupported (see the package doc).
func Expr(operation, expr string, cfg *Config) (*Template, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	body, root, err := parseSource(expr)
	if err != nil {
		return nil, err
	}
	if err := check(root); err != nil {
		return nil, err
	}
	parts, err := splitParts(body, root)
	if err != nil {
		return nil, err
	}
	op := operation
	if op == "" {
		if op, err = operationOf(parts); err != nil {
			return nil, err
		}
	} else if err := validOperation(op); err != nil {
		return nil, err
	}
	return &Template{
		op:       op,
		source:   strings.TrimSpace(body),
		maxInput: c.MaxInputBytes,
		parts:    parts,
		prefixed: parts[0].isLit && strings.HasPrefix(parts[0].lit, op+"-"),
	}, nil
}

// parseSource parses a template's or an expression's source, after one
// optional leading "=", and returns the expression proper with its tree.
// Syntax errors point into the caller's text.
func parseSource(expr string) (string, jparse.Node, error) {
	if len(expr) > MaxExprBytes {
		return "", nil, fmt.Errorf("%w: the expression is %d bytes, longer than %d", ErrUnsupported, len(expr), MaxExprBytes)
	}
	body, offset := expr, 0
	if t := strings.TrimLeft(expr, " \t\r\n"); strings.HasPrefix(t, "=") {
		offset = len(expr) - len(t) + 1
		body = expr[offset:]
	}
	root, err := parse(body)
	if err != nil {
		return "", nil, syntaxError(expr, offset, err)
	}
	return body, root, nil
}

// Func defines a template from a Go function. It receives a fresh copy of
// the intent, decoded from JSON with every number as a json.Number (its
// exact text), and returns the part of the key after the prefix: the key is
// always operation + "-" + its result. It must give the same result for the
// same input: unlike an expression it cannot be inspected, so it is on its
// caller not to read the clock, randomness or map iteration order. Its
// errors are wrapped with ErrEval, and a panic becomes an ErrEval error.
// The operation is required (see Expr for its form).
func Func(operation string, fn func(in map[string]any) (string, error), cfg *Config) (*Template, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := validOperation(operation); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: Func needs a function", ErrUnsupported)
	}
	return &Template{op: operation, maxInput: c.MaxInputBytes, fn: fn}, nil
}

// Operation returns the template's operation: the key's prefix, before its
// first "-".
func (t *Template) Operation() string { return t.op }

// String returns the expression (with its "= " marker), or "func" for a
// Func template.
func (t *Template) String() string {
	if t.fn != nil {
		return "func"
	}
	return "= " + t.source
}

// Key returns the key for an intent given as JSON: one object, whose
// business data is its field payload, e.g. {"payload": {"order": {"id":
// "o-42"}}}. The same input always gives the same key.
//
// Numbers are read as JSONata reads them (float64), except integers beyond
// ±2^53, which a float64 would round (two order numbers could then share a
// key): those keep their exact digits and behave as strings.
//
// Errors: ErrBadInput, ErrMissingField, ErrNotString, ErrBadKey, ErrEval.
func (t *Template) Key(input []byte) (string, error) {
	if len(input) > t.maxInput {
		return "", fmt.Errorf("%w: the input is %d bytes, more than %d (Config.MaxInputBytes)", ErrBadInput, len(input), t.maxInput)
	}
	in, err := decode(input)
	if err != nil {
		return "", err
	}
	if t.fn != nil {
		return t.callFunc(in)
	}
	normalizeNumbers(in)
	var b strings.Builder
	for i := range t.parts {
		s, err := t.parts[i].eval(in, len(t.parts) > 1, i)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	k := b.String()
	if !t.prefixed {
		k = t.op + "-" + k
	}
	if err := validKey(k); err != nil {
		return "", err
	}
	return k, nil
}

// KeyOf is Key for a value that is marshalled to JSON first (a
// json.RawMessage is used as it is). It has the signature of
// outbox.Target.Key.
func (t *Template) KeyOf(input any) (string, error) {
	if raw, ok := input.(json.RawMessage); ok {
		return t.Key(raw)
	}
	b, err := json.Marshal(input)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return t.Key(b)
}

func (t *Template) callFunc(in map[string]any) (k string, err error) {
	defer func() {
		if r := recover(); r != nil {
			k, err = "", fmt.Errorf("%w: the template function panicked: %v", ErrEval, r)
		}
	}()
	body, err := t.fn(in)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrEval, err)
	}
	if body == "" {
		return "", fmt.Errorf("%w: the template function returned an empty key", ErrMissingField)
	}
	k = t.op + "-" + body
	if err := validKey(k); err != nil {
		return "", err
	}
	return k, nil
}

// eval evaluates one part and returns its text. chained says whether the
// part is one operand of several; i is its index.
func (p *part) eval(in map[string]any, chained bool, i int) (string, error) {
	if p.isLit {
		return p.lit, nil
	}
	what := "the template"
	if chained {
		what = fmt.Sprintf("operand %d (%s)", i+1, p.src)
	}
	v, err := evalExpr(p.expr, in)
	switch {
	case errors.Is(err, jsonata.ErrUndefined):
		return "", p.missing(in, what, "undefined")
	case err != nil:
		return "", fmt.Errorf("%w: %s: %v", ErrEval, what, err)
	}
	switch v := v.(type) {
	case nil:
		return "", p.missing(in, what, "null")
	case string:
		if v == "" {
			return "", p.missing(in, what, "the empty string")
		}
		return v, nil
	case float64:
		return numberText(v)
	case json.Number:
		return string(v), nil
	case bool:
		return "", fmt.Errorf("%w: %s is a boolean; a key is made of strings and numbers", ErrNotString, what)
	case []any:
		return "", fmt.Errorf("%w: %s is an array (%d values); pick one, or $join them", ErrNotString, what, len(v))
	case map[string]any:
		return "", fmt.Errorf("%w: %s is an object; pick a field of it", ErrNotString, what)
	default:
		return "", fmt.Errorf("%w: %s is a %T", ErrNotString, what, v)
	}
}

// missing builds the ErrMissingField error, naming the missing field when
// the part reads plain field paths from the input's root.
func (p *part) missing(in map[string]any, what, got string) error {
	if p.path != nil {
		if gone := missingPrefix(in, p.path); gone != "" {
			return fmt.Errorf("%w: %s", ErrMissingField, gone)
		}
		return fmt.Errorf("%w: %s is %s", ErrMissingField, p.src, got)
	}
	var gone []string
	for _, path := range p.paths {
		if g := missingPrefix(in, path); g != "" && !slices.Contains(gone, g) {
			gone = append(gone, g)
		}
	}
	if len(gone) > 0 {
		return fmt.Errorf("%w: %s is %s (%s)", ErrMissingField, what, got, strings.Join(gone, "; "))
	}
	return fmt.Errorf("%w: %s is %s", ErrMissingField, what, got)
}

// missingPrefix follows path through the input's objects and describes
// the first prefix that is absent or null ("payload.order.id is not in the
// input"), or returns "" when the path is there or leads through an array
// (JSONata maps over arrays; the hint does not guess which element lacks
// it).
func missingPrefix(in map[string]any, path []string) string {
	var cur any = in
	for i, name := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		v, ok := m[name]
		switch {
		case !ok:
			return strings.Join(path[:i+1], ".") + " is not in the input"
		case v == nil:
			return strings.Join(path[:i+1], ".") + " is null"
		}
		cur = v
	}
	return ""
}

// validOperation checks an operation name.
func validOperation(op string) error {
	if op == "" {
		return fmt.Errorf("%w: the operation is empty", ErrBadOperation)
	}
	if len(op) > MaxOperationLen {
		return fmt.Errorf("%w: %q is %d bytes, longer than %d", ErrBadOperation, op, len(op), MaxOperationLen)
	}
	for i := 0; i < len(op); i++ {
		c := op[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '.') && i > 0:
		default:
			return fmt.Errorf("%w: %q: want a lowercase token [a-z0-9][a-z0-9_.]* (no \"-\": it ends the prefix)", ErrBadOperation, op)
		}
	}
	return nil
}

// operationOf takes the operation from a leading string literal 'op-...'.
func operationOf(parts []part) (string, error) {
	if parts[0].isLit {
		if op, _, ok := strings.Cut(parts[0].lit, "-"); ok && validOperation(op) == nil {
			return op, nil
		}
	}
	return "", fmt.Errorf("%w: no operation given, and the template does not start with a literal '<operation>-' to take it from", ErrBadOperation)
}

// validKey applies the receiving side's rules (httpidem, key.MaxKeyLen).
func validKey(k string) error {
	if len(k) > key.MaxKeyLen {
		return fmt.Errorf("%w: the key is %d bytes, longer than %d (keys are never truncated): %.40q...", ErrBadKey, len(k), key.MaxKeyLen, k)
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c == ' ':
			return fmt.Errorf("%w: space at byte %d of %q (only printable ASCII without spaces)", ErrBadKey, i, k)
		case c >= 0x80:
			return fmt.Errorf("%w: non-ASCII byte 0x%02x at byte %d of %q (only printable ASCII)", ErrBadKey, c, i, k)
		case c < 0x21 || c > 0x7e:
			return fmt.Errorf("%w: control byte 0x%02x at byte %d of %q (only printable ASCII)", ErrBadKey, c, i, k)
		}
	}
	return nil
}

// syntaxError turns a parser error into ErrSyntax with the offset in the
// caller's text and a caret under it when the text is one line.
func syntaxError(expr string, offset int, err error) error {
	var pe *jparse.Error
	if !errors.As(err, &pe) {
		return fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	pos := offset + pe.Position
	msg := fmt.Sprintf("%v: at byte %d: %v", ErrSyntax, pos, pe)
	if !strings.ContainsAny(expr, "\r\n") && pos <= len(expr) {
		msg += "\n\t" + expr + "\n\t" + strings.Repeat(" ", len([]rune(expr[:pos]))) + "^"
	}
	return &wrapped{msg: msg, err: ErrSyntax}
}

// wrapped is an error with its own message that matches err.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }
