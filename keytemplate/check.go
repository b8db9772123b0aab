package keytemplate

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/blues/jsonata-go/jparse"
)

// Built-in functions by what check does with a call to them.
var (
	// allowed: deterministic, and they terminate (none takes a function
	// here, since templates have no function values).
	allowed = set("string", "length", "substring", "substringBefore", "substringAfter",
		"uppercase", "lowercase", "pad", "trim", "contains", "split", "join", "match",
		"replace", "formatNumber", "formatBase", "base64encode", "base64decode",
		"decodeUrl", "decodeUrlComponent", "encodeUrl", "encodeUrlComponent",
		"number", "abs", "floor", "ceil", "round", "power", "sqrt",
		"sum", "max", "min", "average", "boolean", "not", "exists",
		"distinct", "count", "reverse", "sort", "zip", "append", "single",
		"lookup", "merge", "fromMillis", "toMillis", "type", "error")
	// nondeterministic: the clock and randomness. $uuid is not in this
	// library (nor in JSONata) but is in some others; it stays refused if
	// the library is ever swapped.
	nondeterministic = map[string]string{
		"now":     "reads the clock",
		"millis":  "reads the clock",
		"random":  "returns a random number",
		"shuffle": "returns the array in a random order",
		"uuid":    "returns a random UUID",
	}
	// orderDependent: they follow the order of an object's fields, which
	// this library takes from Go's map iteration: it changes from one
	// evaluation to the next (measured: 73 distinct results in 200 runs of
	// $join($keys(payload), ',') on one ten-field object).
	orderDependent = set("keys", "each", "spread")
	// higherOrder: they take a function, and templates cannot define one.
	higherOrder = set("map", "filter", "reduce", "sift")
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// reserved reports whether a variable name is a function's.
func reserved(name string) bool {
	_, nd := nondeterministic[name]
	return nd || allowed[name] || orderDependent[name] || higherOrder[name] || name == "eval"
}

// checker walks a parsed expression and records the first finding of each
// kind. It walks everything, including what it refuses, so that a clock
// read inside a function definition is reported as such.
type checker struct {
	nondet error
	unsup  error
	reads  bool       // the expression reads the input ($, $$ or a field)
	paths  [][]string // plain field paths read from the input's root
}

func (c *checker) nondeterministic(format string, args ...any) {
	if c.nondet == nil {
		c.nondet = fmt.Errorf("%w: "+format+"; a key must be the same on every attempt", append([]any{ErrNondeterministic}, args...)...)
	}
}

func (c *checker) unsupported(format string, args ...any) {
	if c.unsup == nil {
		c.unsup = fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
	}
}

// check returns the first nondeterministic finding, else the first
// unsupported one, else nil. A key template must read its input.
func check(root jparse.Node) error {
	var c checker
	c.walk(root, true)
	return c.result(true)
}

// checkValue is check for an Expression, which may be a constant.
func checkValue(root jparse.Node) error {
	var c checker
	c.walk(root, true)
	return c.result(false)
}

func (c *checker) result(mustRead bool) error {
	switch {
	case c.nondet != nil:
		return c.nondet
	case c.unsup != nil:
		return c.unsup
	case mustRead && !c.reads:
		return fmt.Errorf("%w: the template reads nothing from the intent, so every intent would get the same key", ErrUnsupported)
	}
	return nil
}

// walk checks n in a value position. root says whether n is evaluated
// against the input's root (not inside a path step, predicate or sort
// term), for the missing-field hints.
func (c *checker) walk(n jparse.Node, root bool) {
	switch n := n.(type) {
	case *jparse.StringNode, *jparse.NumberNode, *jparse.BooleanNode, *jparse.NullNode:
	case *jparse.VariableNode:
		c.variable(n.Name)
	case *jparse.NameNode:
		c.reads = true
		if root {
			c.paths = append(c.paths, []string{n.Value})
		}
	case *jparse.PathNode:
		// The leading field names (payload.order in payload.order[0].id)
		// are read from the context; the rest from what they select.
		names := leadingNames(n)
		if len(names) > 0 {
			c.reads = true
			if root {
				c.paths = append(c.paths, names)
			}
		}
		for i, s := range n.Steps[len(names):] {
			c.walk(s, root && len(names) == 0 && i == 0)
		}
	case *jparse.PredicateNode:
		c.walk(n.Expr, root)
		for _, f := range n.Filters {
			c.walk(f, false)
		}
	case *jparse.SortNode:
		c.walk(n.Expr, root)
		for _, t := range n.Terms {
			c.walk(t.Expr, false)
		}
	case *jparse.NegationNode:
		c.walk(n.RHS, root)
	case *jparse.ArrayNode:
		for _, it := range n.Items {
			c.walk(it, root)
		}
	case *jparse.BlockNode:
		for _, e := range n.Exprs {
			c.walk(e, root)
		}
	case *jparse.ConditionalNode:
		c.walk(n.If, root)
		c.walk(n.Then, root)
		if n.Else != nil {
			c.walk(n.Else, root)
		}
	case *jparse.AssignmentNode:
		if reserved(n.Name) {
			c.unsupported("$%s := ... would hide the built-in function $%s", n.Name, n.Name)
		}
		c.walk(n.Value, root)
	case *jparse.NumericOperatorNode:
		c.walk(n.LHS, root)
		c.walk(n.RHS, root)
	case *jparse.ComparisonOperatorNode:
		c.walk(n.LHS, root)
		c.walk(n.RHS, root)
	case *jparse.BooleanOperatorNode:
		c.walk(n.LHS, root)
		c.walk(n.RHS, root)
	case *jparse.StringConcatenationNode:
		c.walk(n.LHS, root)
		c.walk(n.RHS, root)
	case *jparse.FunctionCallNode:
		c.call(n.Func, n.Args, root)
	case *jparse.FunctionApplicationNode:
		// lhs ~> $f is $f(lhs).
		c.walk(n.LHS, root)
		switch rhs := n.RHS.(type) {
		case *jparse.VariableNode:
			c.call(rhs, nil, root)
		case *jparse.FunctionCallNode:
			// The library evaluates lhs ~> $f(args) by inserting lhs into
			// the call's arguments in the shared syntax tree, once more on
			// every evaluation: the second key differs from the first,
			// and concurrent evaluations race.
			c.call(rhs.Func, rhs.Args, root)
			c.unsupported("%s: lhs ~> $f(args) is not supported (this JSONata library changes the expression each time it evaluates it); write $f(lhs, args), or lhs ~> $f", n)
		default:
			c.walk(n.RHS, false)
			c.unsupported("the right side of ~> must be a built-in function, not %s", describe(n.RHS))
		}
	case *jparse.WildcardNode:
		c.nondeterministic("the wildcard * follows the order of an object's fields, which changes between evaluations")
	case *jparse.DescendentNode:
		c.nondeterministic("the descendant operator ** follows the order of an object's fields, which changes between evaluations")
	case *jparse.RegexNode:
		c.unsupported("a regular expression is a function value; use it only as an argument ($match, $replace, $split, $contains)")
	case *jparse.RangeNode:
		c.unsupported("ranges (a..b) build arrays that come from nowhere in the intent, at a cost that has no bound")
		c.walk(n.LHS, root)
		c.walk(n.RHS, root)
	case *jparse.ObjectNode:
		c.unsupported("object constructors {...}: a key is a string; read fields instead")
		for _, p := range n.Pairs {
			c.walk(p[0], false)
			c.walk(p[1], false)
		}
	case *jparse.GroupNode:
		c.unsupported("grouping (expr{...}) builds an object: a key is a string; read fields instead")
		c.walk(n.Expr, root)
		if n.ObjectNode != nil {
			for _, p := range n.Pairs {
				c.walk(p[0], false)
				c.walk(p[1], false)
			}
		}
	case *jparse.LambdaNode:
		c.unsupported("function definitions are not allowed: a key template is one expression over the intent, with no recursion")
		c.walk(n.Body, false)
	case *jparse.TypedLambdaNode:
		c.unsupported("function definitions are not allowed: a key template is one expression over the intent, with no recursion")
		if n.LambdaNode != nil {
			c.walk(n.Body, false)
		}
	case *jparse.PartialNode:
		c.unsupported("partial application (?) makes a function value, which key templates do not have")
		c.call(n.Func, n.Args, false)
	case *jparse.PlaceholderNode:
		c.unsupported("? is only for partial application, which key templates do not have")
	case *jparse.ObjectTransformationNode:
		c.unsupported("transforms (|...|...|) make a function value, which key templates do not have")
		c.walk(n.Pattern, false)
		c.walk(n.Updates, false)
		if n.Deletes != nil {
			c.walk(n.Deletes, false)
		}
	default:
		// Fail closed: a node this check does not know is refused.
		c.unsupported("%s is not supported", describe(n))
	}
}

// variable checks $name in a value position (not called).
func (c *checker) variable(name string) {
	switch {
	case name == "" || name == "$":
		c.reads = true // $ (the context) or $$ (the input)
	case nondeterministic[name] != "":
		c.nondeterministic("$%s %s", name, nondeterministic[name])
	case orderDependent[name]:
		c.nondeterministic("$%s follows the order of an object's fields, which changes between evaluations", name)
	case reserved(name):
		c.unsupported("$%s without a call is a function value, which key templates do not have; call it: $%s(...)", name, name)
	}
}

// call checks a call of fn with args; PlaceholderNode args (partials) and
// regular expressions are accepted as arguments.
func (c *checker) call(fn jparse.Node, args []jparse.Node, root bool) {
	if v, ok := fn.(*jparse.VariableNode); ok {
		switch name := v.Name; {
		case nondeterministic[name] != "":
			c.nondeterministic("$%s() %s", name, nondeterministic[name])
		case orderDependent[name]:
			c.nondeterministic("$%s() follows the order of an object's fields, which changes between evaluations", name)
		case allowed[name]:
		case higherOrder[name]:
			c.unsupported("$%s() takes a function, and key templates define none; use a path (payload.items.sku) or a predicate (payload.items[qty > 0])", name)
		case name == "eval":
			c.unsupported("$eval() evaluates text as an expression when the key is computed, so the template could not be checked")
		default:
			c.unsupported("$%s() is not a built-in function that key templates allow", name)
		}
	} else {
		c.walk(fn, false)
		c.unsupported("only built-in functions can be called, not %s", describe(fn))
	}
	for _, a := range args {
		switch a.(type) {
		case *jparse.RegexNode, *jparse.PlaceholderNode:
		default:
			c.walk(a, root)
		}
	}
}

// leadingNames returns the field names at the start of a path.
func leadingNames(n *jparse.PathNode) []string {
	var names []string
	for _, s := range n.Steps {
		nn, ok := s.(*jparse.NameNode)
		if !ok {
			break
		}
		names = append(names, nn.Value)
	}
	return names
}

// plainPath returns the names of a path made only of field names
// (payload.order.id), or nil.
func plainPath(n *jparse.PathNode) []string {
	names := leadingNames(n)
	if n.KeepArrays || len(names) != len(n.Steps) {
		return nil
	}
	return names
}

// describe names a node's kind for messages.
func describe(n jparse.Node) string {
	if n == nil {
		return "nothing"
	}
	name := strings.TrimSuffix(reflect.TypeOf(n).Elem().Name(), "Node")
	return fmt.Sprintf("%s (%s)", n, strings.ToLower(name))
}

// splitParts returns the template's parts: the operands of a top-level
// "&" chain (a & b & c), each compiled on its own so that a missing or
// null operand is an error instead of JSONata's empty string; or the whole
// expression as one part.
//
// Evaluating the operands one by one is what "&" does at the top level:
// each operand is evaluated against the input with no variables in scope.
// The operands' source text is found by trying each "&" character in turn
// and keeping the first cut whose text parses to exactly the operand's
// syntax tree; a cut inside a string, a name, a regular expression or
// parentheses cannot parse to it, so no tokenizer is needed.
func splitParts(src string, root jparse.Node) ([]part, error) {
	var operands []jparse.Node
	var flatten func(n jparse.Node)
	flatten = func(n jparse.Node) {
		if cat, ok := n.(*jparse.StringConcatenationNode); ok {
			flatten(cat.LHS)
			flatten(cat.RHS)
			return
		}
		operands = append(operands, n)
	}
	if _, ok := root.(*jparse.StringConcatenationNode); ok {
		flatten(root)
	} else {
		operands = []jparse.Node{root}
	}

	texts := make([]string, 0, len(operands))
	rest := src
	for i, want := range operands {
		if i == len(operands)-1 {
			if !sameTree(rest, want) {
				return nil, errSplit
			}
			texts = append(texts, rest)
			break
		}
		cut := -1
		for j := strings.IndexByte(rest, '&'); j >= 0; {
			if sameTree(rest[:j], want) {
				cut = j
				break
			}
			k := strings.IndexByte(rest[j+1:], '&')
			if k < 0 {
				break
			}
			j += 1 + k
		}
		if cut < 0 {
			return nil, errSplit
		}
		texts = append(texts, rest[:cut])
		rest = rest[cut+1:]
	}

	parts := make([]part, len(operands))
	for i, n := range operands {
		p := &parts[i]
		p.src = strings.TrimSpace(texts[i])
		switch lit := n.(type) {
		case *jparse.StringNode:
			p.lit, p.isLit = lit.Value, true
			continue
		case *jparse.NumberNode:
			s, err := numberText(lit.Value)
			if err != nil {
				return nil, err
			}
			p.lit, p.isLit = s, true
			continue
		case *jparse.PathNode:
			p.path = plainPath(lit)
		}
		var c checker
		c.walk(n, true)
		p.paths = c.paths
		e, err := compile(texts[i])
		if err != nil {
			return nil, fmt.Errorf("%w: operand %q: %v", ErrSyntax, p.src, err)
		}
		p.expr = e
	}
	return parts, nil
}

// errSplit: the operands' text could not be found. The fuzz target checks
// that it never happens for an expression that passed check.
var errSplit = fmt.Errorf("%w: cannot find the operands of the top-level & in the text (please report this template)", ErrUnsupported)

// sameTree reports whether src parses to a tree equal to want.
func sameTree(src string, want jparse.Node) bool {
	n, err := parse(src)
	return err == nil && reflect.DeepEqual(n, want)
}
