package serve

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"context"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store"
)

type createRequest struct {
	Type        string          `json:"type"`
	Input       json.RawMessage `json:"input"`
	ExternalRef string          `json:"externalRef"`
	Deadline    *time.Time      `json:"deadline"`
}

type created struct {
	Task      *Task     `json:"task,omitempty"`
	Execution Execution `json:"execution"`
}

// createTask runs behind the request-key middleware, in its transaction:
// the task and its stored answer commit together.
func (srv *Server[TX]) createTask(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if !srv.decode(w, r, &req) {
		return
	}
	if req.Type == "" {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "type is required")
		return
	}
	if req.Type == workflowType {
		srv.problem(w, problem.SlugUnknownTaskType, http.StatusUnprocessableEntity, "a workflow runs through POST /v1/workflows/{name}/trigger")
		return
	}
	if len(req.Input) == 0 {
		req.Input = json.RawMessage(`null`)
	}
	tx, ok := httpidem.TxFrom[TX](r.Context())
	if !ok {
		srv.unavailable(w, r, errNoTx)
		return
	}
	nt := execution.NewTask{Type: req.Type, Input: req.Input, ExternalRef: req.ExternalRef}
	if req.Deadline != nil {
		nt.Deadline = *req.Deadline
	}
	task, e, err := srv.en.CreateTx(r.Context(), tx, appFrom(r.Context()), nt)
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	t := taskOf(task)
	reply(w, http.StatusCreated, created{Task: &t, Execution: executionOf(e)})
}

type serveError string

func (e serveError) Error() string { return string(e) }

const errNoTx = serveError("serve: no transaction in the request's context")

func (srv *Server[TX]) rerun(w http.ResponseWriter, r *http.Request) {
	tx, ok := httpidem.TxFrom[TX](r.Context())
	if !ok {
		srv.unavailable(w, r, errNoTx)
		return
	}
	task, err := srv.s.GetTaskTx(r.Context(), tx, appFrom(r.Context()), r.PathValue("id"))
	if err == nil && task.Type == workflowType {
		err = store.ErrNotFound // a workflow's run: start it over instead
	}
	var e store.Execution
	if err == nil {
		e, err = srv.en.RerunTx(r.Context(), tx, appFrom(r.Context()), task.ID)
	}
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusCreated, created{Execution: executionOf(e)})
}

func (srv *Server[TX]) getTask(w http.ResponseWriter, r *http.Request) {
	t, err := srv.s.GetTask(r.Context(), appFrom(r.Context()), r.PathValue("id"))
	if err == nil && t.Type == workflowType {
		err = store.ErrNotFound // the service's own, behind a workflow's run
	}
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, taskOf(t))
}

// cursor is a page's position: the last task's creation time and id.
type cursor struct {
	At int64  `json:"t"`
	ID string `json:"i"`
}

func (srv *Server[TX]) listTasks(w http.ResponseWriter, r *http.Request) {
	q := store.TaskQuery{App: appFrom(r.Context()), Type: r.URL.Query().Get("type"), ExcludeType: workflowType, Limit: 50}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "limit must be 1–500")
			return
		}
		q.Limit = n
	}
	if v := r.URL.Query().Get("status"); v != "" {
		s, err := execution.ParseStatus(strings.ToUpper(v))
		if err != nil {
			srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "status: "+err.Error())
			return
		}
		q.Status = store.ExecutionStatus(s)
	}
	if v := r.URL.Query().Get("cursor"); v != "" {
		var c cursor
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err == nil {
			err = json.Unmarshal(b, &c)
		}
		if err != nil || c.ID == "" {
			srv.problem(w, problem.SlugCursorInvalid, http.StatusBadRequest, "")
			return
		}
		q.AfterTime, q.AfterID = time.UnixMicro(c.At), c.ID
	}
	tasks, err := srv.s.ListTasks(r.Context(), q)
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	out := struct {
		Items      []Task `json:"items"`
		NextCursor string `json:"nextCursor,omitempty"`
	}{Items: []Task{}}
	for _, t := range tasks {
		out.Items = append(out.Items, taskOf(t))
	}
	if len(tasks) == q.Limit {
		last := tasks[len(tasks)-1]
		b, _ := json.Marshal(cursor{At: last.CreatedAt.UnixMicro(), ID: last.ID})
		out.NextCursor = base64.RawURLEncoding.EncodeToString(b)
	}
	reply(w, http.StatusOK, out)
}

