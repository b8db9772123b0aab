package event

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Mode is a CloudEvents HTTP content mode.
type Mode int

const (
	// ModeBinary puts the attributes in ce-* headers (ce-sequence: 8) and the
	// payload, as is, in the body with its Content-Type.
	ModeBinary Mode = iota
	// ModeStructured puts the whole event in a JSON body with Content-Type
	// application/cloudevents+json ("sequence":"8"). Data whose media type is
	// application/json or text/json and whose bytes are valid JSON is inlined
	// as "data" (the SDK compacts it: insignificant whitespace is lost);
	// anything else travels byte-exact as "data_base64".
	ModeStructured
)

func (m Mode) String() string {
	switch m {
	case ModeBinary:
		return "binary"
	case ModeStructured:
		return "structured"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ToHTTP renders ev as the headers and body of an HTTP request in the given
// mode, through the SDK's HTTP binding. Only ev's fields are sent (not other
// attributes of a received event). The sequence is always sent as a string
// extension, so the whole int64 range travels in both modes; a zero Sequence
// is omitted, a negative one is [ErrBadSequence]. An event the SDK does not
// validate (empty id, source or type) is [ErrMalformed].
func ToHTTP(ev Event, mode Mode) (http.Header, []byte, error) {
	if mode != ModeBinary && mode != ModeStructured {
		return nil, nil, fmt.Errorf("event: unknown mode %v", mode)
	}
	if ev.Sequence < 0 {
		return nil, nil, fmt.Errorf("%w: sequence %d: must be >= 1", ErrBadSequence, ev.Sequence)
	}
	sdk := ev.toSDK()
	if err := sdk.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %s", ErrMalformed, validationMessage(err))
	}
	ctx := binding.WithForceBinary(context.Background())
	if mode == ModeStructured {
		ctx = binding.WithForceStructured(context.Background())
	}
	req := &http.Request{Header: http.Header{}}
	if err := cehttp.WriteRequest(ctx, binding.ToMessage(&sdk), req); err != nil {
		return nil, nil, fmt.Errorf("event: write %s request: %w", mode, err)
	}
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("event: read %s body: %w", mode, err)
		}
	}
	return req.Header, body, nil
}

// Encode renders ev as structured-mode CloudEvents JSON, the body [ToHTTP]
// sends in [ModeStructured] mode: the form in which idem stores an event
// (parked events, dead letters). [Decode] reads it back.
func Encode(ev Event) ([]byte, error) {
	_, body, err := ToHTTP(ev, ModeStructured)
	return body, err
}

// toSDK builds the SDK event from ev's fields.
func (ev Event) toSDK() ce.Event {
	e := ce.New(ce.CloudEventsVersionV1)
	e.SetID(ev.ID)
	e.SetSource(ev.Source)
	e.SetType(ev.Type)
	if ev.Subject != "" {
		e.SetSubject(ev.Subject)
	}
	if !ev.Time.IsZero() {
		e.SetTime(ev.Time)
	}
	if ev.DataContentType != "" {
		e.SetDataContentType(ev.DataContentType)
	}
	if ev.Sequence > 0 {
		_ = e.Context.SetExtension(ExtSequence, FormatSequence(ev.Sequence))
	}
	if ev.ExecutionID != "" {
		_ = e.Context.SetExtension(ExtExecutionID, ev.ExecutionID)
	}
	if len(ev.Data) > 0 {
		e.DataEncoded = append([]byte(nil), ev.Data...)
		// Inline only what is JSON by media type and by content; everything
		// else as data_base64, so that any bytes survive structured mode.
		e.DataBase64 = !(isJSONMediaType(ev.DataContentType) && json.Valid(ev.Data))
	}
	return e
}

func isJSONMediaType(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	// The SDK's own list: other media types it writes and reads as a JSON
	// string, which is not byte-exact for arbitrary payloads.
	return mt == "application/json" || mt == "text/json"
}
