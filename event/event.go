package event

import (
	"errors"
	"net/http"
	"strings"
	"time"

	ce "github.com/cloudevents/sdk-go/v2/event"
)

// Sentinel errors returned by [FromHTTP], [ToHTTP], [Decode] and [Encode];
// match them with errors.Is. The wrapping message names the offending attribute.
var (
	// ErrMalformed is returned when the request is not a CloudEvent in binary
	// or structured mode, or when an attribute is missing or invalid
	// (specversion other than 1.0, empty id, source or type, a wrongly typed
	// JSON attribute, an executionid that is not a string...). A receiver
	// answers 400 and should dead-letter it: a retry cannot fix it.
	ErrMalformed = errors.New("event: malformed CloudEvent")

	// ErrBadSequence is returned when the sequence extension is missing (and
	// [Config.AllowMissingSequence] is false) or is not a decimal integer
	// >= 1 in the strict form of [ParseSequence].
	ErrBadSequence = errors.New("event: bad sequence")

	// ErrNotOwned is returned when [Config.Owner] reports that the application
	// receiving the event does not own it. It is checked after the event
	// parsed and validated, so it never hides ErrMalformed or ErrBadSequence.
	ErrNotOwned = errors.New("event: not owned by this endpoint")
)

// Extension attribute names (lower-case, as CloudEvents 1.0 requires). In
// binary mode they travel as the headers ce-sequence and ce-executionid.
const (
	ExtSequence    = "sequence"
	ExtExecutionID = "executionid"
)

// Event is the part of a CloudEvent that idem uses. It is a plain value: the
// zero Time means absent, a zero Sequence means absent (only possible with
// [Config.AllowMissingSequence]).
type Event struct {
	ID      string // CloudEvents id; (Source, ID) identifies the message (inbox key).
	Source  string // CloudEvents source, as the SDK renders the URI-reference.
	Type    string // CloudEvents type.
	Subject string // CloudEvents subject: the object the stream is about (see Stream).

	// Sequence is the sequence extension: >= 1, counted per stream (and per
	// execution when ExecutionID is set; a rerun starts again at 1).
	Sequence int64
	// ExecutionID is the executionid extension: which execution of the
	// stream produced the event, so that a projection follows one execution.
	ExecutionID string

	Time            time.Time // CloudEvents time; zero if absent.
	DataContentType string    // CloudEvents datacontenttype; in binary mode the Content-Type.
	Data            []byte    // The payload bytes (decoded from data_base64 when that is used).

	sdk *ce.Event // the SDK's event as parsed, nil when built by the caller
}

// Stream identifies a sequence stream: sequences are compared only between
// events of one Stream. See the package documentation for why it is
// (source, subject).
type Stream struct {
	Source  string
	Subject string
}

// Stream returns the event's stream, (Source, Subject).
func (e Event) Stream() Stream { return Stream{Source: e.Source, Subject: e.Subject} }

// SDK returns the event as the CloudEvents SDK represents it: a clone of the
// parsed event (with every attribute and extension the sender set) when e
// came from [FromHTTP] or [Decode], otherwise one built from e's fields.
func (e Event) SDK() ce.Event {
	if e.sdk != nil {
		return e.sdk.Clone()
	}
	return e.toSDK()
}

// Config configures [FromHTTP]. A nil *Config means defaults.
type Config struct {
	// Owner reports whether the application receiving r owns ev (for
	// example: the event's source belongs to the tenant the endpoint path
	// names). A false answer makes FromHTTP return [ErrNotOwned]. See
	// [SourcePrefixes] for the common case. Defaults to nil: no ownership
	// check, which is only right for an endpoint whose signing secret is not
	// shared between applications.
	Owner func(r *http.Request, ev Event) bool

	// AllowMissingSequence accepts events without the sequence extension
	// (Event.Sequence is then 0), for endpoints that only dedup and do not
	// order. Defaults to false: a missing sequence is [ErrBadSequence].
	AllowMissingSequence bool
}

// SourcePrefixes returns an Owner that accepts an event whose source equals
// one of prefixes or extends it at a path boundary: prefix
// "https://shop.example/orders" accepts "https://shop.example/orders" and
// "https://shop.example/orders/eu", not "https://shop.example/orders-fake"
// nor "https://shop.example/ordersX". A prefix ending in "/" matches
// anything under it.
func SourcePrefixes(prefixes ...string) func(*http.Request, Event) bool {
	ps := append([]string(nil), prefixes...)
	return func(_ *http.Request, ev Event) bool {
		for _, p := range ps {
			if p == "" || !strings.HasPrefix(ev.Source, p) {
				continue
			}
			rest := ev.Source[len(p):]
			if rest == "" || strings.HasSuffix(p, "/") || rest[0] == '/' {
				return true
			}
		}
		return false
	}
}
