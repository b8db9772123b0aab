package serve

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/internal/loop"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/workflow"
)

// Store is what the service runs on: one store value that keeps request
// keys (in shared transactions), executions, steps and applications.
// sqlitestore.Store and pgstore.Store are.
type Store[TX any] interface {
	store.TxStore[TX]
	execution.Store[TX]
	store.OutboxStore[TX]
	store.AppTxStore[TX]
	store.DefinitionStore
	store.TriggerStore[TX]
	store.SecretStore
}

// Config configures a Server.
type Config struct {
	// Types are the task types the service runs. Required.
	Types map[string]execution.TypeConfig
	// ProblemBase prefixes problem type URIs. Defaults to
	// problem.DefaultBase.
	ProblemBase string
	// Source is the CloudEvents source of the events. Defaults to
	// DefaultSource.
	Source string
	// MaxBody bounds request bodies. Defaults to DefaultMaxBody.
	MaxBody int64
	// ExpireInterval is how often RunExpirer settles lost leases. Defaults
	// to DefaultExpireInterval.
	ExpireInterval time.Duration
	// ClaimPoll is how often a worker's waiting claim looks for a step
	// when no wake-up came (this process dispatching one, or another
	// through RunWakeups). Defaults to DefaultClaimPoll.
	ClaimPoll time.Duration
	// Key configures the request keys of task creation and rerun (lease,
	// retention). Defaults to key's defaults.
	Key *key.Config
	// AllowHosts, when set, restricts the hosts callbacks may be sent to
	// (exact names, or "*.example.com" for any subdomain): for a service
	// whose applications are untrusted tenants, who could otherwise point
	// their callbacks at its neighbours. A callback to another host is not
	// sent (it is retried, in case the list changes, until its budget is
	// spent). Defaults to none: any host, loopback and private addresses
	// included (self-hosted services call their neighbours).
	AllowHosts []string
	// OutboxHooks are the callbacks relay's (outbox.Config.Hooks).
	OutboxHooks outbox.Hooks
	// GatewayClient sends workflows' GATEWAY requests (each has its
	// vertex's timeout). Defaults to a client like http.DefaultClient that
	// keeps WorkflowConcurrency idle connections per host (the default
	// transport keeps two: most steps to one target would open a
	// connection each).
	GatewayClient *http.Client
	// Secrets, when set, returns an application's secret, for the
	// "{{ secrets.NAME }}" in its workflows' headers, from a secret
	// manager of the caller's (definitions are then not checked for the
	// names they use). Defaults to the secrets the application set with
	// PUT /v1/secrets/{name}, in the store.
	Secrets func(ctx context.Context, app, name string) (string, error)
	// WorkflowConcurrency is how many workflow steps RunWorkflows runs at
	// once. Defaults to DefaultWorkflowConcurrency.
	WorkflowConcurrency int
	// ScheduleInterval is how often RunSchedules looks for ticks that came
	// due. Defaults to DefaultScheduleInterval.
	ScheduleInterval time.Duration
	// WorkflowLease is a workflow step's lease: its runner extends it
	// every third of it, and when the runner's process dies, another
	// takes the step over after it. Defaults to DefaultWorkflowLease.
	WorkflowLease time.Duration
	// OnEventTx, when set, is also called for every event, in its
	// transaction, before its callback is enqueued.
	OnEventTx func(ctx context.Context, tx any, app string, task store.Task, e store.Execution, ev store.Event) error
	// Now is the service's clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
}

// Defaults of Config.
const (
	DefaultSource         = "idem"
	DefaultMaxBody        = 1 << 20
	DefaultExpireInterval = time.Second
	DefaultClaimPoll      = time.Second
	// DefaultWorkflowConcurrency: workflow steps mostly wait on their
	// targets, so many run at once.
	DefaultWorkflowConcurrency = 16
	DefaultWorkflowLease       = 30 * time.Second
	DefaultScheduleInterval    = time.Second
	maxWait                    = 30 * time.Second
	// eventPoll is how often a live event stream looks for new events.
	eventPoll = 200 * time.Millisecond
)

// ErrBadConfig is wrapped by New's error for a Config out of range.
var ErrBadConfig = errors.New("serve: bad config")

