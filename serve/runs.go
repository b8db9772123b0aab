package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/internal/canonjson"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/workflow"
)

// workflowType is the task type of workflows' runs: each run is an
// execution of a task of this type, hidden from the tasks API, whose
// input is the trigger's payload and whose steps are the vertices it runs.
// Declared types may not start with "idem.".
const workflowType = "idem.workflow"

// maxCompiled bounds the compiled versions kept in memory.
const maxCompiled = 1024

// compiledKey names a stored version of an application's workflow.
type compiledKey struct {
	app, name string
	version   int
}

// compiledCache keeps compiled versions: a version never changes once
// stored.
type compiledCache struct {
	mu sync.Mutex
	m  map[compiledKey]*workflow.Workflow
}

// compiled returns the application's workflow name at version (0: the
// latest) and that version's number.
func (srv *Server[TX]) compiled(ctx context.Context, app, name string, version int) (*workflow.Workflow, int, error) {
	c := &srv.workflows
	if version > 0 {
		c.mu.Lock()
		w := c.m[compiledKey{app, name, version}]
		c.mu.Unlock()
		if w != nil {
			return w, version, nil
		}
	}
	d, err := srv.s.GetDefinition(ctx, store.DefinitionKey{App: app, Kind: workflow.Kind, Name: name}, version)
	if err != nil {
		return nil, 0, err
	}
	// The latest version, read now, may be compiled already: a trigger
	// then pays the read, not the parsing and compiling of its body.
	c.mu.Lock()
	w := c.m[compiledKey{app, name, d.Version}]
	c.mu.Unlock()
	if w != nil {
		return w, d.Version, nil
	}
	w, _, _, err = workflow.Load(d.Body, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("serve: the stored workflow %s version %d: %w", name, d.Version, err)
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCompiled {
		c.m = map[compiledKey]*workflow.Workflow{}
	}
	c.m[compiledKey{app, name, d.Version}] = w
	c.mu.Unlock()
	return w, d.Version, nil
}

// started is what a trigger, a test run and a start over answer.
type started struct {
	Execution Execution `json:"execution"`
	Workflow  string    `json:"workflow,omitempty"`
	Version   int       `json:"version,omitempty"`
}

func (srv *Server[TX]) trigger(w http.ResponseWriter, r *http.Request) { srv.start(w, r, false) }
func (srv *Server[TX]) testRun(w http.ResponseWriter, r *http.Request) { srv.start(w, r, true) }

// start answers a trigger of a workflow (test: a test run, always a new
// execution). The trigger's identity is taken by a unique constraint in
// the transaction that creates its execution, so concurrent triggers of
// one identity start one execution; the others get it, with 200 and
// Idempotent-Replayed: true.
func (srv *Server[TX]) start(w http.ResponseWriter, r *http.Request, test bool) {
	name, ok := srv.definitionName(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if q.Has("forceNewExecution") && !test {
		srv.problem(w, problem.SlugForceNewExecutionNotAllowed, http.StatusBadRequest,
			"a trigger never forces a new execution: use POST /v1/workflows/"+name+"/test-run")
		return
	}
	payload, ok := srv.body(w, r)
	if !ok {
		return
	}
	if len(bytes.TrimSpace(payload)) == 0 {
		payload = []byte(`null`)
	}
	if !json.Valid(payload) {
		srv.problem(w, problem.SlugBodyInvalidJSON, http.StatusBadRequest, "the payload is not JSON")
		return
	}
	app := appFrom(r.Context())
	wf, version, err := srv.compiled(r.Context(), app, name, 0)
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	e, outcome, err := srv.fire(r.Context(), app, name, wf, version, payload, q.Get("clientIdempotencyId"), !test, false)
	srv.replyFired(w, r, name, e, outcome, err, "this trigger's identity names an execution of another payload")
}

// replyFired answers what fire did: 201 a new run, 200 with
// Idempotent-Replayed the run the identity names, 422 an identity reused
// with another payload (reused says so), or fire's error (failed: 422
// trigger-invalid, 503 for the store).
func (srv *Server[TX]) replyFired(w http.ResponseWriter, r *http.Request, name string, e store.Execution, outcome fireOutcome, err error, reused string) {
	switch {
	case err != nil:
		srv.failed(w, r, err)
	case outcome == fireReused:
		srv.problem(w, problem.SlugKeyReused, http.StatusUnprocessableEntity, reused)
	case outcome == fireMerged:
		w.Header().Set("Idempotent-Replayed", "true")
		reply(w, http.StatusOK, started{Execution: executionOf(e), Workflow: name, Version: e.Version})
	default:
		reply(w, http.StatusCreated, started{Execution: executionOf(e), Workflow: name, Version: e.Version})
	}
}

// fireOutcome is what a trigger did.
type fireOutcome int

const (
	fireCreated fireOutcome = iota // a new run
	fireMerged                     // the run its identity names, as it is
	fireReused                     // refused: its identity names a run of another payload
)

// fire triggers a run of the application's workflow name at version with
// payload: with identity (clientID, else the ENTRY_POINT's fields, else
// the payload), taken by the trigger record's unique key in the
// transaction that creates the run; without, a new run (a test run). once
// makes a finished run's identity never reused within its window (a
// schedule's tick: fired again, it is the same run however it ended).
// Errors: ErrTriggerInvalid (wrapping why) for a payload the workflow
// cannot run, storeError when the store failed meanwhile.
func (srv *Server[TX]) fire(ctx context.Context, app, name string, wf *workflow.Workflow, version int, payload []byte, clientID string,
	identity, once bool) (store.Execution, fireOutcome, error) {
	if err := wf.CheckPayload(payload); err != nil {
		return store.Execution{}, 0, fmt.Errorf("%w: %w", ErrTriggerInvalid, err)
	}
	first, err := firstStep(ctx, wf, payload, srv.caller(app))
	switch {
	case isStoreError(err):
		return store.Execution{}, 0, err
	case err != nil:
		return store.Execution{}, 0, fmt.Errorf("%w: %w", ErrTriggerInvalid, err)
	}
	nt := execution.NewTask{Type: workflowType, Input: payload, Workflow: name, Version: version, Step: first}
	var e store.Execution
	if !identity {
		err := srv.inTx(ctx, func(ctx context.Context, tx TX) error {
			var err error
			_, e, err = srv.en.CreateTx(ctx, tx, app, nt)
			return err
		})
		return e, fireCreated, err
	}
	id, err := wf.Identity(app, name, payload, clientID)
	if err != nil {
		return store.Execution{}, 0, fmt.Errorf("%w: %w", ErrTriggerInvalid, err)
	}
	nt.ExternalRef = hex.EncodeToString(id.Key[:]) // for a start over, which moves the identity on
	reuse := wf.Reuse()
	if once {
		reuse = workflow.RejectDuplicate
	}
	var outcome fireOutcome
	err = srv.inTx(ctx, func(ctx context.Context, tx TX) error {
		outcome = fireCreated
		now := srv.cfg.Now()
		t := store.Trigger{App: app, Workflow: name, Key: id.Key[:], Fingerprint: id.Fingerprint[:], ExecutionID: runID(id.Key, 1),
			Generation: 1, CreatedAt: now, ExpiresAt: now.Add(wf.Window())}
		cur, taken, err := srv.s.TakeTriggerTx(ctx, tx, t)
		if err != nil {
			return err
		}
		if !taken {
			if e, err = srv.s.GetExecutionTx(ctx, tx, app, cur.ExecutionID); err != nil {
				return err
			}
			within, live := now.Before(cur.ExpiresAt), !execution.Status(e.Status).Terminal()
			if (within || live) && !bytes.Equal(cur.Fingerprint, t.Fingerprint) {
				outcome = fireReused
				return nil
			}
			if live || (within && !reusable(reuse, execution.Status(e.Status))) {
				outcome = fireMerged
				return nil
			}
			// A new window, or a reuse after a finished execution.
			t.Generation, t.ExecutionID = cur.Generation+1, runID(id.Key, cur.Generation+1)
			applied, err := srv.s.ReplaceTriggerTx(ctx, tx, t)
			if err != nil {
				return err
			}
			if !applied {
				return fmt.Errorf("serve: the trigger of %s moved on while held", name)
			}
		}
		nt.ExecutionID = t.ExecutionID
		_, e, err = srv.en.CreateTx(ctx, tx, app, nt)
		return err
	})
	return e, outcome, err
}

// reusable says whether, under policy p, a trigger within the window of
// an execution that finished in s starts a new one.
func reusable(p workflow.Reuse, s execution.Status) bool {
	switch p {
	case workflow.AllowDuplicate:
		return true
	case workflow.AllowDuplicateFailedOnly:
		return s != execution.StatusSucceeded
	}
	return false
}

// runID is the execution ID of a trigger identity's generation-th run.
func runID(key [32]byte, generation int) string {
	id := hex.EncodeToString(key[:16])
	if generation > 1 {
		id += "-" + strconv.Itoa(generation)
	}
	return id
}

// firstStep is a run's first step: where the ENTRY_POINT leads for
// payload.
func firstStep(ctx context.Context, wf *workflow.Workflow, payload []byte, c *workflow.Caller) (*execution.StepSpec, error) {
	in, err := workflow.Input(payload, nil)
	if err != nil {
		return nil, err
	}
	n, err := wf.Next(ctx, wf.Entry(), in, c)
	if err != nil {
		return nil, err
	}
	return &execution.StepSpec{Name: n.Vertex, IdempotencyKey: n.Key, Once: n.Once}, nil
}

// outputs are the outputs of steps that completed, by name (the latest of
// a name that ran more than once).
func outputs(steps []store.Step) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for _, st := range steps {
		if execution.StepStatus(st.Status) == execution.StepCompleted {
			out[st.Name] = st.Output
		}
	}
	return out
}

// nextVertex is the workflow type's TypeConfig.Next: where the run goes
// after the step that completed, decided on the run's data.
func (srv *Server[TX]) nextVertex(ctx context.Context, c execution.Continuation) (*execution.StepSpec, json.RawMessage, error) {
	e := c.Execution
	wf, _, err := srv.compiled(ctx, e.App, e.Workflow, e.Version)
	if err != nil {
		return nil, nil, err
	}
	if wf.Type(c.Done.Name) == workflow.End {
		return nil, c.Done.Output, nil
	}
	in, err := workflow.Input(c.Task.Input, outputs(c.Steps))
	if err != nil {
		return nil, nil, execution.Permanent(err)
	}
	n, err := wf.Next(ctx, c.Done.Name, in, srv.caller(e.App))
	switch {
	case isStoreError(err):
		return nil, nil, err // rolled back, and settled again
	case err != nil:
		return nil, nil, execution.Permanent(err)
	case n.End:
		return nil, c.Done.Output, nil
	}
	return &execution.StepSpec{Name: n.Vertex, IdempotencyKey: n.Key, Once: n.Once}, nil, nil
}

// runVertex is the workflow type's handler: it runs the step's vertex
// with the key the step was added with, and says what a failure means:
// a transient one is retried (the same key) within the vertex's budget,
// after its backoff or the target's Retry-After; a rejection or data
// that does not fit fails the step.
func (srv *Server[TX]) runVertex(ctx context.Context, job execution.Job) (execution.Result[TX], error) {
	e, st := job.Execution, job.Step
	wf, _, err := srv.compiled(ctx, e.App, e.Workflow, e.Version)
	if err != nil {
		return execution.Result[TX]{}, err
	}
	if wf.Type(st.Name) == workflow.End {
		return execution.Result[TX]{}, nil
	}
	steps, err := srv.s.ListSteps(ctx, e.App, e.ID)
	if err != nil {
		return execution.Result[TX]{}, err
	}
	in, err := workflow.Input(job.Task.Input, outputs(steps))
	if err != nil {
		return execution.Result[TX]{}, execution.Permanent(err)
	}
	out, err := wf.Run(ctx, st.Name, in, st.IdempotencyKey, srv.caller(e.App))
	if err == nil {
		return execution.Result[TX]{Output: out}, nil
	}
	budget, backoff := wf.Retry(st.Name)
	switch {
	case errors.Is(err, workflow.ErrTransient) && st.Attempts >= budget:
		return execution.Result[TX]{}, execution.Permanent(fmt.Errorf("%w (attempt %d of %d)", err, st.Attempts, budget))
	case errors.Is(err, workflow.ErrTransient):
		wait := min(backoff<<max(st.Attempts-1, 0), time.Hour)
		if ce, ok := errors.AsType[*workflow.CallError](err); ok && ce.RetryAfter > 0 {
			wait = ce.RetryAfter
		}
		return execution.Result[TX]{}, execution.RetryAfter(err, wait)
	case errors.Is(err, workflow.ErrRejected), errors.Is(err, workflow.ErrData):
		return execution.Result[TX]{}, execution.Permanent(err)
	}
	return execution.Result[TX]{}, err
}

// storeError is a store's failure while a run's data was read (a
// connection): not the run's fault, so it is retried, never a refusal.
type storeError struct{ error }

func (e storeError) Unwrap() error { return e.error }

func isStoreError(err error) bool { _, ok := errors.AsType[storeError](err); return ok }

func isTriggerInvalid(err error) bool { return errors.Is(err, ErrTriggerInvalid) }

// connection reads the application's connection name, as it is now.
func (srv *Server[TX]) connection(ctx context.Context, app, name string) (*workflow.Connection, error) {
	d, err := srv.s.GetDefinition(ctx, store.DefinitionKey{App: app, Kind: workflow.ConnectionKind, Name: name}, 0)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("%w: no connection %q in this application", workflow.ErrData, name)
	case err != nil:
		return nil, storeError{err}
	}
	conn, _, err := workflow.LoadConnection(d.Body, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: the stored connection %q: %w", workflow.ErrData, name, err)
	}
	return conn, nil
}