func (srv *Server[TX]) getExecution(w http.ResponseWriter, r *http.Request) {
	e, err := srv.s.GetExecution(r.Context(), appFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, executionOf(e))
}

func (srv *Server[TX]) listSteps(w http.ResponseWriter, r *http.Request) {
	steps, err := srv.s.ListSteps(r.Context(), appFrom(r.Context()), r.PathValue("id"))
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	out := struct {
		Items []Step `json:"items"`
	}{Items: []Step{}}
	for _, s := range steps {
		out.Items = append(out.Items, stepOf(s))
	}
	reply(w, http.StatusOK, out)
}

func (srv *Server[TX]) listEvents(w http.ResponseWriter, r *http.Request) {
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "after must be a sequence number ≥ 0")
			return
		}
		after = n
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > after {
			after = n
		}
	}
	app, id := appFrom(r.Context()), r.PathValue("id")
	e, err := srv.s.GetExecution(r.Context(), app, id)
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		srv.streamEvents(w, r, e, after)
		return
	}
	evs, err := srv.s.ListEvents(r.Context(), app, id, after, 1000)
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	out := struct {
		Items []Event `json:"items"`
	}{Items: []Event{}}
	for _, ev := range evs {
		out.Items = append(out.Items, srv.eventOf(e, ev))
	}
	reply(w, http.StatusOK, out)
}

// streamEvents sends the execution's events after `after` as server-sent
// events (id = sequence, event = type, data = the CloudEvent), as they
// are written, until the execution has finished and its last event was
// sent, or the client goes. A client that reconnects with Last-Event-ID
// continues after it: nothing is skipped, nothing repeated.
func (srv *Server[TX]) streamEvents(w http.ResponseWriter, r *http.Request, e store.Execution, after int64) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	for {
		evs, err := srv.s.ListEvents(r.Context(), e.App, e.ID, after, 100)
		if err != nil {
			return
		}
		for _, ev := range evs {
			b, _ := json.Marshal(srv.eventOf(e, ev))
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Sequence, ev.Type, b); err != nil {
				return
			}
			after = ev.Sequence
		}
		_ = rc.Flush()
		if len(evs) == 0 {
			cur, err := srv.s.GetExecution(r.Context(), e.App, e.ID)
			if err != nil || (execution.Status(cur.Status).Terminal() && cur.LastSequence <= after) {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(eventPoll):
			}
		}
	}
}

// eventOf is ev as a structured-mode CloudEvent. Its id is stable: the
// execution and the sequence.
func (srv *Server[TX]) eventOf(e store.Execution, ev store.Event) Event {
	seq := strconv.FormatInt(ev.Sequence, 10)
	return Event{SpecVersion: "1.0", ID: e.ID + "-" + seq, Source: srv.cfg.Source, Type: ev.Type, Subject: subjectOf(e),
		Sequence: seq, ExecutionID: e.ID, Time: ev.Time.UTC(), DataContentType: "application/json", Data: json.RawMessage(ev.Data)}
}

func (srv *Server[TX]) cancel(w http.ResponseWriter, r *http.Request) {
	e, was, err := srv.Cancel(r.Context(), appFrom(r.Context()), r.PathValue("id"), actor(r))
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	status := http.StatusOK // canceled now, or already
	if execution.Status(e.Status) == execution.StatusCanceling && execution.Status(was) != execution.StatusCanceling {
		status = http.StatusAccepted
	}
	reply(w, status, executionOf(e))
}

func (srv *Server[TX]) resolve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Verdict string          `json:"verdict"`
		Output  json.RawMessage `json:"output"`
	}
	if !srv.decode(w, r, &req) {
		return
	}
	var v execution.Verdict
	switch req.Verdict {
	case "retry":
		v = execution.VerdictRetry
	case "done":
		v = execution.VerdictDone
	default:
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, `verdict must be "retry" or "done"`)
		return
	}
	app := appFrom(r.Context())
	wapp, id, ok := parseStepID(r.PathValue("stepId"))
	if !ok || wapp != app {
		srv.problem(w, problem.SlugNotFound, http.StatusNotFound, "")
		return
	}
	var st store.Step
	err := srv.inTx(r.Context(), func(ctx context.Context, tx TX) error {
		cur, err := srv.s.GetStepTx(ctx, tx, app, id)
		if err != nil {
			return err
		}
		if cur.ExecutionID != r.PathValue("id") {
			return store.ErrNotFound
		}
		st, err = srv.en.ResolveTx(ctx, tx, app, id, v, req.Output)
		return err
	})
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, stepOf(st))
}
