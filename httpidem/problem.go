package httpidem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem type slugs: the last part of each problem's type URI
// (Config.ProblemBase + slug). doc.go says when each is answered.
const (
	SlugKeyMissing               = "idempotency-key-missing"
	SlugKeyInvalid               = "idempotency-key-invalid"
	SlugBodyTooLarge             = "body-too-large"
	SlugBodyUnreadable           = "body-unreadable"
	SlugBodyInvalidJSON          = "body-invalid-json"
	SlugBodyTimeout              = "body-timeout"
	SlugMethodInvalid            = "method-invalid"
	SlugEncodingNotAcceptable    = "encoding-not-acceptable"
	SlugServerBusy               = "server-busy"
	SlugKeyReused                = "idempotency-key-reused"
	SlugRequestInFlight          = "request-in-flight"
	SlugOutcomeUnknown           = "outcome-unknown"
	SlugStoreUnavailable         = "store-unavailable"
	SlugResponseNotStored        = "response-not-stored"
	SlugStoredResponseUnreadable = "stored-response-unreadable"
)

// ProblemContentType is the media type of problem responses (RFC 9457).
const ProblemContentType = "application/problem+json"

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// WriteProblem writes an RFC 9457 problem+json response with type
// base+slug, the title, status and detail. Headers already set on w (such
// as Retry-After) are sent with it; Content-Length is set; the response is
// marked Cache-Control: no-store.
func WriteProblem(w http.ResponseWriter, base, slug, title string, status int, detail string) {
	b, err := json.Marshal(problemBody{Type: base + slug, Title: title, Status: status, Detail: detail})
	if err != nil { // strings and an int always marshal
		b = []byte(`{"type":"about:blank"}`)
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Del("Content-Encoding")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// problem writes one of this package's problems.
func (m *Middleware) problem(w http.ResponseWriter, r *http.Request, o Outcome, slug string, status int, detail string) {
	WriteProblem(w, m.s.ProblemBase, slug, titles[slug], status, detail)
	m.outcome(r, o)
}

var titles = map[string]string{
	SlugKeyMissing:               "Idempotency-Key header missing",
	SlugKeyInvalid:               "Idempotency-Key header invalid",
	SlugBodyTooLarge:             "Request body too large",
	SlugBodyUnreadable:           "Request body unreadable",
	SlugBodyInvalidJSON:          "Request body cannot be fingerprinted as JSON",
	SlugBodyTimeout:              "Request body not received in time",
	SlugMethodInvalid:            "Method name in the wrong case",
	SlugEncodingNotAcceptable:    "The stored response's encoding is not acceptable",
	SlugServerBusy:               "Too many request bodies in memory",
	SlugKeyReused:                "Idempotency-Key reused with a different request",
	SlugRequestInFlight:          "A request with this Idempotency-Key is in progress",
	SlugOutcomeUnknown:           "The outcome of the first request is unknown",
	SlugStoreUnavailable:         "Idempotency store unavailable",
	SlugResponseNotStored:        "The response to this request was not stored",
	SlugStoredResponseUnreadable: "The stored response cannot be read",
}

// retryAfter formats d as a Retry-After value: whole seconds, rounded up,
// at least 1.
func retryAfter(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return strconv.FormatInt(int64(max(s, 1)), 10)
}
