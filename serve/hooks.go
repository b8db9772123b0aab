package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/workflow"
)

// maxEventID bounds a webhook event's id.
const maxEventID = 255

// hook answers a signed webhook that triggers the application's workflow
// (its ENTRY_POINT's "webhook"): no application token, the signature is
// the credential. The event's id (webhook-id, else Ce-Id) is the run's
// identity, so a redelivered event gets the run it started, however that
// run ended. An application, workflow or webhook that does not exist is
// 404 alike, so a stranger learns nothing from trying.
func (srv *Server[TX]) hook(w http.ResponseWriter, r *http.Request) {
	appName, name := r.PathValue("app"), r.PathValue("name")
	if !workflow.ValidName(name) {
		srv.problem(w, problem.SlugNotFound, http.StatusNotFound, "")
		return
	}
	a, err := srv.s.GetApp(r.Context(), appName)
	switch {
	case errors.Is(err, store.ErrNotFound):
		srv.problem(w, problem.SlugNotFound, http.StatusNotFound, "")
		return
	case err != nil:
		srv.unavailable(w, r, err)
		return
	case a.Disabled:
		srv.problem(w, problem.SlugApplicationDisabled, http.StatusForbidden, "")
		return
	}
	wf, version, err := srv.compiled(r.Context(), appName, name, 0)
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	h := wf.Webhook()
	if h == nil {
		srv.problem(w, problem.SlugNotFound, http.StatusNotFound, "")
		return
	}
	body, ok := srv.body(w, r)
	if !ok {
		return
	}
	secrets, err := srv.hookSecrets(r.Context(), appName, h)
	if err != nil {
		srv.unavailable(w, r, err)
		return
	}
	v, err := signature.NewVerifier(signature.Scheme(h.Scheme), secrets, nil)
	if err != nil {
		srv.problem(w, problem.SlugSignatureInvalid, http.StatusUnauthorized, "the workflow's webhook secrets cannot verify: "+err.Error())
		return
	}
	if err := v.Verify(r.Header, body); err != nil {
		switch {
		case errors.Is(err, signature.ErrExpired):
			srv.problem(w, problem.SlugSignatureExpired, http.StatusUnauthorized, err.Error())
		case errors.Is(err, signature.ErrBadSignature):
			srv.problem(w, problem.SlugSignatureInvalid, http.StatusUnauthorized, "")
		default:
			srv.problem(w, problem.SlugSignatureMalformed, http.StatusBadRequest, err.Error())
		}
		return
	}
	id := r.Header.Get("webhook-id")
	if id == "" {
		id = r.Header.Get("Ce-Id")
	}
	if id == "" || len(id) > maxEventID || strings.IndexFunc(id, func(c rune) bool { return c <= ' ' || c > '~' }) >= 0 {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "the event's id (webhook-id, or Ce-Id): 1 to 255 printable ASCII characters")
		return
	}
	if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
		srv.problem(w, problem.SlugBodyInvalidJSON, http.StatusBadRequest, "the event's body is the run's payload: JSON")
		return
	}
	e, outcome, err := srv.fire(r.Context(), appName, name, wf, version, body, "webhook-"+id, true, true)
	srv.replyFired(w, r, name, e, outcome, err, "this event's id names a run of another payload")
}

// hookSecrets reads the values of the webhook's secrets (those the
// application no longer has are left out: the others may still verify).
func (srv *Server[TX]) hookSecrets(ctx context.Context, app string, h *workflow.Webhook) ([]string, error) {
	c := srv.caller(app)
	var out []string
	for _, name := range h.Secrets {
		v, err := c.Secret(ctx, name)
		switch {
		case errors.Is(err, workflow.ErrData):
			continue
		case err != nil:
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