// caller is what the application's GATEWAY steps call with.
func (srv *Server[TX]) caller(app string) *workflow.Caller {
	c := &workflow.Caller{Client: srv.cfg.GatewayClient, Allowed: func(u *url.URL) bool { return srv.allowed(u.String()) },
		Connection: func(ctx context.Context, name string) (*workflow.Connection, error) {
			return srv.connection(ctx, app, name)
		}}
	c.Secret = func(ctx context.Context, name string) (string, error) {
		if srv.cfg.Secrets != nil {
			return srv.cfg.Secrets(ctx, app, name)
		}
		v, err := srv.s.GetSecret(ctx, app, name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return "", fmt.Errorf("%w: the application has no secret %q", workflow.ErrData, name)
		case err != nil:
			return "", storeError{err}
		}
		return string(v), nil
	}
	return c
}

// RunWorkflows runs workflows' steps in process until ctx ends, Config.
// WorkflowConcurrency at a time (an execution.Worker of the workflow
// type). Every `idem serve` process runs it; they share the steps through
// the store's claims.
func (srv *Server[TX]) RunWorkflows(ctx context.Context) error {
	return srv.runner.Run(ctx)
}

// operatorHeader names the person behind an operator's call, for the
// audit; the application is always recorded.
const operatorHeader = "Idem-Operator"

