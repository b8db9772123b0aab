package httpidem

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idemhq/idem/problem"
)

// Problem type slugs of the middleware: the last part of each problem's
// type URI (Config.ProblemBase + slug). doc.go says when each is answered.
// They are declared, with their titles, in package problem, the one
// catalogue of idem's problem types; these name the same strings.
const (
	SlugKeyMissing               = problem.SlugKeyMissing
	SlugKeyInvalid               = problem.SlugKeyInvalid
	SlugBodyTooLarge             = problem.SlugBodyTooLarge
	SlugBodyUnreadable           = problem.SlugBodyUnreadable
	SlugBodyInvalidJSON          = problem.SlugBodyInvalidJSON
	SlugBodyTimeout              = problem.SlugBodyTimeout
	SlugMethodInvalid            = problem.SlugMethodInvalid
	SlugEncodingNotAcceptable    = problem.SlugEncodingNotAcceptable
	SlugServerBusy               = problem.SlugServerBusy
	SlugKeyReused                = problem.SlugKeyReused
	SlugRequestInFlight          = problem.SlugRequestInFlight
	SlugOutcomeUnknown           = problem.SlugOutcomeUnknown
	SlugStoreUnavailable         = problem.SlugStoreUnavailable
	SlugResponseNotStored        = problem.SlugResponseNotStored
	SlugStoredResponseUnreadable = problem.SlugStoredResponseUnreadable
)

// ProblemContentType is the media type of problem responses (RFC 9457):
// problem.ContentType.
const ProblemContentType = problem.ContentType

// WriteProblem writes an RFC 9457 problem+json response with type
// base+slug, the title, status and detail, as problem.Details.Write does
// (where the writer lives now; problem.Write takes the catalogue's title).
func WriteProblem(w http.ResponseWriter, base, slug, title string, status int, detail string) {
	problem.Details{Type: base + slug, Title: title, Status: status, Detail: detail}.Write(w)
}

// problem writes one of this package's problems.
func (m *Middleware) problem(w http.ResponseWriter, r *http.Request, o Outcome, slug string, status int, detail string) {
	problem.Write(w, m.s.ProblemBase, slug, status, detail)
	m.outcome(r, o)
}

// retryAfter formats d as a Retry-After value: whole seconds, rounded up,
// at least 1.
func retryAfter(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return strconv.FormatInt(int64(max(s, 1)), 10)
}
