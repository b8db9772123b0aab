package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrBadConfig is returned by New for an invalid Config or Target.
	ErrBadConfig = errors.New("outbox: invalid config")
	// ErrBadIntent is returned by EnqueueTx for an intent that could never
	// be delivered: unknown target, no method, or a key template that
	// cannot compute its key from it. Nothing is written.
	ErrBadIntent = errors.New("outbox: invalid intent")
)

// ConflictMode says what a 409 from a target means.
type ConflictMode uint8

const (
	// ConflictDone: "already exists" — the effect is there; the intent is
	// done. The default, and what Read-Verify-Write targets answer when
	// their unique constraint fires.
	ConflictDone ConflictMode = iota
	// ConflictRetry: "in progress" — a request with this key is still
	// running (Stripe-style APIs); retry later with the same key.
	ConflictRetry
)

// ClientErrorMode says what a 4xx other than 408, 409, 410 and 429 means.
type ClientErrorMode uint8

const (
	// ClientErrorsFail: the intent is dead (the request is wrong; a retry
	// would be too). The default.
	ClientErrorsFail ClientErrorMode = iota
	// ClientErrorsComplete: the answer is recorded as the intent's result
	// (state done, its status and the start of its body as LastError), as
	// data for the next step of a workflow.
	ClientErrorsComplete
)

// CallbackEvents makes a target a signed-callback target: each delivery is
// a CloudEvent in binary mode, with id = the intent's idempotency key,
// subject = its stream and sequence = its place in the stream, so that an
// idem receiver downstream dedups and orders them.
type CallbackEvents struct {
	// Source and Type are the CloudEvents attributes. Required.
	Source, Type string
}

// Target is a destination of intents.
type Target struct {
	// Name is what intents name in Intent.Target.
	Name string
	// URL is the base URL; Intent.Path is appended.
	URL string
	// Key computes the Idempotency-Key from the intent's data (see
	// KeyInput): the same input must give the same key, so it may not read
	// the clock or randomness (keytemplate.Template.KeyOf is such a
	// function). It is called once, when the intent is enqueued, and the
	// key is stored with it: every attempt, after a crash, a redeploy or an
	// operator's requeue, sends the same key. Required.
	Key func(input any) (string, error)
	// KeyHeader is the header that carries the key. Defaults to
	// "Idempotency-Key".
	KeyHeader string
	// Conflict says what 409 means. Defaults to ConflictDone.
	Conflict ConflictMode
	// ClientErrors says what other 4xx mean. Defaults to ClientErrorsFail.
	ClientErrors ClientErrorMode
	// Verify, when set, makes the target Read-Verify-Write: before each
	// write the relay asks whether the effect already exists (by business
	// identifier); found completes the intent without writing. For targets
	// without idempotency keys. See the package doc for the window it
	// narrows but cannot close.
	Verify func(ctx context.Context, in store.Intent) (found bool, err error)
	// Signer, when set, signs each request's body (idem scheme or Standard
	// Webhooks; the Standard webhook-id is the idempotency key, stable
	// across attempts).
	Signer *signature.Signer
	// Events, when set, sends each intent as a CloudEvent (see
	// CallbackEvents).
	Events *CallbackEvents
	// Route, when set, chooses each intent's URL and signer in place of
	// URL and Signer: a target whose destinations are data, such as the
	// callback URLs and secrets of `idem serve`'s applications. It is
	// called before every attempt, so a rotated secret or a moved URL
	// applies to the next one; an error retries the intent later (a nil
	// signer sends it unsigned).
	Route func(ctx context.Context, in store.Intent) (url string, signer *signature.Signer, err error)
	// Timeout bounds one attempt. Defaults to 10 s.
	Timeout time.Duration
}