// actor is who made an operator's call: the application, and the
// operator it names.
func actor(r *http.Request) string {
	a := "app:" + appFrom(r.Context())
	if op := strings.TrimSpace(r.Header.Get(operatorHeader)); op != "" && len(op) <= 200 && strings.IndexFunc(op, func(c rune) bool { return c < ' ' || c == 0x7f }) < 0 {
		a += " operator:" + op
	}
	return a
}

// ErrTriggerInvalid is wrapped by the errors of a run whose payload the
// workflow cannot run (StartOver on a version whose ENTRY_POINT leads
// nowhere for it, or whose first key cannot be computed).
var ErrTriggerInvalid = errors.New("serve: the workflow cannot run this payload")

// retry resumes an execution where it stopped: its failed or
// OUTCOME_UNKNOWN steps run again with the same keys. A repeat changes
// nothing, so it needs no Idempotency-Key.
func (srv *Server[TX]) retry(w http.ResponseWriter, r *http.Request) {
	e, err := srv.Retry(r.Context(), appFrom(r.Context()), r.PathValue("id"), actor(r))
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, executionOf(e))
}

// Retry is an operator's retry of the application's execution
// (execution.Engine.RetryTx), recorded in its events with actor (who).
func (srv *Server[TX]) Retry(ctx context.Context, app, executionID, actor string) (store.Execution, error) {
	var e store.Execution
	err := srv.inTx(ctx, func(ctx context.Context, tx TX) error {
		before, err := srv.s.GetExecutionTx(ctx, tx, app, executionID)
		if err != nil {
			return err
		}
		if e, err = srv.en.RetryTx(ctx, tx, app, before.ID); err != nil || e.LastSequence == before.LastSequence {
			return err // a repeat: nothing to record
		}
		return srv.en.RecordTx(ctx, tx, app, e.ID, "retry", actor)
	})
	srv.settled()
	return e, err
}

