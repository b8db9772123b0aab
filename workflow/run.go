package workflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Errors of a step's run, matched with errors.Is. A runner retries the
// transient ones (within the vertex's retry budget, with the same key) and
// fails the step on the others.
var (
	// ErrTransient: the target did not answer, or answered 408, 429 or
	// 5xx (or 409 with onConflict: retry). Retry with the same key.
	ErrTransient = errors.New("workflow: transient failure")
	// ErrRejected: the target refused the request for good (a 4xx, with
	// clientErrorMode: fail). No retry changes that.
	ErrRejected = errors.New("workflow: rejected")
	// ErrData: the run's data does not fit the definition (an expression
	// is undefined, a secret is missing, a url is not one). No retry
	// changes that either.
	ErrData = errors.New("workflow: the run's data does not fit")
)

// CallError is the error of a transient failure: the wait the target asked
// for, when it did (Retry-After).
type CallError struct {
	Err error
	// RetryAfter is the target's Retry-After, or 0.
	RetryAfter time.Duration
}

func (e *CallError) Error() string { return e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// Input is a step's input: {"payload": the trigger's payload, "steps":
// {vertex id: its output}}, what expressions, conditions and key
// templates read. outputs holds the output of each vertex that completed
// (the latest, for one that ran more than once).
func Input(payload json.RawMessage, outputs map[string]json.RawMessage) ([]byte, error) {
	if len(payload) == 0 {
		payload = json.RawMessage(`null`)
	}
	steps := make(map[string]json.RawMessage, len(outputs))
	for id, out := range outputs {
		if len(out) == 0 {
			out = json.RawMessage(`null`)
		}
		steps[id] = out
	}
	return json.Marshal(map[string]any{"payload": payload, "steps": steps})
}

// Next is where a run goes from a vertex.
type Next struct {
	// End: the run reached an END; nothing runs after.
	End bool
	// Vertex is the vertex to run next, and Key the Idempotency-Key every
	// attempt of it sends ("" when it sends none), computed once, now.
	Vertex, Key string
	// Once: the vertex must not run twice without an operator (a write
	// that sends no key and verifies nothing).
	Once bool
}

// Next returns where a run at vertex from (the ENTRY_POINT, or one that
// completed) goes, given the input its step built (Input): the first edge
// whose condition holds (Route), and the key of the vertex it reaches
// (from its connection's template when it names one and has none of its
// own).
func (w *Workflow) Next(ctx context.Context, from string, input []byte, c *Caller) (Next, error) {
	to, err := w.Route(from, input)
	if err != nil {
		return Next{}, err
	}
	st := w.steps[to]
	if st.typ == End {
		return Next{End: true, Vertex: to}, nil
	}
	n := Next{Vertex: to}
	if g := st.gateway; g != nil {
		if g, err = g.bound(ctx, to, c); err != nil {
			return Next{}, err
		}
		if g.key != nil {
			if n.Key, err = g.key.Key(input); err != nil {
				return Next{}, fmt.Errorf("%w: the Idempotency-Key of %q: %w", ErrData, to, err)
			}
		}
		n.Once = g.key == nil && g.verify == nil && (g.method == "POST" || g.method == "PATCH")
	}
	return n, nil
}

// Caller is what a GATEWAY's run needs from its runner.
type Caller struct {
	// Client sends the requests. Defaults to a client without a timeout
	// of its own (each request has its vertex's).
	Client *http.Client
	// Secret returns the application's secret of that name.
	Secret func(ctx context.Context, name string) (string, error)
	// Allowed, when set, says whether a request may go to the URL.
	Allowed func(u *url.URL) bool
	// Connection returns the application's connection of that name, for
	// the GATEWAYs that name one.
	Connection func(ctx context.Context, name string) (*Connection, error)
}

// maxBody bounds what a step keeps of a response body.
const maxBody = 256 << 10

// Run runs vertex's step with input (Input) and key (Next's), and returns
// its output. A GATEWAY with a verify block reads first, and when the
// effect is there already, is done with that read as its output, without
// writing again; else it sends its request and applies its response
// policy: 2xx is done; 409 is done (onConflict: done) or transient; 408,
// 429 and 5xx are transient (CallError with the Retry-After); other 4xx
// are ErrRejected, or with clientErrorMode: complete, done with the
// answer as data. A TRANSFORM computes its output. The output is
// {"status", "body"} for a request ("verified": true when the read found
// the effect).
func (w *Workflow) Run(ctx context.Context, vertex string, input []byte, key string, c *Caller) (json.RawMessage, error) {
	st, ok := w.steps[vertex]
	if !ok {
		return nil, fmt.Errorf("%w: no vertex %q in this version", ErrData, vertex)
	}
	switch st.typ {
	case Transform:
		return st.output.eval(input)
	case Gateway:
		g, err := st.gateway.bound(ctx, vertex, c)
		if err != nil {
			return nil, err
		}
		return g.run(ctx, vertex, input, key, c)
	}
	return nil, fmt.Errorf("%w: %q is a %s, which runs no step", ErrData, vertex, st.typ)
}

func (g *gateway) run(ctx context.Context, vertex string, input []byte, key string, c *Caller) (json.RawMessage, error) {
	if c == nil {
		c = &Caller{}
	}
	if v := g.verify; v != nil {
		status, body, _, err := g.send(ctx, c, http.MethodGet, g.target(v.url, v.path), v.headers, nil, "", input)
		if err != nil {
			return nil, fmt.Errorf("the verify read of %q: %w", vertex, err)
		}
		read := response(status, body)
		found, err := v.found.Eval(mustJSON(map[string]json.RawMessage{"response": read}))
		if err != nil {
			return nil, fmt.Errorf("%w: verify.found of %q: %w", ErrData, vertex, err)
		}
		if string(found) == "true" {
			return mustJSON(map[string]any{"status": status, "body": json.RawMessage(body), "verified": true}), nil
		}
	}
	status, body, after, err := g.send(ctx, c, g.method, g.target(g.url, g.path), g.headers, g.body, key, input)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", vertex, err)
	}
	out := response(status, body)
	switch {
	case status >= 200 && status < 300:
		return out, nil
	case status == http.StatusConflict && g.onConflict == "done":
		return out, nil
	case status == http.StatusConflict, status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500:
		return nil, &CallError{Err: fmt.Errorf("%w: %q answered %d", ErrTransient, vertex, status), RetryAfter: after}
	case status >= 400 && g.clientErrorMode == "complete":
		return out, nil
	}
	return nil, fmt.Errorf("%w: %q answered %d: %s", ErrRejected, vertex, status, truncate(body, 200))
}

