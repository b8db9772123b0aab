package execution

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Sentinel errors of the engine, matched with errors.Is.
var (
	// ErrBadConfig is wrapped by New's error for a Config out of range.
	ErrBadConfig = errors.New("execution: bad config")
	// ErrUnknownType: the task's type is not declared in Config.Types.
	ErrUnknownType = errors.New("execution: unknown task type")
	// ErrBadInput: the task's input is not JSON (or a field is out of
	// range); nothing was written.
	ErrBadInput = errors.New("execution: bad input")
	// ErrNotFound: no such task, execution or step for this application.
	ErrNotFound = errors.New("execution: not found")
	// ErrFenced: a worker's write carried an epoch (and owner) that is not
	// the step's current claim: its lease ended and the step was claimed
	// again. Nothing changed.
	ErrFenced = fmt.Errorf("execution: stale claim: %w", store.ErrFenced)
)

// TypeConfig configures one task type.
type TypeConfig struct {
	// Lease is a claim's default lease. Defaults to DefaultLease.
	Lease time.Duration
	// MaxAttempts is how many claims a step gets before a retryable
	// failure fails it for good. Defaults to DefaultMaxAttempts.
	MaxAttempts int
	// Backoff is the wait before the first retry, doubled at each one up
	// to a minute. Defaults to DefaultBackoff.
	Backoff time.Duration
	// Once declares the type once-only: a step whose worker lost its lease
	// becomes OUTCOME_UNKNOWN for an operator, instead of being dispatched
	// again. Defaults to false (repeatable: its workers send stable
	// downstream keys).
	Once bool
	// Next, when set, makes the type's executions run many steps, one
	// after another (a workflow's vertices): it is called in the
	// transaction that completes one of their steps, and returns the step
	// that runs next, or nil and the execution's output when it is done.
	// An error wrapped by Permanent fails the execution there (the
	// completed step stays completed); any other rolls the completion back
	// (a store that is down). It must decide on c alone, and the same way
	// every time: a completion that is settled again must continue the
	// same way.
	// Defaults to nil: one step per execution.
	Next func(ctx context.Context, c Continuation) (next *StepSpec, output json.RawMessage, err error)
}

// Continuation is what TypeConfig.Next decides on.
type Continuation struct {
	Task      store.Task
	Execution store.Execution
	// Steps are the execution's steps in creation order, Done among them.
	Steps []store.Step
	// Done is the step that just completed, with its output.
	Done store.Step
}

// StepSpec is a step an execution runs: its name and the downstream key
// every attempt of it sends (computed once, when it is added).
type StepSpec struct {
	Name           string
	IdempotencyKey string
	// Once marks it once-only, as TypeConfig.Once does a type's steps.
	Once bool
}

// Defaults of TypeConfig.
const (
	DefaultLease       = 30 * time.Second
	DefaultMaxAttempts = 3
	DefaultBackoff     = time.Second
	maxBackoff         = time.Minute
)

// Config configures an Engine.
type Config struct {
	// Types are the declared task types, by name. Required.
	Types map[string]TypeConfig
	// OnEventTx, when set, is called for every event the engine writes, in
	// the transaction that writes it (to enqueue its callback in the
	// outbox, so the callback exists if and only if the event does). An
	// error rolls the whole change back.
	OnEventTx func(ctx context.Context, tx any, app string, task store.Task, e store.Execution, ev store.Event) error
	// Now is the engine's clock. Defaults to time.Now.
	Now func() time.Time
	// NewID makes task, execution and step IDs. Defaults to rand.Text.
	NewID func() string
	// Logger defaults to a logger that discards everything.
	Logger *slog.Logger
}

// Store is what the engine runs on: the execution store family, one value.
type Store[TX any] interface {
	store.ExecutionStore[TX]
	store.StepStore[TX]
}

// Engine creates tasks and runs their executions' steps: every change is
// one transaction with the events that report it, decided by Next and
// NextStep and applied as conditional updates. Safe for concurrent use.
type Engine[TX any] struct {
	s   Store[TX]
	cfg Config
}