// Cancel is an operator's cancel of the application's execution
// (execution.Engine.CancelTx), recorded in its events with actor (who).
// It returns the execution and its status before.
func (srv *Server[TX]) Cancel(ctx context.Context, app, executionID, actor string) (e store.Execution, was store.ExecutionStatus, err error) {
	err = srv.inTx(ctx, func(ctx context.Context, tx TX) error {
		cur, err := srv.s.GetExecutionTx(ctx, tx, app, executionID)
		if err != nil {
			return err
		}
		was = cur.Status
		if e, err = srv.en.CancelTx(ctx, tx, app, executionID); err != nil || e.LastSequence == cur.LastSequence {
			return err // a repeat: nothing to record
		}
		return srv.en.RecordTx(ctx, tx, app, e.ID, "cancel", actor)
	})
	srv.settled()
	return e, was, err
}

// startOver starts an execution over as a new one, behind the request-key
// middleware (a retried click starts one run).
func (srv *Server[TX]) startOver(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Version string `json:"version"`
	}
	if !srv.decode(w, r, &req) {
		return
	}
	if req.Version != "" && req.Version != "original" && req.Version != "latest" {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, `version: "original" (the default) or "latest"`)
		return
	}
	tx, ok := httpidem.TxFrom[TX](r.Context())
	if !ok {
		srv.unavailable(w, r, errNoTx)
		return
	}
	e, err := srv.startOverTx(r.Context(), tx, appFrom(r.Context()), r.PathValue("id"), req.Version == "latest", actor(r))
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusCreated, started{Execution: executionOf(e), Workflow: e.Workflow, Version: e.Version})
}

