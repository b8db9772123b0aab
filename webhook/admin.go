package webhook

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store"
)

// DeadLetterJSON is a dead letter as the admin API shows it.
type DeadLetterJSON struct {
	ID          int64  `json:"id"`
	Source      string `json:"source"`
	EventID     string `json:"event_id"`
	Subject     string `json:"subject"`
	Sequence    int64  `json:"sequence,omitempty"`
	Reason      string `json:"reason"`
	Attempts    int    `json:"attempts"`
	FirstFailed string `json:"first_failed"`
	LastFailed  string `json:"last_failed"`
	// Event is the stored CloudEvent (structured-mode JSON).
	Event json.RawMessage `json:"event"`
}

// AdminConfig configures Admin.
type AdminConfig struct {
	// ProblemBase prefixes problem type URIs, as Config.ProblemBase does
	// for the endpoint. Defaults to problem.DefaultBase.
	ProblemBase string
}

// DeadLetterPage is the answer of GET dead-letters.
type DeadLetterPage struct {
	DeadLetters []DeadLetterJSON `json:"dead_letters"`
	// Next is the `after` of the next page; 0 when this page was the last.
	Next int64 `json:"next,omitempty"`
}

// Admin returns the operator's API over a processor, to mount under a
// private prefix (it has no authentication of its own):
//
//	GET  dead-letters?after=ID&limit=N   a page of dead letters (limit 1..1000, default 100)
//	POST dead-letters/{id}/requeue       process the dead letter again; answers a Response
//	GET  gaps?limit=N                    recorded gaps, oldest first
//
// `idem inbox` talks to it. Requeue runs the service's own apply function,
// which is why it is served by the service and not by the command. A
// requeue refused because its stream's backlog is full answers 503
// stream-backlog-full; one the store could not take, 503
// store-unavailable. cfg may be nil (all defaults).
func Admin[TX any](p *inbox.Processor[TX], cfg *AdminConfig) http.Handler {
	base := problem.DefaultBase
	if cfg != nil && cfg.ProblemBase != "" {
		base = cfg.ProblemBase
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /dead-letters", func(w http.ResponseWriter, r *http.Request) {
		after, err1 := intParam(r, "after", 0)
		limit, err2 := intParam(r, "limit", 100)
		if err := errors.Join(err1, err2); err != nil || limit < 1 || limit > 1000 || after < 0 {
			problem.Write(w, base, problem.SlugBadParameter, http.StatusBadRequest, "after must be >= 0 and limit 1..1000")
			return
		}
		ds, err := p.DeadLetters(r.Context(), after, int(limit))
		if err != nil {
			w.Header().Set("Retry-After", "5")
			problem.Write(w, base, SlugStoreUnavailable, http.StatusServiceUnavailable, err.Error())
			return
		}
		page := DeadLetterPage{DeadLetters: make([]DeadLetterJSON, 0, len(ds))}
		for _, d := range ds {
			page.DeadLetters = append(page.DeadLetters, DeadLetterJSON{
				ID: d.ID, Source: d.Key.Source, EventID: d.Key.ID, Subject: d.Stream.Subject, Sequence: d.Sequence,
				Reason: d.Reason, Attempts: d.Attempts,
				FirstFailed: d.FirstFailed.UTC().Format(timeFormat), LastFailed: d.LastFailed.UTC().Format(timeFormat),
				Event: rawOrString(d.Event),
			})
		}
		if len(ds) == int(limit) {
			page.Next = ds[len(ds)-1].ID
		}
		writeJSON(w, http.StatusOK, page)
	})
	mux.HandleFunc("POST /dead-letters/{id}/requeue", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id < 1 {
			problem.Write(w, base, problem.SlugBadParameter, http.StatusBadRequest, "the dead letter id is a positive integer")
			return
		}
		res, err := p.Requeue(r.Context(), id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			problem.Write(w, base, problem.SlugDeadLetterNotFound, http.StatusNotFound, err.Error())
			return
		case errors.Is(err, inbox.ErrBackpressure):
			w.Header().Set("Retry-After", "5")
			problem.Write(w, base, SlugStreamBacklogFull, http.StatusServiceUnavailable, err.Error())
			return
		case errors.Is(err, inbox.ErrUnavailable):
			w.Header().Set("Retry-After", "5")
			problem.Write(w, base, SlugStoreUnavailable, http.StatusServiceUnavailable, err.Error())
			return
		case err != nil:
			problem.Write(w, base, SlugInternal, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, Response{Outcome: res.Outcome.String(), Applied: res.Applied, Gap: res.Gap,
			DeadLetters: res.DeadLetters, Reason: res.Reason})
	})
	mux.HandleFunc("GET /gaps", func(w http.ResponseWriter, r *http.Request) {
		limit, err := intParam(r, "limit", 100)
		if err != nil || limit < 1 || limit > 1000 {
			problem.Write(w, base, problem.SlugBadParameter, http.StatusBadRequest, "limit must be 1..1000")
			return
		}
		gs, err := p.Gaps(r.Context(), nil, int(limit))
		if err != nil {
			w.Header().Set("Retry-After", "5")
			problem.Write(w, base, SlugStoreUnavailable, http.StatusServiceUnavailable, err.Error())
			return
		}
		type gapJSON struct {
			Source    string `json:"source"`
			Subject   string `json:"subject"`
			From      int64  `json:"from"`
			To        int64  `json:"to"`
			Mode      string `json:"mode"`
			FirstSeen string `json:"first_seen"`
		}
		out := make([]gapJSON, 0, len(gs))
		for _, g := range gs {
			mode := "snapshot"
			if g.Delta {
				mode = "delta"
			}
			out = append(out, gapJSON{g.Stream.Source, g.Stream.Subject, g.From, g.To, mode, g.FirstSeen.UTC().Format(timeFormat)})
		}
		writeJSON(w, http.StatusOK, map[string]any{"gaps": out})
	})
	return mux
}

const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

func rawOrString(b []byte) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem.Write(w, problem.DefaultBase, SlugInternal, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
