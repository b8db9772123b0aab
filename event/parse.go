package event

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// FromHTTP parses the CloudEvent carried by r in binary mode (ce-* headers,
// payload as the body) or structured mode (Content-Type
// application/cloudevents+json), reading the payload from body, not from
// r.Body: the signature layer has already read and verified the raw body, and
// the event is parsed from exactly those bytes. r itself is not modified.
//
// Checks, in order, each failure wrapping one sentinel:
//   - the request is a single CloudEvent (batch mode is refused), specversion
//     is 1.0, and the SDK's Validate accepts it (non-empty id, source, type):
//     [ErrMalformed];
//   - sequence is present (unless [Config.AllowMissingSequence]) and strictly
//     a decimal integer >= 1 (see [ParseSequence]): [ErrBadSequence];
//   - executionid, if present, is a non-empty string: [ErrMalformed];
//   - [Config.Owner] accepts it: [ErrNotOwned].
func FromHTTP(r *http.Request, body []byte, cfg *Config) (Event, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if r == nil {
		return Event{}, fmt.Errorf("%w: nil request", ErrMalformed)
	}
	ev, err := parse(r.Context(), r.Header, body, cfg.AllowMissingSequence)
	if err != nil {
		return Event{}, err
	}
	if cfg.Owner != nil && !cfg.Owner(r, ev) {
		return Event{}, fmt.Errorf("%w: source %q (subject %q, id %q)", ErrNotOwned, ev.Source, ev.Subject, ev.ID)
	}
	return ev, nil
}

// Decode parses an event that [Encode] wrote: structured-mode CloudEvents
// JSON, with the checks of [FromHTTP]. A missing sequence is accepted
// (Sequence 0), since Encode omits a zero one; ownership, which belongs to
// the request that delivered the event, is not checked.
func Decode(b []byte) (Event, error) {
	h := http.Header{"Content-Type": {ce.ApplicationCloudEventsJSON}}
	return parse(context.Background(), h, b, true)
}

// parse reads the event carried by header and body; see FromHTTP.
func parse(ctx context.Context, header http.Header, body []byte, allowMissingSequence bool) (Event, error) {
	msg := cehttp.NewMessage(header, io.NopCloser(bytes.NewReader(body)))
	defer func() { _ = msg.Finish(nil) }()

	var raw map[string]json.RawMessage // structured mode only: the body's top-level members
	switch msg.ReadEncoding() {
	case binding.EncodingBinary:
		if err := checkBinaryHeaders(header); err != nil {
			return Event{}, err
		}
	case binding.EncodingStructured:
		var err error
		if raw, err = structuredMembers(body); err != nil {
			return Event{}, err
		}
	case binding.EncodingBatch:
		return Event{}, fmt.Errorf("%w: batched mode (%s) is not accepted: send one event per request", ErrMalformed, header.Get("Content-Type"))
	default:
		if sv := header.Get("Ce-Specversion"); sv != "" {
			return Event{}, fmt.Errorf("%w: specversion %q: only 1.0 is accepted", ErrMalformed, sv)
		}
		return Event{}, fmt.Errorf("%w: specversion: missing (neither a ce-specversion header nor Content-Type application/cloudevents+json)", ErrMalformed)
	}

	sdk, err := binding.ToEvent(ctx, msg)
	if err != nil {
		if raw != nil {
			if rerr := explainStructured(raw); rerr != nil {
				return Event{}, rerr
			}
		}
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if sv := sdk.SpecVersion(); sv != ce.CloudEventsVersionV1 {
		return Event{}, fmt.Errorf("%w: specversion %q: only 1.0 is accepted", ErrMalformed, sv)
	}
	if err := sdk.Validate(); err != nil {
		return Event{}, fmt.Errorf("%w: %s", ErrMalformed, validationMessage(err))
	}

	ev := Event{
		ID:              sdk.ID(),
		Source:          sdk.Source(),
		Type:            sdk.Type(),
		Subject:         sdk.Subject(),
		Time:            sdk.Time(),
		DataContentType: sdk.DataContentType(),
		Data:            sdk.Data(),
		sdk:             sdk,
	}
	exts := sdk.Extensions()
	if ev.Sequence, err = sequenceOf(exts[ExtSequence], raw); err != nil {
		return Event{}, err
	}
	if ev.Sequence == 0 && !allowMissingSequence {
		return Event{}, fmt.Errorf("%w: sequence: missing (binary mode: header ce-sequence; structured mode: member \"sequence\")", ErrBadSequence)
	}
	if v, ok := exts[ExtExecutionID]; ok {
		s, isString := v.(string)
		if !isString || s == "" {
			return Event{}, fmt.Errorf("%w: executionid %v: must be a non-empty string", ErrMalformed, v)
		}
		ev.ExecutionID = s
	}
	return ev, nil
}

// checkBinaryHeaders refuses a repeated ce-* header: the SDK would silently
// take the first value, and a proxy or the sender could mean another.
func checkBinaryHeaders(h http.Header) error {
	for k, vs := range h {
		if len(vs) > 1 && len(k) > 3 && strings.EqualFold(k[:3], "ce-") {
			name := strings.ToLower(k[3:])
			if name == ExtSequence {
				return fmt.Errorf("%w: sequence: header ce-sequence repeated %d times", ErrBadSequence, len(vs))
			}
			return fmt.Errorf("%w: %s: header %s repeated %d times", ErrMalformed, name, k, len(vs))
		}
	}
	return nil
}

// structuredMembers decodes the top level of a structured body. It exists
// because the SDK is lenient where we must be strict: it lower-cases member
// names and turns every JSON number into an int32 through float64 (so 1.5
// and 1e3 would silently become 1 and 1000). The SDK still parses the event;
// this only lets us refuse what it would have bent.
func structuredMembers(body []byte) (map[string]json.RawMessage, error) {
	notObject := func(err error) error {
		return fmt.Errorf("%w: structured body is not a JSON object: %v", ErrMalformed, err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil {
		return nil, notObject(err)
	} else if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, notObject(fmt.Errorf("starts with %v", tok))
	}
	raw := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, notObject(err)
		}
		k, _ := tok.(string) // object keys are always strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, notObject(err)
		}
		if k != "data_base64" && !isAttributeName(k) {
			return nil, fmt.Errorf("%w: attribute %q: names must be lower-case letters and digits", ErrMalformed, k)
		}
		if _, dup := raw[k]; dup {
			// Parsers disagree on which duplicate wins; refuse to guess.
			if k == ExtSequence {
				return nil, fmt.Errorf("%w: sequence: member repeated", ErrBadSequence)
			}
			return nil, fmt.Errorf("%w: %s: member repeated", ErrMalformed, k)
		}
		raw[k] = v
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, notObject(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, notObject(errors.New("data after the object"))
	}
	return raw, nil
}