// where is what a request goes to: a url, or a path on a connection's
// base URL.
type where struct {
	base string
	at   *value
}

// target is where a request of g goes: url, or path on g's connection.
func (g *gateway) target(u, path *value) where {
	if g.base != "" {
		return where{base: g.base, at: path}
	}
	return where{at: u}
}

// send makes one request: the url (a literal or an expression, or a path
// on a connection), the headers (literals with secrets, or expressions),
// the key and the body, all from input. It returns the status, the body
// as JSON (a string when the target's is not JSON) and the Retry-After.
func (g *gateway) send(ctx context.Context, c *Caller, method string, target where, headers map[string]*value, body *value, key string, input []byte) (int, []byte, time.Duration, error) {
	raw, err := target.at.eval(input)
	if err != nil {
		return 0, nil, 0, err
	}
	var to string
	if json.Unmarshal(raw, &to) != nil {
		return 0, nil, 0, fmt.Errorf("%w: the url is %s, not a string", ErrData, raw)
	}
	if target.base != "" {
		if !strings.HasPrefix(to, "/") {
			return 0, nil, 0, fmt.Errorf("%w: the path %q does not start with \"/\"", ErrData, to)
		}
		to = target.base + to
	}
	u, err := url.Parse(to)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, nil, 0, fmt.Errorf("%w: %q is not an absolute http or https URL", ErrData, to)
	}
	if c.Allowed != nil && !c.Allowed(u) {
		return 0, nil, 0, fmt.Errorf("%w: %s is not among the hosts this service may call", ErrRejected, u.Host)
	}
	var rd io.Reader
	if body != nil {
		b, err := body.eval(input)
		if err != nil {
			return 0, nil, 0, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%w: %w", ErrData, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for name, v := range headers {
		s, err := v.header(ctx, input, c)
		if err != nil {
			return 0, nil, 0, fmt.Errorf("the header %s: %w", name, err)
		}
		req.Header.Set(name, s)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		// No answer: the request may or may not have had its effect; the
		// retry sends the same key (or verifies first).
		return 0, nil, 0, &CallError{Err: fmt.Errorf("%w: no answer: %w", ErrTransient, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return 0, nil, 0, &CallError{Err: fmt.Errorf("%w: the answer broke off: %w", ErrTransient, err)}
	}
	if len(b) > maxBody {
		b = b[:maxBody]
	}
	return resp.StatusCode, asJSON(b), retryAfter(resp.Header.Get("Retry-After")), nil
}

// response is a request's result as steps and conditions read it.
func response(status int, body []byte) json.RawMessage {
	return mustJSON(map[string]any{"status": status, "body": json.RawMessage(body)})
}

// asJSON is a response body as JSON: itself when it is JSON, else a
// string of it (null when empty).
func asJSON(b []byte) []byte {
	switch t := bytes.TrimSpace(b); {
	case len(t) == 0:
		return []byte(`null`)
	case json.Valid(t):
		return t
	}
	return mustJSON(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// retryAfter reads a Retry-After in seconds (a date is ignored: clocks
// differ), capped at an hour.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, time.Hour)
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of JSON values and numbers
	}
	return b
}

// eval computes v over input: its expressions replaced by their results.
// An expression that is undefined for this input leaves its object member
// out; one that is the whole value, an array element or a url is an error.
func (v *value) eval(input []byte) (json.RawMessage, error) {
	if v == nil {
		return nil, fmt.Errorf("%w: no value", ErrData)
	}
	if len(v.exprs) == 0 {
		return v.raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(v.raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrData, err)
	}
	var walk func(p string, x any) (any, bool, error)
	walk = func(p string, x any) (any, bool, error) {
		switch x := x.(type) {
		case map[string]any:
			for k, el := range x {
				got, ok, err := walk(p+"/"+pointerToken(k), el)
				if err != nil {
					return nil, false, err
				}
				if ok {
					x[k] = got
				} else {
					delete(x, k)
				}
			}
		case []any:
			for i, el := range x {
				got, ok, err := walk(fmt.Sprintf("%s/%d", p, i), el)
				if err != nil {
					return nil, false, err
				}
				if !ok {
					return nil, false, fmt.Errorf("%w: %s is undefined for this run's data", ErrData, v.exprs[fmt.Sprintf("%s/%d", p, i)])
				}
				x[i] = got
			}
		case string:
			e, ok := v.exprs[p]
			if !ok {
				return x, true, nil
			}
			got, err := e.Eval(input)
			if err != nil {
				return nil, false, fmt.Errorf("%w: %s: %w", ErrData, e, err)
			}
			if got == nil {
				return nil, false, nil
			}
			return got, true, nil
		}
		return x, true, nil
	}
	out, ok, err := walk("", tree)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s is undefined for this run's data", ErrData, v.exprs[""])
	}
	return mustJSON(out), nil
}

// header computes a header's value: an expression's result (a string or
// a number), or a literal with its secrets filled in.
func (v *value) header(ctx context.Context, input []byte, c *Caller) (string, error) {
	raw, err := v.eval(input)
	if err != nil {
		return "", err
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return "", fmt.Errorf("%w: %s is not a string or a number", ErrData, raw)
		}
		s = n.String()
	}
	if len(v.exprs) > 0 {
		return s, nil
	}
	var failed error
	s = secretPattern.ReplaceAllStringFunc(s, func(m string) string {
		name := secretPattern.FindStringSubmatch(m)[1]
		if c.Secret == nil {
			failed = fmt.Errorf("%w: no secret %q: this service keeps no secrets", ErrData, name)
			return ""
		}
		val, err := c.Secret(ctx, name)
		if err != nil && failed == nil {
			failed = fmt.Errorf("%w: the secret %q: %w", ErrData, name, err)
		}
		return val
	})
	if failed != nil {
		return "", failed
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("%w: a header value with a line break", ErrData)
	}
	return s, nil
}
