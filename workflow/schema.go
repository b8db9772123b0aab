package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrBadPayload is wrapped by CheckPayload's error: the payload does not
// match the ENTRY_POINT's inputSchema.
var ErrBadPayload = errors.New("workflow: the payload does not match the inputSchema")

// schemaLocation names an inputSchema for the compiler (a name, not a
// place: nothing is loaded from it).
const schemaLocation = "idem:///inputSchema.json"

// noLoader refuses every reference outside the schema itself: a stored
// definition must not make the service read its files or the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a schema refers to nothing outside itself (%s)", url)
}

// inputSchema compiles an ENTRY_POINT's inputSchema (JSON Schema, 2020-12
// unless it says otherwise).
func (c *compiler) inputSchema(at string, raw json.RawMessage) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		c.probs.add(at, "not JSON: %v", err)
		return nil
	}
	if _, ok := doc.(map[string]any); !ok {
		if _, ok := doc.(bool); !ok {
			c.probs.add(at, "a JSON Schema: an object (or true, false)")
			return nil
		}
	}
	jc := jsonschema.NewCompiler()
	jc.UseLoader(noLoader{})
	jc.DefaultDraft(jsonschema.Draft2020)
	if err := jc.AddResource(schemaLocation, doc); err != nil {
		c.probs.add(at, "%v", err)
		return nil
	}
	s, err := jc.Compile(schemaLocation)
	if err != nil {
		c.probs.add(at, "not a valid JSON Schema: %s", strings.ReplaceAll(err.Error(), schemaLocation, ""))
		return nil
	}
	return s
}

// CheckPayload checks a trigger's payload against the ENTRY_POINT's
// inputSchema (nil when it has none, or the payload matches); the error
// (ErrBadPayload) says where it does not.
func (w *Workflow) CheckPayload(payload []byte) error {
	if w.input == nil {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("%w: not JSON: %v", ErrBadPayload, err)
	}
	if err := w.input.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("%w: %s", ErrBadPayload, strings.Join(leaves(ve.BasicOutput()), "; "))
		}
		return fmt.Errorf("%w: %v", ErrBadPayload, err)
	}
	return nil
}

// leaves lists a validation's failures as "/path: why".
func leaves(u *jsonschema.OutputUnit) []string {
	var out []string
	for _, e := range u.Errors {
		if e.Error == nil {
			continue
		}
		where := e.InstanceLocation
		if where == "" {
			where = "the payload"
		}
		out = append(out, where+": "+e.Error.String())
	}
	if len(out) == 0 {
		out = append(out, "it does not match")
	}
	return out
}
