package httpidem

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/problem"
)

// Defaults and bounds of Config.
const (
	// DefaultMaxBody is the default request body limit (1 MiB).
	DefaultMaxBody = 1 << 20
	// DefaultMaxResponse is the default largest stored response body (1 MiB).
	DefaultMaxResponse = 1 << 20
	// MaxMaxBody bounds Config.MaxBody: the body is buffered in memory.
	MaxMaxBody = 1 << 30
	// MaxMaxResponse bounds Config.MaxResponse: the response is buffered and
	// stored in one record.
	MaxMaxResponse = 64 << 20
	// DefaultBodyTimeout is the default bound on reading a request body.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultMemoryBudget is the default budget for buffered bodies (32 MiB).
	DefaultMemoryBudget = 32 << 20
	// DefaultProblemBase prefixes every problem type URI: problem.DefaultBase.
	DefaultProblemBase = problem.DefaultBase
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on every replayed response.
const HeaderReplayed = "Idempotent-Replayed"

// Outcome says what the middleware did with one participating request. It
// is passed to Config.OnOutcome, for metrics.
type Outcome string

// The outcomes. Every participating request (a method in Config.Methods)
// gets exactly one.
const (
	// OutcomePassthrough: no principal, or no key while keys are optional;
	// the handler ran unprotected and nothing was stored.
	OutcomePassthrough Outcome = "passthrough"
	// OutcomeMissingKey: 400 idempotency-key-missing.
	OutcomeMissingKey Outcome = "missing_key"
	// OutcomeInvalidKey: 400 idempotency-key-invalid.
	OutcomeInvalidKey Outcome = "invalid_key"
	// OutcomeBodyTooLarge: 413 body-too-large.
	OutcomeBodyTooLarge Outcome = "body_too_large"
	// OutcomeInvalidBody: 400 body-unreadable or body-invalid-json.
	OutcomeInvalidBody Outcome = "invalid_body"
	// OutcomeInvalidMethod: 400 method-invalid (a participating method in
	// another case, such as "post").
	OutcomeInvalidMethod Outcome = "invalid_method"
	// OutcomeBodyTimeout: 408 body-timeout (Config.BodyTimeout).
	OutcomeBodyTimeout Outcome = "body_timeout"
	// OutcomeBusy: 503 server-busy (Config.MemoryBudget).
	OutcomeBusy Outcome = "busy"
	// OutcomeExecuted: the handler ran and its response was stored.
	OutcomeExecuted Outcome = "executed"
	// OutcomeNotStored: the handler ran; its response was too large to
	// store, so the key was completed with the "not stored" marker.
	OutcomeNotStored Outcome = "not_stored"
	// OutcomeReleased: the handler ran (or panicked) and its status is not
	// stored (5xx, 408, 409, 425, 429, 101); the claim was released.
	OutcomeReleased Outcome = "released"
	// OutcomeMarkedUnknown: the handler ran and called MarkUnknown; the
	// claim is kept until its lease ends.
	OutcomeMarkedUnknown Outcome = "marked_unknown"
	// OutcomeReplayed: a stored response was replayed.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeEncodingNotAcceptable: 406 encoding-not-acceptable (the stored
	// response's content coding is refused by the retry and cannot be
	// undone).
	OutcomeEncodingNotAcceptable Outcome = "encoding_not_acceptable"
	// OutcomeResponseNotStored: 409 response-not-stored (a retry of a
	// request whose response was too large to store).
	OutcomeResponseNotStored Outcome = "response_not_stored"
	// OutcomeInFlight: 409 request-in-flight.
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeUnknown: 409 outcome-unknown.
	OutcomeUnknown Outcome = "unknown"
	// OutcomeConflict: 422 idempotency-key-reused.
	OutcomeConflict Outcome = "conflict"
	// OutcomeUnavailable: 503 store-unavailable (the handler did not run, or
	// ran but its outcome could not be recorded), or 500
	// stored-response-unreadable.
	OutcomeUnavailable Outcome = "unavailable"
)

// FingerprintMode chooses what of the request body goes into the
// fingerprint. Use the constants or FingerprintFields; New rejects any
// other value.
type FingerprintMode string

const (
	// FingerprintRaw hashes the body's bytes as received. A compressed body
	// (Content-Encoding) is hashed compressed, never decoded.
	FingerprintRaw FingerprintMode = "raw"
	// FingerprintJSON hashes the body's RFC 8785 canonical form, so that
	// member order and whitespace do not matter. The body must be I-JSON
	// (see doc.go); anything else is answered 400 body-invalid-json.
	FingerprintJSON FingerprintMode = "json"
)

const fieldsPrefix = "fields:"

// FingerprintFields hashes only the named JSON members of the body, each in
// RFC 8785 canonical form. A path is dotted ("customer.id"); a segment that
// is a decimal number also selects an array element ("items.0.sku"). A
// missing member and a null one fingerprint differently. The order of paths
// does not matter.
func FingerprintFields(paths ...string) FingerprintMode {
	var b strings.Builder
	b.WriteString(fieldsPrefix)
	for _, p := range paths {
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
		b.WriteByte(',')
	}
	return FingerprintMode(b.String())
}

type bodyMode uint8

const (
	bodyRaw bodyMode = iota
	bodyJSON
	bodyFields
)

// parse returns the mode and, for fields, the sorted paths split in
// segments.
func (f FingerprintMode) parse() (bodyMode, [][]string, error) {
	switch f {
	case "", FingerprintRaw:
		return bodyRaw, nil, nil
	case FingerprintJSON:
		return bodyJSON, nil, nil
	}
	rest, ok := strings.CutPrefix(string(f), fieldsPrefix)
	if !ok {
		return 0, nil, fmt.Errorf("unknown mode %q", string(f))
	}
	var paths []string
	for rest != "" {
		n, tail, ok := strings.Cut(rest, ":")
		l, err := strconv.Atoi(n)
		if !ok || err != nil || l < 0 || l >= len(tail) || tail[l] != ',' {
			return 0, nil, fmt.Errorf("malformed mode %q (build it with FingerprintFields)", string(f))
		}
		paths = append(paths, tail[:l])
		rest = tail[l+1:]
	}
	if len(paths) == 0 {
		return 0, nil, errors.New("FingerprintFields needs at least one path")
	}
	slices.Sort(paths)
	out := make([][]string, 0, len(paths))
	for i, p := range paths {
		if i > 0 && paths[i-1] == p {
			return 0, nil, fmt.Errorf("path %q named twice", p)
		}
		segs := strings.Split(p, ".")
		if slices.Contains(segs, "") {
			return 0, nil, fmt.Errorf("path %q has an empty segment", p)
		}
		out = append(out, segs)
	}
	return bodyFields, out, nil
}

// Config configures a Middleware. A nil *Config is refused (Principal is
// required).
type Config struct {
	// Principal returns who is calling, from authentication. ok=false (or
	// "") means unauthenticated: the request passes through untouched and
	// the store is never called. Required.
	Principal func(r *http.Request) (principal string, ok bool)
	// Operation names the operation (part of the scope). An empty answer
	// means the default. Defaults to r.Method + " " + the route pattern
	// without its method (r.Pattern, or the pattern the wrapped
	// *http.ServeMux would route to), or + the URL path when there is none.
	Operation func(r *http.Request) string
	// Methods take part; other requests pass through and their
	// Idempotency-Key header is ignored. Safe methods (GET, HEAD, OPTIONS,
	// TRACE) are refused. Defaults to POST, PATCH.
	Methods []string
	// RequireKey makes a participating request without the header fail with
	// 400 idempotency-key-missing. An empty header is refused whatever this
	// says. Defaults to false (a request without the header passes through,
	// nothing stored).
	RequireKey bool
	// MaxBody is the request body limit in bytes, checked before any claim
	// (413 body-too-large). At most MaxMaxBody. Defaults to 1 MiB.
	MaxBody int64
	// BodyTimeout bounds reading a participating request's body, from the
	// moment the middleware starts reading it: a client that stalls
	// (declares a length and never sends the last bytes) gets 408
	// body-timeout and the connection is closed, instead of holding its
	// buffer for ever. It needs a ResponseWriter that supports
	// http.ResponseController's SetReadDeadline (net/http's does).
	// Negative disables it. Defaults to DefaultBodyTimeout (30s).
	BodyTimeout time.Duration
	// MemoryBudget bounds the bytes of request and response bodies that the
	// middleware buffers at once, beyond a small allowance per body (16
	// KiB, so that ordinary requests never wait on it). A request body that
	// does not fit (by its declared length, or as it arrives) is refused
	// with 503 server-busy and Retry-After, before anything is claimed; a
	// response the handler already produced is always kept (refusing it
	// would lose an effect) and counted, so request bodies are refused
	// while it is held. At least MaxBody. Defaults to DefaultMemoryBudget
	// (32 MiB), or MaxBody + MaxResponse if larger.
	MemoryBudget int64
	// MaxResponse is the largest response body stored, in bytes. A larger
	// one is delivered once and the key completed with a "not stored"
	// marker (a retry gets 409 response-not-stored). At most
	// MaxMaxResponse. Defaults to 1 MiB.
	MaxResponse int64
	// SignificantHeaders are request headers hashed into the fingerprint
	// (names canonicalised; order does not matter; each header's values in
	// the order received). Defaults to none.
	SignificantHeaders []string
	// ReplayHeaders are response headers replayed in addition to
	// Content-Type, Content-Encoding and Location. Hop-by-hop headers,
	// Set-Cookie, Content-Length and Idempotent-Replayed are refused.
	// Defaults to none.
	ReplayHeaders []string
	// Fingerprint chooses what of the body is hashed: FingerprintRaw,
	// FingerprintJSON or FingerprintFields(...). Defaults to FingerprintRaw.
	Fingerprint FingerprintMode
	// ProblemBase is the prefix of problem type URIs; the slug follows it.
	// Defaults to DefaultProblemBase.
	ProblemBase string
	// OnOutcome, if set, is called once per participating request, from
	// the request's goroutine, after the response was written. Defaults to
	// nil.
	OnOutcome func(r *http.Request, o Outcome)
	// Logger receives warnings (a response that could not be recorded).
	// Defaults to discarding.
	Logger *slog.Logger
}

// hopByHop are the headers that belong to one connection (RFC 9110 §7.6.1
// and the common non-standard ones); they are never replayed.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// neverReplayed are refused in Config.ReplayHeaders.
func neverReplayed(name string) bool {
	switch name {
	case "Set-Cookie", "Set-Cookie2", "Content-Length", HeaderReplayed:
		return true
	}
	return slices.Contains(hopByHop, name)
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// ErrBadConfig is wrapped by the error New returns when a Config field is
// missing or out of range; the message names the field.
var ErrBadConfig = errors.New("httpidem: bad config")

// settings is a validated Config.
type settings struct {
	Config
	methods []string
	sig     []string
	keep    []string // sorted canonical names of replayed headers
	mode    bodyMode
	modeTag []byte
	fields  [][]string
}

func (c *Config) settings() (settings, error) {
	if c == nil {
		return settings{}, fmt.Errorf("%w: Config is required (Config.Principal at least)", ErrBadConfig)
	}
	s := settings{Config: *c}
	if s.Principal == nil {
		return settings{}, fmt.Errorf("%w: Config.Principal is required", ErrBadConfig)
	}
	if s.MaxBody == 0 {
		s.MaxBody = DefaultMaxBody
	}
	if s.MaxBody < 0 || s.MaxBody > MaxMaxBody {
		return settings{}, fmt.Errorf("%w: Config.MaxBody %d out of range [1, %d]", ErrBadConfig, s.MaxBody, MaxMaxBody)
	}
	if s.MaxResponse == 0 {
		s.MaxResponse = DefaultMaxResponse
	}
	if s.MaxResponse < 0 || s.MaxResponse > MaxMaxResponse {
		return settings{}, fmt.Errorf("%w: Config.MaxResponse %d out of range [1, %d]", ErrBadConfig, s.MaxResponse, MaxMaxResponse)
	}
	if s.BodyTimeout == 0 {
		s.BodyTimeout = DefaultBodyTimeout
	}
	if s.MemoryBudget == 0 {
		s.MemoryBudget = max(DefaultMemoryBudget, s.MaxBody+s.MaxResponse)
	}
	if s.MemoryBudget < s.MaxBody {
		return settings{}, fmt.Errorf("%w: Config.MemoryBudget %d is smaller than MaxBody %d", ErrBadConfig, s.MemoryBudget, s.MaxBody)
	}
	s.methods = c.Methods
	if len(s.methods) == 0 {
		s.methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, m := range s.methods {
		switch {
		case !validToken(m):
			return settings{}, fmt.Errorf("%w: Config.Methods: %q is not a method name", ErrBadConfig, m)
		case m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace:
			return settings{}, fmt.Errorf("%w: Config.Methods: %s is a safe method; safe methods never take part", ErrBadConfig, m)
		}
	}
	var err error
	if s.sig, err = headerNames("SignificantHeaders", c.SignificantHeaders, nil); err != nil {
		return settings{}, err
	}
	if s.keep, err = headerNames("ReplayHeaders", c.ReplayHeaders, neverReplayed); err != nil {
		return settings{}, err
	}
	for _, h := range []string{"Content-Type", "Content-Encoding", "Location"} {
		if !slices.Contains(s.keep, h) {
			s.keep = append(s.keep, h)
		}
	}
	slices.Sort(s.keep)
	if s.mode, s.fields, err = c.Fingerprint.parse(); err != nil {
		return settings{}, fmt.Errorf("%w: Config.Fingerprint: %w", ErrBadConfig, err)
	}
	s.modeTag = []byte([...]string{"raw", "json", "fields"}[s.mode])
	if s.ProblemBase == "" {
		s.ProblemBase = DefaultProblemBase
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// headerNames canonicalises, sorts and dedupes names, refusing invalid ones
// and those bad says are refused.
func headerNames(field string, names []string, bad func(string) bool) ([]string, error) {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !validToken(n) {
			return nil, fmt.Errorf("%w: Config.%s: %q is not a header name", ErrBadConfig, field, n)
		}
		cn := textproto.CanonicalMIMEHeaderKey(n)
		if bad != nil && bad(cn) {
			return nil, fmt.Errorf("%w: Config.%s: %s is never replayed", ErrBadConfig, field, cn)
		}
		out = append(out, cn)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