// Server is the http.Handler of `idem serve`.
type Server[TX any] struct {
	s     Store[TX]
	en    *execution.Engine[TX]
	cfg   Config
	mux   *http.ServeMux
	keyed *httpidem.Middleware
	relay *outbox.Relay[TX]
	// pending is set when a transaction may have enqueued a callback, so
	// that the relay is woken after it.
	pending atomic.Bool
	// queued is set when a transaction may have dispatched a step, so
	// that waiting claims are woken after it (dispatched).
	queued     atomic.Bool
	stepsReady signal
	notify     chan struct{} // to RunWakeups: tell the other processes
	workflows  compiledCache
	runner     *execution.Worker[TX] // workflows' steps (RunWorkflows)
}

// New returns the service over s.
func New[TX any](s Store[TX], cfg *Config) (*Server[TX], error) {
	if s == nil || cfg == nil {
		return nil, fmt.Errorf("%w: a store and a Config are required", ErrBadConfig)
	}
	c := *cfg
	if c.MaxBody < 0 || c.ExpireInterval < 0 || c.ClaimPoll < 0 || c.WorkflowConcurrency < 0 || c.WorkflowLease < 0 {
		return nil, fmt.Errorf("%w: negative MaxBody, ExpireInterval, ClaimPoll, WorkflowConcurrency or WorkflowLease", ErrBadConfig)
	}
	if c.WorkflowLease == 0 {
		c.WorkflowLease = DefaultWorkflowLease
	}
	if c.ScheduleInterval < 0 {
		return nil, fmt.Errorf("%w: negative ScheduleInterval", ErrBadConfig)
	}
	if c.ScheduleInterval == 0 {
		c.ScheduleInterval = DefaultScheduleInterval
	}
	if c.WorkflowConcurrency == 0 {
		c.WorkflowConcurrency = DefaultWorkflowConcurrency
	}
	if c.GatewayClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = c.WorkflowConcurrency
		c.GatewayClient = &http.Client{Transport: tr}
	}
	if c.ProblemBase == "" {
		c.ProblemBase = problem.DefaultBase
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.ExpireInterval == 0 {
		c.ExpireInterval = DefaultExpireInterval
	}
	if c.ClaimPoll == 0 {
		c.ClaimPoll = DefaultClaimPoll
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	srv := &Server[TX]{s: s, cfg: c, mux: http.NewServeMux(), notify: make(chan struct{}, 1)}
	types := make(map[string]execution.TypeConfig, len(c.Types)+1)
	for name, t := range c.Types {
		if strings.HasPrefix(name, "idem.") {
			return nil, fmt.Errorf("%w: task type %q: the names that start with \"idem.\" are the service's own", ErrBadConfig, name)
		}
		types[name] = t
	}
	// A vertex's own retry budget applies (its handler fails the step for
	// good when it is spent); the type's is the most a vertex may have.
	types[workflowType] = execution.TypeConfig{Lease: c.WorkflowLease, MaxAttempts: workflow.MaxMaxAttempts, Next: srv.nextVertex}
	en, err := execution.New[TX](s, &execution.Config{Types: types, OnEventTx: srv.onEventTx, Now: c.Now, Logger: c.Logger})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	srv.en = en
	srv.runner, err = en.NewWorker(map[string]execution.Handler[TX]{workflowType: srv.runVertex},
		&execution.WorkerConfig{Concurrency: c.WorkflowConcurrency, Poll: c.ClaimPoll})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if srv.relay, err = srv.newRelay(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	g, err := key.NewTx[TX](s, c.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	keyed, err := httpidem.NewTx(g, &httpidem.Config{
		Principal:   func(r *http.Request) (string, bool) { a := appFrom(r.Context()); return a, a != "" },
		RequireKey:  true,
		MaxBody:     c.MaxBody,
		ProblemBase: c.ProblemBase,
		Logger:      c.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	srv.keyed = keyed
	srv.routes()
	return srv, nil
}

// Engine is the service's engine, for a Go service that creates tasks in
// its own transactions or runs in-process workers.
func (srv *Server[TX]) Engine() *execution.Engine[TX] { return srv.en }

func (srv *Server[TX]) routes() {
	app := func(pattern string, h http.HandlerFunc) { srv.mux.Handle(pattern, srv.asApp(h)) }
	keyedApp := func(pattern string, h http.HandlerFunc) {
		srv.mux.Handle(pattern, srv.asApp(srv.keyed.Wrap(h).ServeHTTP))
	}
	keyedApp("POST /v1/tasks", srv.createTask)
	app("GET /v1/tasks", srv.listTasks)
	app("GET /v1/tasks/{id}", srv.getTask)
	keyedApp("POST /v1/tasks/{id}/rerun", srv.rerun)
	app("GET /v1/executions/{id}", srv.getExecution)
	app("GET /v1/executions/{id}/steps", srv.listSteps)
	app("GET /v1/executions/{id}/events", srv.listEvents)
	app("POST /v1/executions/{id}/cancel", srv.cancel)
	app("POST /v1/executions/{id}/steps/{stepId}/resolve", srv.resolve)
	app("PUT /v1/workflows/{name}", srv.putWorkflow)
	app("GET /v1/workflows/{name}", srv.getWorkflow)
	app("PUT /v1/secrets/{name}", srv.putSecret)
	app("GET /v1/secrets", srv.listSecrets)
	app("DELETE /v1/secrets/{name}", srv.deleteSecret)
	app("PUT /v1/connections/{name}", srv.putConnection)
	app("GET /v1/connections/{name}", srv.getConnection)
	app("POST /v1/workflows/{name}/trigger", srv.trigger)
	app("POST /v1/workflows/{name}/test-run", srv.testRun)
	app("POST /v1/executions/{id}/retry", srv.retry)
	keyedApp("POST /v1/executions/{id}/start-over", srv.startOver)
	// A workflow's webhook is signed by its sender: no token.
	srv.mux.HandleFunc("POST /v1/hooks/{app}/{name}", srv.hook)
	worker := func(pattern string, h http.HandlerFunc) { srv.mux.Handle(pattern, srv.asWorker(h)) }
	worker("POST /v1/worker/claim", srv.claim)
	worker("POST /v1/worker/steps/{id}/heartbeat", srv.heartbeat)
	worker("POST /v1/worker/steps/{id}/progress", srv.progress)
	worker("POST /v1/worker/steps/{id}/complete", srv.complete)
	worker("POST /v1/worker/steps/{id}/fail", srv.fail)
}

// ServeHTTP implements http.Handler. A request that enqueued callbacks
// wakes the relay once it has been answered (its transaction committed),
// and one that dispatched steps wakes the claims waiting for them.
func (srv *Server[TX]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	srv.mux.ServeHTTP(w, r)
	srv.settled()
}

// settled wakes what waits for the effects of the transactions that just
// committed.
func (srv *Server[TX]) settled() {
	if srv.pending.Swap(false) {
		srv.relay.Notify()
	}
	if srv.queued.Swap(false) {
		srv.dispatched()
	}
}

// RunExpirer settles lost leases every Config.ExpireInterval until ctx
// ends (execution.Engine.Expire).
func (srv *Server[TX]) RunExpirer(ctx context.Context) error {
	return loop.Every(ctx, srv.cfg.ExpireInterval, func() bool {
		n, err := srv.en.Expire(ctx, 100)
		if err != nil {
			srv.cfg.Logger.WarnContext(ctx, "serve: settling lost leases failed", "error", err)
		}
		srv.settled()
		return n == 100
	})
}

// HashToken is how tokens are stored: their SHA-256.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

type appKey struct{}

func appFrom(ctx context.Context) string { a, _ := ctx.Value(appKey{}).(string); return a }

// bearer returns the request's bearer token, or "".
func bearer(r *http.Request) string {
	v := r.Header.Values("Authorization")
	if len(v) != 1 {
		return ""
	}
	scheme, token, ok := strings.Cut(v[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// asApp lets requests with an enabled application's token through, with
// the application in their context.
func (srv *Server[TX]) asApp(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := bearer(r)
		if token == "" {
			srv.problem(w, problem.SlugUnauthorized, http.StatusUnauthorized, "send Authorization: Bearer <application token>")
			return
		}
		a, err := srv.s.AppByToken(r.Context(), HashToken(token))
		switch {
		case errors.Is(err, store.ErrNotFound):
			srv.problem(w, problem.SlugUnauthorized, http.StatusUnauthorized, "unknown application token")
			return
		case err != nil:
			srv.unavailable(w, r, err)
			return
		case a.Disabled:
			srv.problem(w, problem.SlugApplicationDisabled, http.StatusForbidden, "")
			return
		}
		// The engine calls of this request find the application in their
		// memo: their events need not read it again (onEventTx).
		ctx := execution.WithMemo(context.WithValue(r.Context(), appKey{}, a.Name), appMemo(a.Name), a)
		h(w, r.WithContext(ctx))
	})
}

// asWorker lets requests with a worker token through.
func (srv *Server[TX]) asWorker(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := bearer(r)
		if token == "" {
			srv.problem(w, problem.SlugUnauthorized, http.StatusUnauthorized, "send Authorization: Bearer <worker token>")
			return
		}
		ok, err := srv.s.WorkerToken(r.Context(), HashToken(token))
		if err != nil {
			srv.unavailable(w, r, err)
			return
		}
		if !ok {
			srv.problem(w, problem.SlugUnauthorized, http.StatusUnauthorized, "unknown worker token (an application's token is not one)")
			return
		}
		h(w, r)
	})
}

func (srv *Server[TX]) problem(w http.ResponseWriter, slug string, status int, detail string) {
	problem.Write(w, srv.cfg.ProblemBase, slug, status, detail)
}

func (srv *Server[TX]) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	srv.cfg.Logger.WarnContext(r.Context(), "serve: store unavailable", "path", r.URL.Path, "error", err)
	w.Header().Set("Retry-After", "1")
	srv.problem(w, problem.SlugStoreUnavailable, http.StatusServiceUnavailable, "")
}

// failed answers an engine or store error.
func (srv *Server[TX]) failed(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, execution.ErrFenced):
		srv.problem(w, problem.SlugFenced, http.StatusConflict, err.Error())
	case errors.Is(err, execution.ErrNotFound), errors.Is(err, store.ErrNotFound):
		srv.problem(w, problem.SlugNotFound, http.StatusNotFound, "")
	case errors.Is(err, execution.ErrIllegalTransition):
		srv.problem(w, problem.SlugIllegalTransition, http.StatusConflict, err.Error())
	case errors.Is(err, execution.ErrUnknownType):
		srv.problem(w, problem.SlugUnknownTaskType, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, execution.ErrBadInput):
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrTriggerInvalid):
		srv.problem(w, problem.SlugTriggerInvalid, http.StatusUnprocessableEntity, err.Error())
	default:
		srv.unavailable(w, r, err)
	}
}

