package keytemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	jsonata "github.com/blues/jsonata-go"
	"github.com/blues/jsonata-go/jlib"
	"github.com/blues/jsonata-go/jparse"
	"github.com/blues/jsonata-go/jtypes"
)

// decode reads one JSON object, every number as a json.Number.
func decode(input []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", ErrBadInput, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: more than one JSON value", ErrBadInput)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: the input must be a JSON object (the intent: {\"payload\": ...}), not %s", ErrBadInput, jsonKind(v))
	}
	return m, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// maxExactInt is 2^53: every integer up to it has its own float64.
const maxExactInt = 1 << 53

// normalizeNumbers replaces, in place, every json.Number by the float64
// JSONata expects, except integers beyond ±2^53, which keep their digits:
// as float64 two of them could become one number, and two intents one key.
func normalizeNumbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = normalizeNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalizeNumbers(x)
		}
	case json.Number:
		s := string(v)
		if isInteger(s) && !fitsFloat(s) {
			return v
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return v // out of float64's range: keep the text
		}
		return f
	}
	return v
}

// isInteger reports whether a JSON number has no fraction or exponent.
func isInteger(s string) bool { return !strings.ContainsAny(s, ".eE") }

// fitsFloat reports whether a JSON integer is within ±2^53.
func fitsFloat(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if len(digits) < 16 {
		return true
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return err == nil && n <= maxExactInt
}

// numberText writes a number as JSONata's $string and "&" do.
func numberText(f float64) (string, error) {
	s, err := jlib.String(f)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrEval, err)
	}
	return s, nil
}

// parse wraps jparse.Parse, turning a panic into an error.
func parse(expr string) (n jparse.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, fmt.Errorf("the parser failed: %v", r)
		}
	}()
	return jparse.Parse(expr)
}

// compile compiles a part of a checked expression with the guards every
// template carries (see guards).
func compile(expr string) (e *jsonata.Expr, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, err = nil, fmt.Errorf("the compiler failed: %v", r)
		}
	}()
	if e, err = jsonata.Compile(expr); err != nil {
		return nil, err
	}
	if err := e.RegisterExts(guards); err != nil {
		return nil, err
	}
	return e, nil
}

// evalMu serializes every evaluation in the process. The library keeps its
// built-in functions in one package-level environment, and evaluating a
// call writes into them (SetName, and SetContext: the value that a call
// without arguments, such as payload.id.$string(), reads), so two
// evaluations at once race, and one could read the other's input. The race
// detector shows it (TestDeterministic/Concurrent without this lock). An
// evaluation takes microseconds, and keys are computed once per intent.
var evalMu sync.Mutex

// evalExpr evaluates e, turning a panic in the library into an error.
func evalExpr(e *jsonata.Expr, in map[string]any) (v any, err error) {
	evalMu.Lock()
	defer evalMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("the JSONata library panicked: %v", r)
		}
	}()
	return e.Eval(in)
}

// errGuard is what the guard functions return; check keeps expressions
// from reaching them, so seeing it means check has a hole.
var errGuard = errors.New("keytemplate: a nondeterministic function was called (the definition check missed it)")

// guards replace, in every compiled template, the library's functions that
// read the clock or randomness (a second line of defence behind check),
// and bound $pad, whose width would otherwise allocate without limit.
var guards = map[string]jsonata.Extension{
	"now":     {Func: refuse},
	"millis":  {Func: refuse},
	"random":  {Func: refuse},
	"shuffle": {Func: refuse},
	"pad": {
		Func:               boundedPad,
		UndefinedHandler:   jtypes.ArgUndefined(0),
		EvalContextHandler: padContext,
	},
}

func refuse(...any) (any, error) { return nil, errGuard }

// maxPad bounds $pad's width: no key is longer than 255 bytes.
const maxPad = 255

func boundedPad(s string, width float64, chars jtypes.OptionalString) (string, error) {
	if width != math.Trunc(width) || math.Abs(width) > maxPad {
		return "", fmt.Errorf("$pad width %v: want an integer from -%d to %d (a key is at most %d bytes)", width, maxPad, maxPad, maxPad)
	}
	return jlib.Pad(s, int(width), chars), nil
}

// padContext is the library's rule for $pad: called with a number (and a
// string), it pads the context value.
func padContext(argv []reflect.Value) bool {
	switch len(argv) {
	case 1:
		return jtypes.IsNumber(argv[0])
	case 2:
		return jtypes.IsNumber(argv[0]) && jtypes.IsString(argv[1])
	}
	return false
}
