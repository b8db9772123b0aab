// Package workflow holds workflow definitions: versioned graphs of
// vertices that `idem serve` runs as durable executions, each vertex a step
// (package execution), so that a workflow stops duplicates in three
// layers: a trigger's identity, each step's claim and fence, and the keys
// its gateway steps send to their targets.
//
// # Definitions
//
// A definition is JSON or YAML of one shape:
//
//	{"vertices": [{"id", "type", "config"}], "edges": [{"from", "to", "condition"?}]}
//
// The vertex types are ENTRY_POINT (where a trigger's payload enters; its
// idempotencyFields choose the business fields that make a trigger's
// identity), GATEWAY (an HTTP call: method, url or connection and path,
// headers, body, clientErrorMode, onConflict, timeout, retry, verify),
// TRANSFORM (an output computed from the step's input) and END. Edges
// leave a vertex in the order given: the first whose condition holds (an
// edge without one always does) is taken.
//
// A string value that starts with "=" is a JSONata expression over the
// step's input ({"payload": the trigger's payload, "steps": {id: output}}),
// checked when the definition is stored by package keytemplate: one that
// reads the clock or randomness, or the order of an object's fields, is
// refused, because what a step sends and where a run goes must be the same
// on every attempt. A GATEWAY's Idempotency-Key header is a key template
// (keytemplate.Parse): the key is computed once per step and sent by every
// attempt, after a crash, a Retry and a Start over. "{{ secrets.NAME }}" in
// a literal header reads a secret of the application; secrets go nowhere
// else, and are never stored with an execution or shown back.
//
// Route decides where a run goes from a vertex, and Identity what makes
// two triggers one execution (the client's id, the idempotencyFields'
// values or the whole payload, in RFC 8785 canonical form).
//
// Compile checks a definition and returns it ready to run, or every
// problem it has, each with the JSON Pointer of the field at fault
// (ErrInvalid, *InvalidError); it also returns warnings, such as a GATEWAY
// that POSTs without a key and without a verify step.
package workflow