// body reads the request's body (at most MaxBody), or answers why not.
func (srv *Server[TX]) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, srv.cfg.MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			srv.problem(w, problem.SlugBodyTooLarge, http.StatusRequestEntityTooLarge, "")
		} else {
			srv.problem(w, problem.SlugBodyUnreadable, http.StatusBadRequest, "")
		}
		return nil, false
	}
	return b, true
}

// decode reads a JSON body into v (at most MaxBody); an empty body leaves
// v as it is.
func (srv *Server[TX]) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	b, ok := srv.body(w, r)
	if !ok {
		return false
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return true
	}
	if err := json.Unmarshal(b, v); err != nil {
		srv.problem(w, problem.SlugBodyInvalidJSON, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}

func reply(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// inTx runs fn in one of the store's transactions.
func (srv *Server[TX]) inTx(ctx context.Context, fn func(ctx context.Context, tx TX) error) error {
	return srv.s.InTx(ctx, fn)
}

// wireStepID names a step on the wire: the application and the step, so
// that a worker can address it alone. Application names hold no ".".
func wireStepID(app, id string) string { return app + "." + id }

func parseStepID(wire string) (app, id string, ok bool) {
	app, id, ok = strings.Cut(wire, ".")
	return app, id, ok && app != "" && id != ""
}
