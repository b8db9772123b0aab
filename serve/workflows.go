package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/workflow"
)

// definitionReply is what PUT answers.
type definitionReply struct {
	Name     string             `json:"name"`
	Version  int                `json:"version"`
	Warnings []workflow.Problem `json:"warnings,omitempty"`
}

// putWorkflow checks a definition (JSON or YAML) and stores it as the
// application's workflow's next version: 201, or 200 when it is the latest
// version already. The connections its GATEWAYs name must exist.
func (srv *Server[TX]) putWorkflow(w http.ResponseWriter, r *http.Request) {
	srv.putDefinition(w, r, workflow.Kind, func(ctx context.Context, b []byte) ([]byte, []workflow.Problem, error) {
		opts, err := srv.definitionOptions(ctx)
		if err != nil {
			return nil, nil, err
		}
		opts.Connections = []string{}
		if def, err := workflow.Parse(b); err == nil {
			for _, name := range def.ConnectionNames() {
				_, err := srv.s.GetDefinition(ctx, store.DefinitionKey{App: appFrom(ctx), Kind: workflow.ConnectionKind, Name: name}, 0)
				switch {
				case err == nil:
					opts.Connections = append(opts.Connections, name)
				case !errors.Is(err, store.ErrNotFound):
					return nil, nil, err
				}
			}
		}
		_, body, warns, err := workflow.Load(b, opts)
		return body, warns, err
	})
}

// putConnection checks a connection (JSON or YAML) and stores it as the
// application's connection's next version, as putWorkflow does a
// workflow. Steps that name it use its latest version from then on.
func (srv *Server[TX]) putConnection(w http.ResponseWriter, r *http.Request) {
	srv.putDefinition(w, r, workflow.ConnectionKind, func(ctx context.Context, b []byte) ([]byte, []workflow.Problem, error) {
		opts, err := srv.definitionOptions(ctx)
		if err != nil {
			return nil, nil, err
		}
		_, body, err := workflow.LoadConnection(b, opts)
		return body, nil, err
	})
}

// putDefinition checks a definition of kind with load and stores its
// canonical form as the next version of the application's name: 201, or
// 200 when it is the latest version already; 422 definition-invalid with
// every problem.
func (srv *Server[TX]) putDefinition(w http.ResponseWriter, r *http.Request, kind string,
	load func(ctx context.Context, b []byte) ([]byte, []workflow.Problem, error)) {
	name, ok := srv.definitionName(w, r)
	if !ok {
		return
	}
	b, ok := srv.body(w, r)
	if !ok {
		return
	}
	body, warns, err := load(r.Context(), b)
	if inv, ok := errors.AsType[*workflow.InvalidError](err); ok {
		d := problem.Details{Type: srv.cfg.ProblemBase + problem.SlugDefinitionInvalid, Title: problem.Title(problem.SlugDefinitionInvalid),
			Status: http.StatusUnprocessableEntity, Detail: "the definition was not stored"}
		for _, p := range inv.Problems {
			d.Errors = append(d.Errors, problem.FieldError{Path: p.Path, Reason: p.Reason})
		}
		d.Write(w)
		return
	}
	if err != nil {
		srv.unavailable(w, r, err)
		return
	}
	k := store.DefinitionKey{App: appFrom(r.Context()), Kind: kind, Name: name}
	d, created, err := srv.s.PutDefinition(r.Context(), k, body, srv.cfg.Now())
	if err != nil {
		srv.unavailable(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	reply(w, status, definitionReply{Name: name, Version: d.Version, Warnings: warns})
}

func (srv *Server[TX]) getWorkflow(w http.ResponseWriter, r *http.Request) {
	srv.getDefinition(w, r, workflow.Kind)
}

func (srv *Server[TX]) getConnection(w http.ResponseWriter, r *http.Request) {
	srv.getDefinition(w, r, workflow.ConnectionKind)
}

// getDefinition answers a version of the application's definition of kind
// (the latest without ?version), with its name and version.
func (srv *Server[TX]) getDefinition(w http.ResponseWriter, r *http.Request, kind string) {
	name, ok := srv.definitionName(w, r)
	if !ok {
		return
	}
	version := 0
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "version: a positive whole number")
			return
		}
		version = n
	}
	d, err := srv.s.GetDefinition(r.Context(), store.DefinitionKey{App: appFrom(r.Context()), Kind: kind, Name: name}, version)
	if err != nil {
		srv.failed(w, r, err)
		return
	}
	var out map[string]any
	if err := json.Unmarshal(d.Body, &out); err != nil {
		srv.unavailable(w, r, err)
		return
	}
	out["name"], out["version"] = name, d.Version
	reply(w, http.StatusOK, out)
}

// definitionOptions are what the application's definitions are checked
// against: the names of its secrets (unchecked when Config.Secrets serves
// them from elsewhere).
func (srv *Server[TX]) definitionOptions(ctx context.Context) (*workflow.Options, error) {
	opts := &workflow.Options{}
	if srv.cfg.Secrets == nil {
		names, err := srv.s.SecretNames(ctx, appFrom(ctx))
		if err != nil {
			return nil, err
		}
		opts.Secrets = names
	}
	return opts, nil
}

// maxSecret bounds a secret's value.
const maxSecret = 8 << 10

// putSecret sets one of the application's secrets: 204, and the value is
// never shown back.
func (srv *Server[TX]) putSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !workflow.ValidSecretName(name) {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "name: 1 to 64 letters, digits and '_'")
		return
	}
	var req struct {
		Value *string `json:"value"`
	}
	if !srv.decode(w, r, &req) {
		return
	}
	if req.Value == nil || *req.Value == "" || len(*req.Value) > maxSecret || strings.ContainsAny(*req.Value, "\r\n") {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "value: 1 to 8 KiB, on one line (it goes into a header)")
		return
	}
	if err := srv.s.PutSecret(r.Context(), appFrom(r.Context()), name, []byte(*req.Value), srv.cfg.Now()); err != nil {
		srv.unavailable(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listSecrets answers the names of the application's secrets, never their
// values.
func (srv *Server[TX]) listSecrets(w http.ResponseWriter, r *http.Request) {
	names, err := srv.s.SecretNames(r.Context(), appFrom(r.Context()))
	if err != nil {
		srv.unavailable(w, r, err)
		return
	}
	type item struct {
		Name string `json:"name"`
	}
	out := struct {
		Items []item `json:"items"`
	}{Items: []item{}}
	for _, n := range names {
		out.Items = append(out.Items, item{n})
	}
	reply(w, http.StatusOK, out)
}

func (srv *Server[TX]) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := srv.s.DeleteSecret(r.Context(), appFrom(r.Context()), r.PathValue("name")); err != nil {
		srv.failed(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// definitionName reads the {name} of a definition's path.
func (srv *Server[TX]) definitionName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if !workflow.ValidName(name) {
		srv.problem(w, problem.SlugRequestInvalid, http.StatusBadRequest, "name: 1 to 63 lowercase letters, digits, '_' and '-'")
		return "", false
	}
	return name, true
}