func isAttributeName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// stringAttributes are the context attributes that structured JSON must
// carry as JSON strings.
var stringAttributes = []string{"specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema", ExtExecutionID}

// explainStructured turns an SDK failure on a structured body into an error
// naming the attribute, when one of ours is visibly wrong.
func explainStructured(raw map[string]json.RawMessage) error {
	for _, name := range stringAttributes {
		if v, ok := raw[name]; ok && jsonKind(v) != '"' {
			return fmt.Errorf("%w: %s: must be a JSON string, got %s", ErrMalformed, name, v)
		}
	}
	if v, ok := raw[ExtSequence]; ok {
		if _, err := sequenceFromJSON(v); err != nil {
			return err
		}
	}
	return nil
}

// jsonKind returns the first byte of a JSON value ('"', '{', '[', 't', 'f',
// 'n', or a digit or '-').
func jsonKind(v json.RawMessage) byte {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// sequenceFromJSON reads the sequence member of a structured body: a JSON
// string in the form of ParseSequence, or a JSON number written the same
// way and within the CloudEvents Integer range (int32).
func sequenceFromJSON(v json.RawMessage) (int64, error) {
	switch jsonKind(v) {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return 0, fmt.Errorf("%w: sequence %s: %v", ErrBadSequence, v, err)
		}
		return ParseSequence(s)
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		n, err := ParseSequence(string(bytes.TrimSpace(v)))
		if err != nil {
			return 0, err
		}
		if n > math.MaxInt32 {
			return 0, fmt.Errorf("%w: sequence %s: a JSON number must fit the CloudEvents Integer range (int32); send larger sequences as a string", ErrBadSequence, v)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("%w: sequence %s: must be a string or an integer", ErrBadSequence, v)
	}
}

// sequenceOf checks the sequence extension as the SDK holds it (a string
// from a binary header or JSON string, an int32 from a JSON number) and, in
// structured mode, against the member's literal text. It returns 0 when the
// extension is absent.
func sequenceOf(v any, raw map[string]json.RawMessage) (int64, error) {
	var n int64
	switch v := v.(type) {
	case nil:
	case string:
		var err error
		if n, err = ParseSequence(v); err != nil {
			return 0, err
		}
	case int32:
		if v < 1 {
			return 0, fmt.Errorf("%w: sequence %d: must be >= 1", ErrBadSequence, v)
		}
		n = int64(v)
	default:
		return 0, fmt.Errorf("%w: sequence %v: must be a string or an integer, got %T", ErrBadSequence, v, v)
	}
	if raw == nil {
		return n, nil
	}
	lit, ok := raw[ExtSequence]
	if !ok {
		if n != 0 {
			return 0, fmt.Errorf("%w: sequence: not found as a lower-case member", ErrBadSequence)
		}
		return 0, nil
	}
	m, err := sequenceFromJSON(lit)
	if err != nil {
		return 0, err
	}
	if m != n { // duplicate members, or the SDK bent the value
		return 0, fmt.Errorf("%w: sequence %s: ambiguous (read as %d and %d)", ErrBadSequence, lit, m, n)
	}
	return n, nil
}

// validationMessage renders the SDK's validation error with the attributes
// in a stable order ("id: MUST be a non-empty string; source: REQUIRED").
func validationMessage(err error) string {
	var verr ce.ValidationError
	if !errors.As(err, &verr) {
		return err.Error()
	}
	names := make([]string, 0, len(verr))
	for k := range verr {
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = k + ": " + verr[k].Error()
	}
	return strings.Join(parts, "; ")
}
