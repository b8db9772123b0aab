package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/signature"
)

// Problem type slugs of the receiver and its admin API (Config.ProblemBase
// + slug). doc.go says when each is answered. They are declared, with
// their titles, in package problem, the one catalogue of idem's problem
// types; these name the same strings.
const (
	SlugMethodNotAllowed   = problem.SlugMethodNotAllowed
	SlugBodyTooLarge       = problem.SlugBodyTooLarge
	SlugBodyUnreadable     = problem.SlugBodyUnreadable
	SlugSignatureMalformed = problem.SlugSignatureMalformed
	SlugSignatureInvalid   = problem.SlugSignatureInvalid
	SlugSignatureExpired   = problem.SlugSignatureExpired
	SlugEventMalformed     = problem.SlugEventMalformed
	SlugEventBadSequence   = problem.SlugEventBadSequence
	SlugEventNotOwned      = problem.SlugEventNotOwned
	SlugStoreUnavailable   = problem.SlugStoreUnavailable
	SlugStreamBacklogFull  = problem.SlugStreamBacklogFull
	SlugInternal           = problem.SlugInternal
)

// Defaults.
const (
	// DefaultMaxBody is Config.MaxBody's default: 1 MiB.
	DefaultMaxBody = 1 << 20
	// DefaultRetryAfter is Config.RetryAfter's default.
	DefaultRetryAfter = 5 * time.Second
)

// Config configures a Handler. Verifier is required unless Unsigned is set.
type Config struct {
	// Verifier checks the signature over the raw body before anything else.
	Verifier *signature.Verifier
	// Unsigned accepts requests without checking any signature: only for an
	// endpoint that something else authenticates (mTLS, a private network).
	// Defaults to false; New refuses a nil Verifier without it.
	Unsigned bool
	// Event configures CloudEvent parsing: the ownership check
	// (event.Config.Owner, e.g. event.SourcePrefixes) and whether a missing
	// sequence is accepted. Defaults to nil: no ownership check, sequence
	// required.
	Event *event.Config
	// MaxBody is the largest body accepted, in bytes; larger is 413 before
	// the signature is checked. Defaults to DefaultMaxBody.
	MaxBody int64
	// RetryAfter is sent with 503 answers. Defaults to DefaultRetryAfter.
	RetryAfter time.Duration
	// ProblemBase prefixes problem type URIs. Defaults to
	// problem.DefaultBase.
	ProblemBase string
	// Hooks are told of every request's result and duration, for metrics
	// (prom.Webhook makes Prometheus ones). The inbox's own (outcomes, gaps)
	// are inbox.Config.Hooks. Defaults to none.
	Hooks Hooks
	// Logger receives rejected requests and errors. Defaults to a logger
	// that discards everything, as every idem package's does.
	Logger *slog.Logger
}

// Response is the JSON body of every 200 answer: the outcome of the event,
// which the sender may log; any 200 means "stop retrying".
type Response struct {
	Outcome string `json:"outcome"`
	// Source and ID echo the event.
	Source string `json:"source"`
	ID     string `json:"id"`
	// Applied are the sequences applied in the transaction (the event's and
	// those it released from parking).
	Applied []int64 `json:"applied,omitempty"`
	// Gap is the run of sequences this event revealed as missing.
	Gap *order.Gap `json:"gap,omitempty"`
	// DeadLetters are the IDs of the dead letters written.
	DeadLetters []int64 `json:"dead_letters,omitempty"`
	// Reason says why the event was dead-lettered.
	Reason string `json:"reason,omitempty"`
}

// Handler is the http.Handler of one webhook endpoint: verify → parse the
// CloudEvent → ownership → inbox and order in one transaction → the
// processor's apply function → answer.
type Handler[TX any] struct {
	p   *inbox.Processor[TX]
	cfg Config
	log *slog.Logger
}

// ErrBadConfig is wrapped by the error New returns when a Config field is
// missing or out of range; the message names the field.
var ErrBadConfig = errors.New("webhook: bad config")

// New returns the endpoint's handler over processor p. It refuses a
// processor whose Retention is shorter than twice the signature tolerance
// (a replay inside the signature window would run twice).
func New[TX any](p *inbox.Processor[TX], cfg *Config) (*Handler[TX], error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil processor", ErrBadConfig)
	}
	c := cfg.withDefaults()
	if err := c.validate(p.Config().Retention); err != nil {
		return nil, err
	}
	return &Handler[TX]{p: p, cfg: c, log: c.Logger}, nil
}