// StartOver starts the application's finished execution over as a new
// one: the same input, pinned to the original version or, with latest,
// the workflow's latest; from the first step, with the keys computed from
// that input again (the first run's, where they derive from business
// data, so targets absorb what it did). A trigger of its identity then
// gets the new run. Recorded in the old run's events with actor (who).
func (srv *Server[TX]) StartOver(ctx context.Context, app, executionID string, latest bool, actor string) (store.Execution, error) {
	var e store.Execution
	err := srv.inTx(ctx, func(ctx context.Context, tx TX) error {
		var err error
		e, err = srv.startOverTx(ctx, tx, app, executionID, latest, actor)
		return err
	})
	srv.settled()
	return e, err
}

func (srv *Server[TX]) startOverTx(ctx context.Context, tx TX, app, executionID string, latest bool, actor string) (store.Execution, error) {
	old, err := srv.s.GetExecutionTx(ctx, tx, app, executionID)
	if err != nil {
		return store.Execution{}, err
	}
	so := execution.StartOver{}
	if old.Workflow != "" {
		version := old.Version
		if latest {
			version = 0
		}
		wf, v, err := srv.compiled(ctx, app, old.Workflow, version)
		if err != nil {
			return store.Execution{}, err
		}
		task, err := srv.s.GetTaskTx(ctx, tx, app, old.TaskID)
		if err != nil {
			return store.Execution{}, err
		}
		if so.Step, err = firstStep(ctx, wf, task.Input, srv.caller(app)); isStoreError(err) {
			return store.Execution{}, err
		} else if err != nil {
			return store.Execution{}, fmt.Errorf("%w: %w", ErrTriggerInvalid, err)
		}
		so.Version = v
	}
	e, err := srv.en.StartOverTx(ctx, tx, app, old.ID, so)
	if err != nil {
		return store.Execution{}, err
	}
	if err := srv.moveTrigger(ctx, tx, app, old, e); err != nil {
		return store.Execution{}, err
	}
	return e, srv.en.RecordTx(ctx, tx, app, old.ID, "start-over:"+e.ID, actor)
}

// moveTrigger points the trigger identity of old's run (when it still
// names old) at e, its start over.
func (srv *Server[TX]) moveTrigger(ctx context.Context, tx TX, app string, old, e store.Execution) error {
	if old.Workflow == "" {
		return nil
	}
	task, err := srv.s.GetTaskTx(ctx, tx, app, old.TaskID)
	if err != nil {
		return err
	}
	key, err := hex.DecodeString(task.ExternalRef)
	if err != nil || len(key) != 32 {
		return nil // a test run: no identity
	}
	canon, err := canonjson.Canonical(task.Input)
	if err != nil {
		return err
	}
	fp := sha256.Sum256(canon)
	// The record exists (they are kept); were it gone, this takes it anew.
	now := srv.cfg.Now()
	cur, taken, err := srv.s.TakeTriggerTx(ctx, tx, store.Trigger{App: app, Workflow: old.Workflow, Key: key, Fingerprint: fp[:],
		ExecutionID: e.ID, Generation: 1, CreatedAt: now, ExpiresAt: now.Add(workflow.DefaultWindow)})
	if err != nil || taken || cur.ExecutionID != old.ID {
		return err
	}
	cur.Generation++
	cur.ExecutionID = e.ID
	_, err = srv.s.ReplaceTriggerTx(ctx, tx, cur)
	return err
}
