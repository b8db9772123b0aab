package keytemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonata "github.com/blues/jsonata-go"
)

// An Expression is a JSONata expression held to the rules of templates
// (the same accepted subset; no clock, randomness or object-field order),
// for the other values a workflow computes from its data: the conditions
// of its edges, the headers, bodies and outputs of its steps. Whatever a
// step sends must be the same on every attempt, a retry after a crash
// included, and so must the path a run takes. Unlike a template it may be
// a constant, and its result is any JSON value. It is compiled and checked
// once, and safe for concurrent use.
type Expression struct {
	source   string
	expr     *jsonata.Expr
	maxInput int
}

// Compile defines an expression. One leading "=" (the configuration
// marker) is allowed and ignored. Errors are ErrSyntax, ErrNondeterministic
// and ErrUnsupported, as for Expr.
func Compile(expr string, cfg *Config) (*Expression, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	body, root, err := parseSource(expr)
	if err != nil {
		return nil, err
	}
	if err := checkValue(root); err != nil {
		return nil, err
	}
	e, err := compile(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return &Expression{source: strings.TrimSpace(body), expr: e, maxInput: c.MaxInputBytes}, nil
}

// String returns the expression as given, without its "=".
func (e *Expression) String() string { return e.source }

// Eval evaluates e over input (one JSON object, at most
// Config.MaxInputBytes) and returns its result as JSON, or nil when the
// expression is undefined for this input (a missing field). Numbers are
// read as Key reads them. A failing evaluation is ErrEval.
func (e *Expression) Eval(input []byte) (json.RawMessage, error) {
	if len(input) > e.maxInput {
		return nil, fmt.Errorf("%w: the input is %d bytes, more than %d (Config.MaxInputBytes)", ErrBadInput, len(input), e.maxInput)
	}
	in, err := decode(input)
	if err != nil {
		return nil, err
	}
	normalizeNumbers(in)
	v, err := evalExpr(e.expr, in)
	switch {
	case errors.Is(err, jsonata.ErrUndefined):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %v", ErrEval, e.source, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: the result is not JSON: %v", ErrEval, e.source, err)
	}
	return out, nil
}