// KeyInput is the value a target's Key function reads: the intent as JSON,
// whose business data is Payload (the body, parsed when it is JSON), so that
// the template `'charge-' & payload.order.id` reads
// {"payload": {"order": {"id": "o-42"}}}.
type KeyInput struct {
	Payload  any               `json:"payload"`
	Target   string            `json:"target"`
	Method   string            `json:"method"`
	Path     string            `json:"path,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Stream   string            `json:"stream,omitempty"`
}

// Config configures a Relay. A nil *Config is invalid: Targets are needed.
type Config struct {
	Targets []Target
	// Lease is how long a claimed intent is held; a relay that dies holding
	// it lets another take it over after this. Must exceed every target's
	// Timeout (plus the time to record the result). Defaults to 1 minute.
	Lease time.Duration
	// Batch is how many intents one claim takes. Defaults to 32.
	Batch int
	// Concurrency is how many deliveries run at once. Defaults to 8.
	Concurrency int
	// Backoff is the first retry's delay, doubled for each further attempt
	// with full jitter, up to MaxBackoff. Defaults to 1 s and 1 h.
	Backoff, MaxBackoff time.Duration
	// MaxAttempts is the budget: after this many attempts a retryable
	// failure makes the intent dead. Defaults to 25.
	MaxAttempts int
	// PollInterval is how often an idle relay looks for due intents when
	// nothing wakes it (wake-ups: the store's LISTEN/NOTIFY on PostgreSQL,
	// Relay.Notify in process). Defaults to 1 s.
	PollInterval time.Duration
	// Retention is how long done intents are kept (Sweep). Defaults to 7
	// days.
	Retention time.Duration
	// SweepInterval is how often RunSweeper deletes done intents past
	// Retention. Defaults to DefaultSweepInterval (1 h).
	SweepInterval time.Duration
	// Client sends the requests. Defaults to an http.Client that follows no
	// redirects and keeps Concurrency idle connections per target. A client
	// that follows redirects is refused.
	Client *http.Client
	// Now is the relay's clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives deliveries that failed, dead intents and disabled
	// targets. Defaults to a logger that discards everything, as every idem
	// package's does.
	Logger *slog.Logger
	// Hooks are told of attempts, fenced results and unknown outcomes, for
	// metrics (prom.Outbox makes Prometheus ones). Defaults to none.
	Hooks Hooks
}

// Defaults.
const (
	DefaultLease        = time.Minute
	DefaultBatch        = 32
	DefaultConcurrency  = 8
	DefaultBackoff      = time.Second
	DefaultMaxBackoff   = time.Hour
	DefaultMaxAttempts  = 25
	DefaultPollInterval = time.Second
	DefaultRetention    = 7 * 24 * time.Hour
	// DefaultSweepInterval is the default Config.SweepInterval.
	DefaultSweepInterval = time.Hour
	DefaultTimeout       = 10 * time.Second
	DefaultKeyHeader     = "Idempotency-Key"
)

var targetName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

func (c *Config) withDefaults() (Config, map[string]*Target, error) {
	if c == nil || len(c.Targets) == 0 {
		return Config{}, nil, fmt.Errorf("%w: no targets", ErrBadConfig)
	}
	o := *c
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Lease, DefaultLease)
	def(&o.Backoff, DefaultBackoff)
	def(&o.MaxBackoff, DefaultMaxBackoff)
	def(&o.PollInterval, DefaultPollInterval)
	def(&o.Retention, DefaultRetention)
	def(&o.SweepInterval, DefaultSweepInterval)
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.Lease < 0 || o.Backoff < 0 || o.MaxBackoff < o.Backoff || o.PollInterval < 0 || o.Retention < 0 || o.SweepInterval < 0 ||
		o.Batch < 0 || o.Concurrency < 0 || o.MaxAttempts < 0 {
		return Config{}, nil, fmt.Errorf("%w: negative durations or counts, or MaxBackoff below Backoff", ErrBadConfig)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Hooks = o.Hooks.withDefaults()
	if o.Client == nil {
		// Keep a connection per delivery that may run at once: with the
		// default transport's two idle connections per host, every other
		// delivery to a target would open (and leave in TIME_WAIT) a
		// connection of its own.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = o.Concurrency
		o.Client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	} else if o.Client.CheckRedirect == nil {
		return Config{}, nil, fmt.Errorf("%w: Client follows redirects; set CheckRedirect to return http.ErrUseLastResponse", ErrBadConfig)
	}
	targets := map[string]*Target{}
	for i := range o.Targets {
		t := o.Targets[i]
		switch {
		case !targetName.MatchString(t.Name):
			return Config{}, nil, fmt.Errorf("%w: target %q: name must match %s", ErrBadConfig, t.Name, targetName)
		case targets[t.Name] != nil:
			return Config{}, nil, fmt.Errorf("%w: target %q twice", ErrBadConfig, t.Name)
		case t.Key == nil:
			return Config{}, nil, fmt.Errorf("%w: target %q: Key is required (every delivery carries a stable key)", ErrBadConfig, t.Name)
		case t.Events != nil && (t.Events.Source == "" || t.Events.Type == ""):
			return Config{}, nil, fmt.Errorf("%w: target %q: Events needs Source and Type", ErrBadConfig, t.Name)
		}
		if u, err := url.Parse(t.URL); t.Route == nil && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			return Config{}, nil, fmt.Errorf("%w: target %q: URL %q is not an http(s) URL", ErrBadConfig, t.Name, t.URL)
		}
		if t.KeyHeader == "" {
			t.KeyHeader = DefaultKeyHeader
		}
		if t.Timeout == 0 {
			t.Timeout = DefaultTimeout
		}
		if t.Timeout < 0 || t.Timeout >= o.Lease {
			return Config{}, nil, fmt.Errorf("%w: target %q: Timeout %v must be positive and below the Lease %v", ErrBadConfig, t.Name, t.Timeout, o.Lease)
		}
		targets[t.Name] = &t
	}
	return o, targets, nil
}

// keyOf computes the intent's key with its target's template.
func keyOf(t *Target, in store.Intent) (string, error) {
	// The template reads a plain JSON value, as a JSONata expression would;
	// numbers stay json.Number, so large integers keep their digits.
	var payload any = string(in.Body)
	if json.Valid(in.Body) {
		payload = json.RawMessage(in.Body)
	}
	b, err := json.Marshal(KeyInput{Payload: payload, Target: in.Target, Method: in.Method, Path: in.Path,
		Metadata: maps.Clone(in.Metadata), Stream: in.Stream})
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var input any
	if err := dec.Decode(&input); err != nil {
		return "", err
	}
	k, err := t.Key(input)
	if err != nil {
		return "", err
	}
	if k == "" || len(k) > 255 {
		return "", fmt.Errorf("key %q: must be 1 to 255 bytes", k)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", fmt.Errorf("key %q: byte %d is not printable ASCII", k, i)
		}
	}
	return k, nil
}
