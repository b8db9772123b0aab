package serve

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/problem"
)

type claimRequest struct {
	Types        []string `json:"types"`
	WaitSeconds  int      `json:"waitSeconds"`
	LeaseSeconds int      `json:"leaseSeconds"`
}

type claimReply struct {
	Step  Step            `json:"step"`
	Task  Task            `json:"task"`
	Input json.RawMessage `json:"input"`
}

// claim claims a step of the worker's types, waiting up to waitSeconds
// for one (204 when none came).
func (srv *Server[TX]) claim(w http.ResponseWriter, r *http.Request) {
	var req claimRequest
	if !srv.decode(w, r, &req) {
		return
	}
	switch {
	case len(req.Types) == 0:
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "types: at least one task type")
		return
	case slices.Contains(req.Types, workflowType):
		srv.problem(w, problem.SlugUnknownTaskType, http.StatusUnprocessableEntity, "workflows' steps run in the service itself")
		return
	case req.WaitSeconds < 0 || time.Duration(req.WaitSeconds)*time.Second > maxWait:
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "waitSeconds must be 0–30")
		return
	case req.LeaseSeconds < 0 || req.LeaseSeconds > 3600:
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "leaseSeconds must be 1–3600")
		return
	}
	deadline := time.Now().Add(time.Duration(req.WaitSeconds) * time.Second)
	owner := rand.Text()
	for {
		ready := srv.stepsReady.wait()
		var c execution.Claimed
		var ok bool
		err := srv.inTx(r.Context(), func(ctx context.Context, tx TX) error {
			var err error
			c, ok, err = srv.en.ClaimTx(ctx, tx, req.Types, owner, time.Duration(req.LeaseSeconds)*time.Second)
			return err
		})
		if err != nil {
			srv.failed(w, r, err)
			return
		}
		if ok {
			reply(w, http.StatusOK, claimReply{Step: stepOf(c.Step), Task: taskOf(c.Task), Input: json.RawMessage(c.Task.Input)})
			return
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-ready:
		case <-time.After(min(wait, srv.cfg.ClaimPoll)):
		}
	}
}

type epochRequest struct {
	Epoch        int64           `json:"epoch"`
	LeaseSeconds int             `json:"leaseSeconds"`
	Progress     *int            `json:"progress"`
	Message      string          `json:"message"`
	Output       json.RawMessage `json:"output"`
	Error        string          `json:"error"`
	Retryable    bool            `json:"retryable"`
}

// stepRequest reads a worker's write: the step (by its wire id) and the
// body with its epoch.
func (srv *Server[TX]) stepRequest(w http.ResponseWriter, r *http.Request) (app, id string, req epochRequest, ok bool) {
	app, id, ok = parseStepID(r.PathValue("id"))
	if !ok {
		srv.problem(w, problem.SlugNotFound, http.StatusNotFound, "")
		return "", "", req, false
	}
	if !srv.decode(w, r, &req) {
		return "", "", req, false
	}
	if req.Epoch < 1 {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "epoch: the claim's epoch (≥ 1) is required")
		return "", "", req, false
	}
	return app, id, req, true
}

func (srv *Server[TX]) heartbeat(w http.ResponseWriter, r *http.Request) {
	app, id, req, ok := srv.stepRequest(w, r)
	if !ok {
		return
	}
	if req.LeaseSeconds < 0 || req.LeaseSeconds > 3600 {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "leaseSeconds must be 1–3600")
		return
	}
	var until time.Time
	var cancel bool
	err := srv.inTx(r.Context(), func(ctx context.Context, tx TX) error {
		var err error
		until, cancel, err = srv.en.HeartbeatTx(ctx, tx, app, id, req.Epoch, time.Duration(req.LeaseSeconds)*time.Second)
		return err
	})
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, struct {
		LeaseUntil      time.Time `json:"leaseUntil"`
		CancelRequested bool      `json:"cancelRequested"`
	}{until.UTC(), cancel})
}

func (srv *Server[TX]) progress(w http.ResponseWriter, r *http.Request) {
	app, id, req, ok := srv.stepRequest(w, r)
	if !ok {
		return
	}
	if req.Progress == nil || *req.Progress < 0 || *req.Progress > 100 {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "progress must be 0–100")
		return
	}
	err := srv.inTx(r.Context(), func(ctx context.Context, tx TX) error {
		return srv.en.ProgressTx(ctx, tx, app, id, req.Epoch, *req.Progress)
	})
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, struct{}{})
}

func (srv *Server[TX]) complete(w http.ResponseWriter, r *http.Request) {
	app, id, req, ok := srv.stepRequest(w, r)
	if !ok {
		return
	}
	var e Execution
	err := srv.inTx(r.Context(), func(ctx context.Context, tx TX) error {
		got, err := srv.en.CompleteTx(ctx, tx, app, id, req.Epoch, req.Output)
		e = executionOf(got)
		return err
	})
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, struct {
		Execution Execution `json:"execution"`
	}{e})
}

func (srv *Server[TX]) fail(w http.ResponseWriter, r *http.Request) {
	app, id, req, ok := srv.stepRequest(w, r)
	if !ok {
		return
	}
	if req.Error == "" {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "error: say why the step failed")
		return
	}
	var e Execution
	err := srv.inTx(r.Context(), func(ctx context.Context, tx TX) error {
		got, err := srv.en.FailTx(ctx, tx, app, id, req.Epoch, req.Error, req.Retryable)
		e = executionOf(got)
		return err
	})
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	reply(w, http.StatusOK, struct {
		Execution Execution `json:"execution"`
	}{e})
}