// New returns an engine over s.
func New[TX any](s Store[TX], cfg *Config) (*Engine[TX], error) {
	if s == nil || cfg == nil || len(cfg.Types) == 0 {
		return nil, fmt.Errorf("%w: a store and at least one task type are required", ErrBadConfig)
	}
	c := *cfg
	c.Types = make(map[string]TypeConfig, len(cfg.Types))
	for name, t := range cfg.Types {
		switch {
		case name == "" || strings.TrimSpace(name) != name:
			return nil, fmt.Errorf("%w: task type %q", ErrBadConfig, name)
		case t.Lease < 0 || t.MaxAttempts < 0 || t.Backoff < 0:
			return nil, fmt.Errorf("%w: task type %q: negative Lease, MaxAttempts or Backoff", ErrBadConfig, name)
		}
		if t.Lease == 0 {
			t.Lease = DefaultLease
		}
		if t.MaxAttempts == 0 {
			t.MaxAttempts = DefaultMaxAttempts
		}
		if t.Backoff == 0 {
			t.Backoff = DefaultBackoff
		}
		c.Types[name] = t
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = rand.Text
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Engine[TX]{s: s, cfg: c}, nil
}

// NewTask is an application's request to do work.
type NewTask struct {
	Type        string
	Input       json.RawMessage
	ExternalRef string
	Deadline    time.Time
	// Workflow and Version, when set, name the workflow its execution runs
	// (a workflow's run: its events and callbacks name the workflow, not
	// the task).
	Workflow string
	Version  int
	// Step, when set, is its first step; defaults to one named after the
	// type, with a key of the execution's.
	Step *StepSpec
	// ExecutionID, when set, is its execution's ID (a workflow trigger's,
	// which derives from its identity); one the application used already
	// is store.ErrDuplicate. Defaults to a new one.
	ExecutionID string
}

// eventData is the JSON data of every event.
type eventData struct {
	TaskID      string          `json:"taskId,omitempty"`
	ExecutionID string          `json:"executionId"`
	Number      int             `json:"executionNumber"`
	Workflow    string          `json:"workflow,omitempty"`
	Version     int             `json:"version,omitempty"`
	Status      string          `json:"status"`
	ExternalRef string          `json:"externalRef,omitempty"`
	Progress    *int            `json:"progress,omitempty"`
	Output      json.RawMessage `json:"output,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// event builds the event that reports e's status (or progress).
func (en *Engine[TX]) event(task store.Task, e store.Execution, typ string, progress *int) store.Event {
	d := eventData{TaskID: task.ID, ExecutionID: e.ID, Number: e.Number, Status: Status(e.Status).String(), ExternalRef: task.ExternalRef,
		Progress: progress, Output: e.Output, Error: e.Error, Workflow: e.Workflow, Version: e.Version}
	if e.Workflow != "" {
		d.TaskID, d.ExternalRef = "", "" // a workflow's run: its task is the engine's own
	}
	data, _ := json.Marshal(d) // plain types always marshal
	return store.Event{ExecutionID: e.ID, Type: typ, Data: data, Time: en.cfg.Now()}
}

// statusType is the event type of a transition to s.
func statusType(s Status) string { return "idem.execution." + strings.ToLower(s.String()) }

// memoKey is the context key of an engine call's memo.
type memoKey struct{}

// callMemo is what the OnEventTx hook keeps for the other events of one
// engine call (one transaction).
type callMemo struct {
	mu sync.Mutex
	m  map[any]any
}

// withMemo returns ctx with a memo for the events of one engine call in
// one transaction, unless it has one already.
func withMemo(ctx context.Context) context.Context {
	if ctx.Value(memoKey{}) != nil {
		return ctx
	}
	return context.WithValue(ctx, memoKey{}, &callMemo{m: map[any]any{}})
}

// Memoized returns what OnEventTx keeps under k for the other events of the
// engine call that ctx belongs to, computing it with read the first time.
// An engine call that writes several events (a task's creation; the starts
// and completions of a worker's batch) runs in one transaction, so what
// read returns in it holds for all of them: a hook that reads, say, the
// application of each event reads it once per call instead of once per
// event. Outside an engine call it always reads.
func Memoized[V any](ctx context.Context, k any, read func() (V, error)) (V, error) {
	m, _ := ctx.Value(memoKey{}).(*callMemo)
	if m == nil {
		return read()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.m[k]; ok {
		return v.(V), nil
	}
	v, err := read()
	if err == nil {
		m.m[k] = v
	}
	return v, err
}

// WithMemo returns ctx with v kept under k in the memo of the engine calls
// made with it, so that Memoized answers v there without reading: for a
// caller that has just read it (an HTTP request authenticated by its
// application carries that application). The memo then lasts as long as
// ctx, across the engine calls made with it.
func WithMemo(ctx context.Context, k, v any) context.Context {
	m, _ := ctx.Value(memoKey{}).(*callMemo)
	if m == nil {
		m = &callMemo{m: map[any]any{}}
		ctx = context.WithValue(ctx, memoKey{}, m)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[k] = v
	return ctx
}

// emit reports ev to OnEventTx.
func (en *Engine[TX]) emit(ctx context.Context, tx TX, task store.Task, e store.Execution, ev store.Event) error {
	if en.cfg.OnEventTx == nil {
		return nil
	}
	return en.cfg.OnEventTx(ctx, tx, task.App, task, e, ev)
}

// CreateTx writes, in tx, the task, its first execution (CREATED, then
// QUEUED: events 1 and 2) and its step, ready for a worker, in one store
// call (PostgreSQL: one round trip). The caller's own writes in tx (its
// request key, its business row) commit with them.
func (en *Engine[TX]) CreateTx(ctx context.Context, tx TX, app string, nt NewTask) (store.Task, store.Execution, error) {
	ctx = withMemo(ctx)
	tc, ok := en.cfg.Types[nt.Type]
	if !ok {
		return store.Task{}, store.Execution{}, fmt.Errorf("%w: %q", ErrUnknownType, nt.Type)
	}
	if !json.Valid(nt.Input) {
		return store.Task{}, store.Execution{}, fmt.Errorf("%w: input is not JSON", ErrBadInput)
	}
	next, changed, err := Next(StatusCreated, ActionQueue)
	if err != nil || !changed {
		return store.Task{}, store.Execution{}, fmt.Errorf("execution: a created execution does not queue: %v", err)
	}
	// The stores keep microseconds: what CreateTx returns is what they read.
	now := en.cfg.Now().Truncate(time.Microsecond)
	task := store.Task{App: app, ID: en.cfg.NewID(), Type: nt.Type, Input: nt.Input, ExternalRef: nt.ExternalRef,
		Deadline: nt.Deadline, CreatedAt: now}
	id := nt.ExecutionID
	if id == "" {
		id = en.cfg.NewID()
	}
	e := store.Execution{App: app, ID: id, TaskID: task.ID, Number: 1, Status: store.ExecutionCreated, LastSequence: 1, CreatedAt: now,
		Workflow: nt.Workflow, Version: nt.Version}
	task.CurrentExecution, task.Status = e.ID, e.Status
	queued := e
	queued.Status, queued.LastSequence = store.ExecutionStatus(next), 2
	first := en.event(task, e, statusType(StatusCreated), nil)
	second := en.event(task, queued, statusType(next), nil)
	step, err := en.newStep(task, queued, firstStep(task, e, tc, nt.Step), now)
	if err != nil {
		return store.Task{}, store.Execution{}, err
	}
	if err := en.s.CreateTaskTx(ctx, tx, store.NewTask{Task: task, ExecutionID: e.ID, Status: queued.Status, Event: first,
		More: []store.Event{second}, Step: &step, Workflow: e.Workflow, Version: e.Version}); err != nil {
		return store.Task{}, store.Execution{}, err
	}
	first.Sequence, second.Sequence = 1, 2
	if err := en.emit(ctx, tx, task, e, first); err != nil {
		return store.Task{}, store.Execution{}, err
	}
	if err := en.emit(ctx, tx, task, queued, second); err != nil {
		return store.Task{}, store.Execution{}, err
	}
	task.Status = queued.Status
	return task, queued, nil
}

// queue moves a CREATED execution to QUEUED and dispatches its first
// step (first, or one named after the type).
func (en *Engine[TX]) queue(ctx context.Context, tx TX, task store.Task, e store.Execution, tc TypeConfig, first *StepSpec) (store.Execution, error) {
	e, err := en.transition(ctx, tx, task, e, ActionQueue, store.Transition{})
	if err != nil {
		return store.Execution{}, err
	}
	return e, en.dispatch(ctx, tx, task, e, firstStep(task, e, tc, first), e.CreatedAt)
}

// firstStep is the first step of execution e: first, or one named after
// the task's type.
func firstStep(task store.Task, e store.Execution, tc TypeConfig, first *StepSpec) StepSpec {
	if first != nil {
		return *first
	}
	return StepSpec{Name: task.Type, IdempotencyKey: e.ID + ":" + task.Type, Once: tc.Once}
}

// dispatch adds step s of e, ready for a worker from due on.
func (en *Engine[TX]) dispatch(ctx context.Context, tx TX, task store.Task, e store.Execution, s StepSpec, due time.Time) error {
	st, err := en.newStep(task, e, s, due)
	if err != nil {
		return err
	}
	return en.s.AddStepTx(ctx, tx, st)
}

// newStep is step s of e, ready for a worker from due on.
func (en *Engine[TX]) newStep(task store.Task, e store.Execution, s StepSpec, due time.Time) (store.Step, error) {
	if s.Name == "" {
		return store.Step{}, fmt.Errorf("%w: a step needs a name", ErrBadInput)
	}
	return store.Step{App: task.App, ID: en.cfg.NewID(), ExecutionID: e.ID, Name: s.Name, Type: task.Type,
		Once: s.Once || en.cfg.Types[task.Type].Once, Status: store.StepDispatched, DueAt: due, IdempotencyKey: s.IdempotencyKey, CreatedAt: en.cfg.Now()}, nil
}

// transition applies action a to e in tx (decided by Next on e's status)
// with the event that reports it. An execution no longer in the status it
// was read in is ErrIllegalTransition (another writer moved it).
func (en *Engine[TX]) transition(ctx context.Context, tx TX, task store.Task, e store.Execution, a Action, t store.Transition) (store.Execution, error) {
	got, err := en.transitions(ctx, tx, []change{{task: task, e: e, a: a, t: t}})
	return got[0], err
}

// change is one execution's transition, for transitions.
type change struct {
	task store.Task
	e    store.Execution
	a    Action
	t    store.Transition
}

// transitions applies each change as transition does, in one round trip
// where the store can (store.ExecutionStore.TransitionsTx), and returns
// the executions as they now are. The first change that does not apply is
// ErrIllegalTransition, and the caller's transaction must roll back.
func (en *Engine[TX]) transitions(ctx context.Context, tx TX, cs []change) ([]store.Execution, error) {
	p, err := en.prepare(cs)
	if err != nil || len(p.ts) == 0 {
		return p.out, err
	}
	got, applied, err := en.s.TransitionsTx(ctx, tx, p.ts)
	if err != nil {
		return p.out, err
	}
	return en.finish(ctx, tx, cs, p, got, applied)
}

// prepared are the transitions of a batch of changes, decided before they
// are written.
type prepared struct {
	// out is each change's execution: as it is, for a change that moves
	// nothing, until finish fills in the others.
	out []store.Execution
	// ts are the transitions to write, and at the index of each's change.
	ts []store.Transition
	at []int
}

// prepare decides the transitions of cs (Next), with their events.
func (en *Engine[TX]) prepare(cs []change) (prepared, error) {
	p := prepared{out: make([]store.Execution, len(cs))}
	for i, c := range cs {
		next, changed, err := Next(Status(c.e.Status), c.a)
		if err != nil || !changed {
			p.out[i] = c.e
			if err != nil {
				return p, err
			}
			continue
		}
		t := c.t
		t.App, t.ID, t.From, t.To = c.e.App, c.e.ID, c.e.Status, store.ExecutionStatus(next)
		if next.Terminal() && t.FinishedAt.IsZero() {
			t.FinishedAt = en.cfg.Now()
		}
		preview := c.e
		preview.Status, preview.Output, preview.Error = t.To, t.Output, t.Error
		t.Event = en.event(c.task, preview, statusType(next), nil)
		p.ts, p.at = append(p.ts, t), append(p.at, i)
	}
	return p, nil
}

// finish takes in p's transitions as written (got, applied): one that did
// not apply is ErrIllegalTransition; then it reports their events.
func (en *Engine[TX]) finish(ctx context.Context, tx TX, cs []change, p prepared, got []store.Execution, applied []bool) ([]store.Execution, error) {
	ctx = withMemo(ctx)
	for j, i := range p.at {
		p.out[i] = got[j]
		if !applied[j] {
			return p.out, fmt.Errorf("%w: %v on a %v execution (it was %v when decided)", ErrIllegalTransition, cs[i].a, Status(got[j].Status), Status(cs[i].e.Status))
		}
	}
	for j, i := range p.at {
		ev := p.ts[j].Event
		ev.Sequence = got[j].LastSequence
		if err := en.emit(ctx, tx, cs[i].task, got[j], ev); err != nil {
			return p.out, err
		}
	}
	return p.out, nil
}