// withDefaults returns a copy of c with every unset field at its default.
func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.MaxBody == 0 {
		out.MaxBody = DefaultMaxBody
	}
	if out.RetryAfter == 0 {
		out.RetryAfter = DefaultRetryAfter
	}
	if out.ProblemBase == "" {
		out.ProblemBase = problem.DefaultBase
	}
	if out.Hooks.OnRequest == nil {
		out.Hooks.OnRequest = func(string, time.Duration) {}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// validate refuses a Config that cannot work over an inbox that keeps
// event IDs for retention.
func (c *Config) validate(retention time.Duration) error {
	if c.Verifier == nil && !c.Unsigned {
		return fmt.Errorf("%w: Config.Verifier is required (or set Unsigned for an endpoint authenticated otherwise)", ErrBadConfig)
	}
	if c.Verifier != nil {
		if tol := c.Verifier.Tolerance(); retention < 2*tol {
			return fmt.Errorf("%w: inbox retention %v is shorter than twice the signature tolerance %v: a replay inside the window would run again", ErrBadConfig, retention, tol)
		}
	}
	if c.MaxBody < 0 || c.RetryAfter < 0 {
		return fmt.Errorf("%w: negative MaxBody or RetryAfter", ErrBadConfig)
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (h *Handler[TX]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	result := h.serve(w, r)
	h.cfg.Hooks.OnRequest(result, time.Since(start))
}

// serve answers r and returns the result for Hooks.OnRequest: the inbox
// outcome or the problem slug.
func (h *Handler[TX]) serve(w http.ResponseWriter, r *http.Request) string {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return h.problem(w, SlugMethodNotAllowed, http.StatusMethodNotAllowed, "")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return h.problem(w, SlugBodyTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf("the limit is %d bytes", h.cfg.MaxBody))
		}
		return h.problem(w, SlugBodyUnreadable, http.StatusBadRequest, err.Error())
	}
	if h.cfg.Verifier != nil {
		if err := h.cfg.Verifier.Verify(r.Header, body); err != nil {
			switch {
			case errors.Is(err, signature.ErrExpired):
				return h.problem(w, SlugSignatureExpired, http.StatusUnauthorized, err.Error())
			case errors.Is(err, signature.ErrBadSignature):
				return h.problem(w, SlugSignatureInvalid, http.StatusUnauthorized, "")
			default:
				return h.problem(w, SlugSignatureMalformed, http.StatusBadRequest, err.Error())
			}
		}
	}
	ev, err := event.FromHTTP(r, body, h.cfg.Event)
	if err != nil {
		switch {
		case errors.Is(err, event.ErrNotOwned):
			return h.problem(w, SlugEventNotOwned, http.StatusForbidden, err.Error())
		case errors.Is(err, event.ErrBadSequence):
			return h.problem(w, SlugEventBadSequence, http.StatusBadRequest, err.Error())
		default:
			return h.problem(w, SlugEventMalformed, http.StatusBadRequest, err.Error())
		}
	}
	res, err := h.p.Process(r.Context(), ev)
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int((h.cfg.RetryAfter+time.Second-1)/time.Second)))
		switch {
		case errors.Is(err, inbox.ErrBackpressure):
			return h.problem(w, SlugStreamBacklogFull, http.StatusServiceUnavailable, "")
		case errors.Is(err, inbox.ErrUnavailable), r.Context().Err() != nil:
			h.log.WarnContext(r.Context(), "webhook: event not acknowledged", "source", ev.Source, "id", ev.ID, "error", err)
			return h.problem(w, SlugStoreUnavailable, http.StatusServiceUnavailable, "")
		default:
			w.Header().Del("Retry-After")
			h.log.ErrorContext(r.Context(), "webhook: event failed", "source", ev.Source, "id", ev.ID, "error", err)
			return h.problem(w, SlugInternal, http.StatusInternalServerError, "")
		}
	}
	b, err := json.Marshal(Response{
		Outcome: res.Outcome.String(), Source: ev.Source, ID: ev.ID,
		Applied: res.Applied, Gap: res.Gap, DeadLetters: res.DeadLetters, Reason: res.Reason,
	})
	if err != nil { // plain types always marshal
		b = []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return res.Outcome.String()
}

// problem answers with the slug's problem and returns the slug.
func (h *Handler[TX]) problem(w http.ResponseWriter, slug string, status int, detail string) string {
	problem.Write(w, h.cfg.ProblemBase, slug, status, detail)
	return slug
}

// Hooks are called as the handler answers, so that metrics can count what
// it does without the handler knowing of any metrics library (package prom
// wires them to Prometheus). Every field may be nil. They are called
// synchronously on the request's goroutine: keep them fast.
type Hooks struct {
	// OnRequest: a request was answered, after d, with result: the inbox
	// outcome of a 200 (processed, duplicate, stale, superseded, parked,
	// dead_lettered) or the slug of the problem (signature-invalid,
	// store-unavailable, ...).
	OnRequest func(result string, d time.Duration)
}
