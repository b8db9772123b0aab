package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// DefaultBase prefixes every problem type URI unless a surface's
// Config.ProblemBase says otherwise.
const DefaultBase = "https://idem.dev/problems/"

// ContentType is the media type of problem responses (RFC 9457).
const ContentType = "application/problem+json"

// Details is an RFC 9457 problem details object, with the members idem
// writes.
type Details struct {
	Type   string `json:"type"`   // base + slug
	Title  string `json:"title"`  // the same for every occurrence of Type
	Status int    `json:"status"` // the response's status code
	Detail string `json:"detail,omitempty"`
	// Errors, an extension member, lists the faults of a document the
	// request carried, each at its place in it (definition-invalid).
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError is one fault of a document: the JSON Pointer (RFC 6901) of
// the field at fault, and why.
type FieldError struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Write sends d as the whole response, with status d.Status: Content-Type
// application/problem+json, Content-Length, Cache-Control: no-store, and no
// Content-Encoding (the body is never compressed). Headers already set on w
// (such as Retry-After or Connection: close) are sent with it.
func (d Details) Write(w http.ResponseWriter) {
	b, err := json.Marshal(d)
	if err != nil { // strings and ints always marshal
		b = []byte(`{"type":"about:blank"}`)
	}
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Del("Content-Encoding")
	w.WriteHeader(d.Status)
	_, _ = w.Write(b)
}

// Write answers the problem slug with status and detail (omitted when
// empty): type base+slug, titled from the catalogue. A slug outside the
// catalogue is titled with the status's text.
func Write(w http.ResponseWriter, base, slug string, status int, detail string) {
	title := Title(slug)
	if title == "" {
		title = http.StatusText(status)
	}
	Details{Type: base + slug, Title: title, Status: status, Detail: detail}.Write(w)
}
