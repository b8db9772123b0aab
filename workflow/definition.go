package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The vertex types.
const (
	EntryPoint = "ENTRY_POINT"
	Gateway    = "GATEWAY"
	Transform  = "TRANSFORM"
	End        = "END"
)

// Definition is a workflow's graph, as it is written and stored.
type Definition struct {
	Vertices []Vertex `json:"vertices"`
	Edges    []Edge   `json:"edges"`
}

// Vertex is one node of the graph; Config's shape depends on Type.
type Vertex struct {
	ID     string          `json:"id"`
	Type   string          `json:"type"`
	Config json.RawMessage `json:"config,omitempty"`
}

// Edge leads from one vertex to another, when its Condition (an
// expression, "=...") holds or when it has none.
type Edge struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Condition string `json:"condition,omitempty"`
}

// Kind is the store.DefinitionKey.Kind of stored workflows.
const Kind = "workflow"

// ValidName reports whether name may name a stored workflow (or a
// connection): 1 to 63 lowercase letters, digits, '_' and '-', starting
// with a letter or digit, as a vertex's id.
func ValidName(name string) bool { return idPattern.MatchString(name) }

// ErrInvalid is wrapped by every error of a definition that cannot be
// stored or run; errors.As finds its *InvalidError.
var ErrInvalid = errors.New("workflow: invalid definition")

// Problem is one finding of Compile: the JSON Pointer (RFC 6901) of the
// field at fault in the definition ("" for the whole), and why.
type Problem struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Reason
	}
	return p.Path + ": " + p.Reason
}

// InvalidError lists every problem of a definition, in the order of the
// definition.
type InvalidError struct {
	Problems []Problem
}

func (e *InvalidError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "workflow: invalid definition: " + strings.Join(parts, "; ")
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Parse reads a definition in JSON or YAML (YAML is the same structure; a
// document that starts with "{" is read as JSON). Unknown fields are
// problems, with their paths: a misspelt field would otherwise be ignored.
func Parse(data []byte) (*Definition, error) {
	top, err := document(data)
	if err != nil {
		return nil, err
	}
	var probs problems
	probs.unknown("", top, "vertices", "edges")
	var d Definition
	probs.objects(top["vertices"], "/vertices", "vertices", func(at string, v map[string]json.RawMessage) {
		probs.unknown(at, v, "id", "type", "config")
		var x Vertex
		probs.decode(at+"/id", v["id"], &x.ID, "must be a string")
		probs.decode(at+"/type", v["type"], &x.Type, "must be a string")
		x.Config = v["config"]
		d.Vertices = append(d.Vertices, x)
	})
	probs.objects(top["edges"], "/edges", "edges", func(at string, e map[string]json.RawMessage) {
		probs.unknown(at, e, "from", "to", "condition")
		var x Edge
		probs.decode(at+"/from", e["from"], &x.From, "must be a string")
		probs.decode(at+"/to", e["to"], &x.To, "must be a string")
		probs.decode(at+"/condition", e["condition"], &x.Condition, "must be a string")
		d.Edges = append(d.Edges, x)
	})
	if err := probs.err(); err != nil {
		return nil, err
	}
	return &d, nil
}

// document reads a JSON or YAML document (one that starts with "{" is
// JSON) whose top is an object.
func document(data []byte) (map[string]json.RawMessage, error) {
	doc := bytes.TrimSpace(data)
	if len(doc) == 0 {
		return nil, &InvalidError{Problems: []Problem{{"", "the definition is empty"}}}
	}
	if doc[0] != '{' {
		var v any
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return nil, &InvalidError{Problems: []Problem{{"", "not YAML: " + err.Error()}}}
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, &InvalidError{Problems: []Problem{{"", "YAML that has no JSON form (a key that is not a string?): " + err.Error()}}}
		}
		doc = j
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, &InvalidError{Problems: []Problem{{"", "not a JSON object: " + err.Error()}}}
	}
	return top, nil
}

// ConnectionNames returns the connections d's GATEWAY vertices name, each
// once, sorted.
func (d *Definition) ConnectionNames() []string {
	var out []string
	for _, v := range d.Vertices {
		var cfg struct {
			Connection string `json:"connection"`
		}
		if v.Type == Gateway && json.Unmarshal(v.Config, &cfg) == nil && cfg.Connection != "" && !slices.Contains(out, cfg.Connection) {
			out = append(out, cfg.Connection)
		}
	}
	slices.Sort(out)
	return out
}

// problems collects a definition's problems.
type problems []Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, Problem{Path: path, Reason: fmt.Sprintf(format, args...)})
}

// unknown reports every field of obj that is not one of known, in order.
func (ps *problems) unknown(at string, obj map[string]json.RawMessage, known ...string) {
	var bad []string
	for k := range obj {
		if !slices.Contains(known, k) {
			bad = append(bad, k)
		}
	}
	slices.Sort(bad)
	for _, k := range bad {
		ps.add(at+"/"+pointerToken(k), "unknown field (expected one of %s)", strings.Join(known, ", "))
	}
}

// objects calls fn with each object of the list raw (when present), and
// its path.
func (ps *problems) objects(raw json.RawMessage, at, what string, fn func(at string, obj map[string]json.RawMessage)) {
	if raw == nil {
		return
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		ps.add(at, "must be a list of %s (objects)", what)
		return
	}
	for i, obj := range list {
		fn(fmt.Sprintf("%s/%d", at, i), obj)
	}
}

// decode reads raw (when present) into v, or reports why at path.
func (ps *problems) decode(path string, raw json.RawMessage, v any, why string) bool {
	if raw == nil {
		return true
	}
	if err := json.Unmarshal(raw, v); err != nil {
		ps.add(path, "%s", why)
		return false
	}
	return true
}

func (ps problems) err() error {
	if len(ps) == 0 {
		return nil
	}
	return &InvalidError{Problems: ps}
}

// pointerToken escapes one JSON Pointer reference token (RFC 6901).
func pointerToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
