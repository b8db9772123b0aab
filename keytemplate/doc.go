// Package keytemplate computes the Idempotency-Key that an outbound
// delivery carries, from the intent's data, so that every attempt of one
// intent (after a crash, a redeploy, an operator's retry) sends the same key
// and the target can recognise it (docs/guarantees.md, G1). The charge
// template below is the one this package's doc and tests use throughout:
//
//	t, err := keytemplate.Parse("charge", "= 'charge-' & payload.order.id", nil)
//	k, err := t.Key([]byte(`{"payload": {"order": {"id": "o-42"}}}`)) // "charge-o-42"
//
// # Templates
//
// A template is a JSONata expression (Expr, or Parse for a configuration
// value, where a leading "=" marks the expression) or a Go function (Func).
// Its input is the intent as one JSON object; the business data is its
// field payload. A template is checked and compiled once, when it is
// defined, and a *Template is then safe for concurrent use (expression
// evaluations run one at a time, process-wide: see the library section).
//
// Every key starts with its operation and a "-": "charge-o-42",
// "ship-o-42". An operation is a lowercase token without "-"
// ([a-z0-9][a-z0-9_.]*), so the text before a key's first "-" is always its
// operation, and keys of two operations never collide, whatever the data.
// The prefix is added to the template's result, unless the expression
// itself starts with a string literal that begins with it (the charge
// template's 'charge-' for operation "charge"): decided once per template,
// never per result, so that the step from result to key is one-to-one.
//
// # What is checked when a template is defined
//
//   - Syntax (ErrSyntax), with the byte offset of the problem.
//   - Determinism (ErrNondeterministic): $now and $millis (the clock),
//     $random and $shuffle (randomness; $uuid too, should a library ever
//     offer it), anywhere in the expression,
//     called or only named ($f := $now), inside conditions, blocks and even
//     inside the function definitions that are refused anyway. A name in a
//     string literal ('$now') or a backquoted field name (`$now`) is data
//     and is accepted. Also refused: $keys, $each, $spread and the
//     wildcards * and **, which follow the order of an object's fields:
//     this library takes that order from Go's map iteration, so the same
//     input gives another result from one evaluation to the next.
//   - The accepted subset (ErrUnsupported): field paths, predicates, sort,
//     literals, arrays, blocks and variables, conditions, the operators,
//     and calls of the deterministic built-in functions ($string,
//     $substring, $lowercase, $join, $replace, $pad, ...). Refused: function
//     definitions and function values (so no recursion, which in this
//     library overflows the Go stack and kills the process, and no
//     $eval-like escape from this check), higher-order functions ($map,
//     $filter, $reduce, $sift: use a path or a predicate), ranges, object
//     constructors and transforms, lhs ~> $f(args) (see the library
//     section), unknown functions and $eval, and a
//     template that reads nothing from the intent (a constant key would
//     make every intent after the first look like a duplicate).
//
// The check walks the parsed syntax tree (the library's exported jparse
// nodes) and fails closed: a node kind it does not know is refused. As a
// second line of defence every compiled template has $now, $millis,
// $random and $shuffle replaced by functions that fail.
//
// # What is checked when a key is computed
//
// JSONata's "&" turns a missing operand into "" (and this library a null
// one too), so the charge template would give "charge-" for every intent
// without an order id, and all of them would share that key. Here
// the operands of a top-level "&" chain are evaluated one by one (which is
// what "&" does at the top level) and each one that is not a literal must
// be a non-empty string or a number: otherwise ErrMissingField, naming the
// field, or ErrNotString. The same holds for the whole result of a template
// that is not such a chain. "&" nested inside a function call or a
// condition keeps JSONata's rule, so prefer the top-level chain form. The
// key must then be 1 to 255 bytes of printable ASCII without spaces
// (ErrBadKey), the rule idem's own receivers enforce (httpidem).
//
// Numbers are float64, as JSONata has them, except integers beyond ±2^53:
// those keep their exact digits (and behave as strings), since rounding
// could give two order numbers one key.
//
// # Bounds
//
// The library has no timeout, step limit or cancellation, so evaluation is
// bounded by what a template may contain instead (and evaluations are
// serialized, see below): no recursion, no ranges,
// $pad at most 255 wide, an input of at most Config.MaxInputBytes (1 MiB by
// default) and an expression of at most MaxExprBytes (4 KiB). Work is then
// polynomial in the input's size. Templates are configuration written by
// the service's developers, not user input: a template written to be slow
// on purpose (doubling a string with $ & $ in forty nested steps) is still
// slow.
//
// # The library: github.com/blues/jsonata-go v1.5.4
//
// Two Go JSONata implementations were on offer, blues/jsonata-go v1.5.4
// (May 2021) and its fork xiatechs/jsonata-go v1.8.8 (December 2024). Both
// share the parser and evaluator (JSONata 1.5 level), both export the
// syntax tree (package jparse) that the determinism check walks, and both
// give "charge-o-42" for the charge template. Neither has a timeout or a
// step limit, and in both "&" turns a missing field into "". The fork is
// maintained more recently (the blues repository has been called inactive
// by the fork's authors since 2022), and its nodes carry source positions;
// but blues was chosen because:
//
//   - it has no dependencies; the fork pulls goccy/go-json,
//     shopspring/decimal, an older ncruces/go-strftime and testify into the
//     module graph;
//   - the fork adds $eval, which evaluates a string built at run time and
//     so defeats any check made when the template is defined, plus a dozen
//     non-standard functions to vet;
//   - the fork rounds arithmetic to 8 decimals, upwards, through
//     shopspring/decimal, away from JSONata: 1/3 gives 0.33333334 and
//     2/3*3 gives 2.00000001 (JSONata: 0.3333333333333333 and 2).
//
// Both also share two defects found while testing this package, and worked
// around here: evaluating lhs ~> $f(args) inserts lhs into the shared
// syntax tree, once more on each evaluation (the second key differs from
// the first, so that form is refused; lhs ~> $f and $f(lhs, args) are
// fine); and evaluating any call writes into the package-level built-in
// functions (their name and their context value), so concurrent
// evaluations race, even of different templates: every evaluation in this
// package holds one mutex.
//
// The part of the library used here is small and pinned by this package's
// tests (the charge template, the refusals, determinism under -race, a fuzz
// target), and it is hidden behind this package's API: moving to another
// implementation changes this package only.
package keytemplate
