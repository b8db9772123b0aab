package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/idemhq/idem/keytemplate"
)

// Options are what Compile checks a definition against.
type Options struct {
	// Secrets are the names of the application's secrets. nil leaves
	// "{{ secrets.NAME }}" unchecked (a definition checked away from its
	// application); otherwise a name not in it is a problem.
	Secrets []string
	// Connections are the names of the application's connections, checked
	// as Secrets are.
	Connections []string
}

// Bounds of a GATEWAY's timeout and retry.
const (
	DefaultTimeout     = 30 * time.Second
	MaxTimeout         = 10 * time.Minute
	DefaultMaxAttempts = 5
	MaxMaxAttempts     = 50
	DefaultBackoff     = time.Second
)

// Workflow is a definition that Compile checked, with its expressions and
// key templates compiled, ready to run.
type Workflow struct {
	def   *Definition
	entry string
	steps map[string]*step
	out   map[string][]route
	// window and reuse are the ENTRY_POINT's idempotencyWindow and
	// reusePolicy.
	window   time.Duration
	reuse    Reuse
	schedule *Schedule
	webhook  *Webhook
	input    *jsonschema.Schema // the ENTRY_POINT's inputSchema
}

// Reuse is what a trigger whose identity named an execution that finished
// does, within the identity's window, in the vocabulary of Temporal's
// workflow id reuse policies.
type Reuse string

// The reuse policies.
const (
	// AllowDuplicate: any finished execution is followed by a new one.
	AllowDuplicate Reuse = "ALLOW_DUPLICATE"
	// AllowDuplicateFailedOnly (the default): a new execution follows one
	// that did not succeed (FAILED, CANCELED, TIMED_OUT); a trigger of one
	// that SUCCEEDED gets that one.
	AllowDuplicateFailedOnly Reuse = "ALLOW_DUPLICATE_FAILED_ONLY"
	// RejectDuplicate: every trigger within the window gets the execution
	// the identity named first, however it ended.
	RejectDuplicate Reuse = "REJECT_DUPLICATE"
)

// Bounds of an ENTRY_POINT's idempotencyWindow.
const (
	DefaultWindow = 24 * time.Hour
	MinWindow     = time.Minute
	MaxWindow     = 90 * 24 * time.Hour
)

// Window returns how long a trigger's identity names its execution: a
// trigger within it merges into that execution (or follows the reuse
// policy when it finished); after it, a trigger of the same identity
// starts a new one.
func (w *Workflow) Window() time.Duration { return w.window }

// Reuse returns the workflow's reuse policy.
func (w *Workflow) Reuse() Reuse { return w.reuse }

// Retry returns a GATEWAY's retry budget: its attempts and the wait
// before the first retry (doubled at each one); 1 and 0 for a vertex that
// is not a GATEWAY.
func (w *Workflow) Retry(vertex string) (maxAttempts int, backoff time.Duration) {
	if st, ok := w.steps[vertex]; ok && st.gateway != nil {
		return st.gateway.maxAttempts, st.gateway.backoff
	}
	return 1, 0
}

// Definition returns the definition w was compiled from.
func (w *Workflow) Definition() *Definition { return w.def }

// step is one compiled vertex.
type step struct {
	id, typ string
	fields  [][]string // ENTRY_POINT: idempotencyFields, split at dots
	gateway *gateway
	output  *value // TRANSFORM
}

// route is an edge out of a vertex.
type route struct {
	to   string
	cond *keytemplate.Expression // nil: always
}

// gateway is a GATEWAY's compiled config.
type gateway struct {
	method          string
	url             *value // a literal or an expression; nil with a connection
	connection      string
	path            *value
	headers         map[string]*value
	key             *keytemplate.Template // the Idempotency-Key header's
	body            *value
	clientErrorMode string // "fail" or "complete"
	onConflict      string // "done" or "retry"
	// modeSet and conflictSet: the step says so itself (else, on a
	// connection, the connection's hold).
	modeSet, conflictSet bool
	// base is the connection's base URL, once the gateway is bound to it
	// (on): requests then go to base + path.
	base        string
	timeout     time.Duration
	maxAttempts int
	backoff     time.Duration
	verify      *verify
}

// verify is a GATEWAY's re-read before each write attempt.
type verify struct {
	url     *value
	path    *value
	headers map[string]*value
	found   *keytemplate.Expression
}

// value is a JSON value whose strings may be expressions ("=...") or, in
// headers, literals with secrets.
type value struct {
	raw   json.RawMessage
	exprs map[string]*keytemplate.Expression // by JSON Pointer within raw
}

var (
	idPattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	fieldPattern  = regexp.MustCompile(`^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$`)
	secretPattern = regexp.MustCompile(`\{\{\s*secrets\.([A-Za-z0-9_]*)\s*\}\}`)
	methods       = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
)

// Load parses data (JSON or YAML), checks it against opts and returns it
// compiled, in canonical form (compact JSON, every object's keys sorted:
// one definition always gives the same bytes, however it was written, so
// storing it again is no new version) and with its warnings; or an
// *InvalidError (ErrInvalid) listing every problem.
func Load(data []byte, opts *Options) (*Workflow, []byte, []Problem, error) {
	def, err := Parse(data)
	if err != nil {
		return nil, nil, nil, err
	}
	w, warns, err := Compile(def, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := canonical(def)
	if err != nil {
		return nil, nil, nil, err
	}
	return w, b, warns, nil
}

// canonical is v as compact JSON with every object's keys sorted (and
// "&", "<", ">" as they are, so that what is read back is what was
// written).
func canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// Compile checks d against opts and returns it compiled, with its
// warnings; or an *InvalidError (ErrInvalid) listing every problem.
func Compile(d *Definition, opts *Options) (*Workflow, []Problem, error) {
	if d == nil {
		return nil, nil, &InvalidError{Problems: []Problem{{"", "no definition"}}}
	}
	c := compiler{opts: opts, w: &Workflow{def: d, steps: map[string]*step{}, out: map[string][]route{}, window: DefaultWindow, reuse: AllowDuplicateFailedOnly}}
	if c.opts == nil {
		c.opts = &Options{}
	}
	c.vertices()
	c.edges()
	if !c.broken {
		c.graph()
	}
	if err := c.probs.err(); err != nil {
		return nil, nil, err
	}
	return c.w, c.warns, nil
}

type compiler struct {
	opts  *Options
	w     *Workflow
	probs problems
	warns problems
	// broken: the graph itself is unsound (an id, the ENTRY_POINT, an
	// edge's end), so its paths cannot be checked.
	broken bool
}

func (c *compiler) vertices() {
	d := c.w.def
	if len(d.Vertices) == 0 {
		c.probs.add("/vertices", "a workflow needs vertices: an ENTRY_POINT, an END and what runs between")
		c.broken = true
		return
	}
	ends := 0
	for i, v := range d.Vertices {
		at := fmt.Sprintf("/vertices/%d", i)
		switch {
		case !idPattern.MatchString(v.ID):
			c.probs.add(at+"/id", "%q: an id is 1 to 63 lowercase letters, digits, '_' and '-', starting with a letter or digit", v.ID)
			c.broken = true
			continue
		case c.w.steps[v.ID] != nil:
			c.probs.add(at+"/id", "%q is the id of an earlier vertex too", v.ID)
			c.broken = true
			continue
		}
		st := &step{id: v.ID, typ: v.Type}
		c.w.steps[v.ID] = st
		cfg, ok := c.config(at, v.Config)
		if !ok {
			continue
		}
		switch v.Type {
		case EntryPoint:
			if c.w.entry != "" {
				c.probs.add(at+"/type", "a second ENTRY_POINT (the first is %q): a workflow has one", c.w.entry)
				continue
			}
			c.w.entry = v.ID
			c.entry(at, cfg, st)
		case Gateway:
			st.gateway = c.gateway(at, v.ID, cfg)
		case Transform:
			c.probs.unknown(at+"/config", cfg, "output")
			if raw, ok := cfg["output"]; ok {
				st.output = c.value(at+"/config/output", raw, false)
			} else {
				c.probs.add(at+"/config/output", "a TRANSFORM needs an output")
			}
		case End:
			ends++
			c.probs.unknown(at+"/config", cfg)
		default:
			c.probs.add(at+"/type", "unknown vertex type %q (expected %s)", v.Type, strings.Join([]string{EntryPoint, Gateway, Transform, End}, ", "))
		}
	}
	if c.w.entry == "" {
		c.probs.add("/vertices", "no ENTRY_POINT: a workflow has one, where its trigger's payload enters")
		c.broken = true
	}
	if ends == 0 {
		c.probs.add("/vertices", "no END: a run must have somewhere to finish")
	}
}

// config reads a vertex's config object (none is an empty one).
func (c *compiler) config(at string, raw json.RawMessage) (map[string]json.RawMessage, bool) {
	cfg := map[string]json.RawMessage{}
	if len(raw) == 0 || string(raw) == "null" {
		return cfg, true
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		c.probs.add(at+"/config", "must be an object")
		return nil, false
	}
	return cfg, true
}

func (c *compiler) entry(at string, cfg map[string]json.RawMessage, st *step) {
	c.probs.unknown(at+"/config", cfg, "idempotencyFields", "idempotencyWindow", "reusePolicy", "schedule", "webhook", "inputSchema")
	if raw, ok := cfg["inputSchema"]; ok {
		c.w.input = c.inputSchema(at+"/config/inputSchema", raw)
	}
	if raw, ok := cfg["webhook"]; ok {
		c.w.webhook = c.webhookConfig(at+"/config/webhook", raw)
	}
	if raw, ok := cfg["schedule"]; ok {
		c.w.schedule = c.schedule(at+"/config/schedule", raw)
	}
	if raw, ok := cfg["idempotencyWindow"]; ok {
		c.w.window = c.duration(at+"/config/idempotencyWindow", raw, MinWindow, MaxWindow)
	}
	var reuse string
	if c.probs.decode(at+"/config/reusePolicy", cfg["reusePolicy"], &reuse, "must be a string") && reuse != "" {
		switch r := Reuse(reuse); r {
		case AllowDuplicate, AllowDuplicateFailedOnly, RejectDuplicate:
			c.w.reuse = r
		default:
			c.probs.add(at+"/config/reusePolicy", "%q: %s (the default), %s or %s", reuse, AllowDuplicateFailedOnly, AllowDuplicate, RejectDuplicate)
		}
	}
	raw, ok := cfg["idempotencyFields"]
	if !ok {
		return
	}
	at += "/config/idempotencyFields"
	var one string
	var many []string
	switch {
	case json.Unmarshal(raw, &one) == nil:
		many = []string{one}
	case json.Unmarshal(raw, &many) == nil:
		if len(many) == 0 {
			c.probs.add(at, "an empty list: leave the field out to take the whole payload")
			return
		}
	default:
		c.probs.add(at, "a dotted path into the payload (\"order.id\") or a list of them")
		return
	}
	for i, f := range many {
		p := at
		if one == "" {
			p = fmt.Sprintf("%s/%d", at, i)
		}
		if !fieldPattern.MatchString(f) {
			c.probs.add(p, "%q is not a dotted path into the payload, such as \"order.id\"", f)
			continue
		}
		st.fields = append(st.fields, strings.Split(f, "."))
	}
	// Sorted, so that the order they are listed in does not change a
	// run's identity.
	slices.SortFunc(st.fields, func(a, b []string) int { return strings.Compare(strings.Join(a, "."), strings.Join(b, ".")) })
	st.fields = slices.CompactFunc(st.fields, func(a, b []string) bool { return slices.Equal(a, b) })
}

func (c *compiler) gateway(at, id string, cfg map[string]json.RawMessage) *gateway {
	c.probs.unknown(at+"/config", cfg, "method", "url", "connection", "path", "headers", "body", "clientErrorMode", "onConflict", "timeout", "retry", "verify")
	at += "/config"
	g := &gateway{clientErrorMode: "fail", onConflict: "done", timeout: DefaultTimeout, maxAttempts: DefaultMaxAttempts, backoff: DefaultBackoff}
	var method string
	if c.probs.decode(at+"/method", cfg["method"], &method, "must be a string") {
		g.method = strings.ToUpper(method)
		if !slices.Contains(methods, g.method) {
			c.probs.add(at+"/method", "%q: one of %s", method, strings.Join(methods, ", "))
		}
	}
	c.probs.decode(at+"/connection", cfg["connection"], &g.connection, "must be a string")
	if g.connection != "" && c.opts.Connections != nil && !slices.Contains(c.opts.Connections, g.connection) {
		c.probs.add(at+"/connection", "no connection %q in this application", g.connection)
	}
	g.url, g.path = c.where(at, cfg, g.connection, "a GATEWAY")
	g.headers, g.key = c.headers(at+"/headers", id, cfg["headers"], true)
	if raw, ok := cfg["body"]; ok {
		g.body = c.value(at+"/body", raw, false)
	}
	var mode string
	if c.probs.decode(at+"/clientErrorMode", cfg["clientErrorMode"], &mode, "must be a string") && mode != "" {
		if mode != "fail" && mode != "complete" {
			c.probs.add(at+"/clientErrorMode", "%q: fail (the default: a 4xx fails the step) or complete (the answer becomes data the next edge routes on)", mode)
		}
		g.clientErrorMode, g.modeSet = mode, true
	}
	var conflict string
	if c.probs.decode(at+"/onConflict", cfg["onConflict"], &conflict, "must be a string") && conflict != "" {
		if conflict != "done" && conflict != "retry" {
			c.probs.add(at+"/onConflict", "%q: done (the default: a 409 means the target has it) or retry", conflict)
		}
		g.onConflict, g.conflictSet = conflict, true
	}
	if raw, ok := cfg["timeout"]; ok {
		g.timeout = c.duration(at+"/timeout", raw, time.Second, MaxTimeout)
	}
	if raw, ok := cfg["retry"]; ok {
		var r map[string]json.RawMessage
		if c.probs.decode(at+"/retry", raw, &r, "must be an object: {\"maxAttempts\", \"backoff\"}") {
			c.probs.unknown(at+"/retry", r, "maxAttempts", "backoff")
			if c.probs.decode(at+"/retry/maxAttempts", r["maxAttempts"], &g.maxAttempts, "must be a whole number") &&
				(g.maxAttempts < 1 || g.maxAttempts > MaxMaxAttempts) {
				c.probs.add(at+"/retry/maxAttempts", "%d: 1 to %d", g.maxAttempts, MaxMaxAttempts)
			}
			if b, ok := r["backoff"]; ok {
				g.backoff = c.duration(at+"/retry/backoff", b, time.Millisecond, time.Hour)
			}
		}
	}
	if raw, ok := cfg["verify"]; ok {
		g.verify = c.verify(at+"/verify", id, g.connection, raw)
	}
	if (g.method == "POST" || g.method == "PATCH") && g.key == nil && g.verify == nil && g.connection == "" {
		c.warns.add(at+"/headers", "a %s without an Idempotency-Key and without verify: after a lost answer, a retry may make a second effect at the target", g.method)
	}
	return g
}

// where reads what a request goes to: on a connection, its path; else its
// url.
func (c *compiler) where(at string, cfg map[string]json.RawMessage, connection, what string) (u, path *value) {
	if connection != "" {
		if _, ok := cfg["url"]; ok {
			c.probs.add(at+"/url", "%s names a connection and a path, or a url, not both", what)
		}
		if raw, ok := cfg["path"]; ok {
			return nil, c.target(at+"/path", raw, true)
		}
		c.probs.add(at+"/path", "%s on a connection needs the path to call on it", what)
		return nil, nil
	}
	if _, ok := cfg["path"]; ok {
		c.probs.add(at+"/path", "a path is relative to a connection: name one, or give a url")
	}
	if raw, ok := cfg["url"]; ok {
		return c.target(at+"/url", raw, false), nil
	}
	c.probs.add(at+"/url", "%s needs a url (or a connection and a path)", what)
	return nil, nil
}

// target reads a url or a path: a literal or an expression.
func (c *compiler) target(at string, raw json.RawMessage, isPath bool) *value {
	var s string
	if !c.probs.decode(at, raw, &s, "must be a string") {
		return nil
	}
	if secretPattern.MatchString(s) {
		c.probs.add(at, "secrets go in headers only, never in a url (urls are logged and stored)")
		return nil
	}
	if isExpr(s) {
		return c.value(at, raw, false)
	}
	switch {
	case isPath:
		if !strings.HasPrefix(s, "/") {
			c.probs.add(at, "%q: a path starts with \"/\"", s)
		}
	default:
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			c.probs.add(at, "%q: an absolute http or https URL, or an expression (\"=...\")", s)
		}
	}
	return &value{raw: raw}
}

// headers reads a header map: literals (with secrets) and expressions; the
// Idempotency-Key header, when keyed, is a key template.
func (c *compiler) headers(at, id string, raw json.RawMessage, keyed bool) (map[string]*value, *keytemplate.Template) {
	if raw == nil {
		return nil, nil
	}
	var hs map[string]string
	if !c.probs.decode(at, raw, &hs, "must be an object of strings") {
		return nil, nil
	}
	names := make([]string, 0, len(hs))
	for name := range hs {
		names = append(names, name)
	}
	slices.Sort(names)
	out := map[string]*value{}
	var key *keytemplate.Template
	for _, name := range names {
		v, p := hs[name], at+"/"+pointerToken(name)
		if keyed && strings.EqualFold(name, "Idempotency-Key") {
			key = c.key(p, id, v)
			continue
		}
		out[name] = c.header(p, v)
	}
	return out, key
}

// header compiles one header's value: a literal whose secrets the
// application must have, or an expression (which cannot read them).
func (c *compiler) header(p, v string) *value {
	for _, m := range secretPattern.FindAllStringSubmatch(v, -1) {
		switch {
		case isExpr(v):
			c.probs.add(p, "an expression cannot read secrets: write the header as a literal with {{ secrets.%s }}", m[1])
		case m[1] == "":
			c.probs.add(p, "{{ secrets.NAME }} needs a name")
		case c.opts.Secrets != nil && !slices.Contains(c.opts.Secrets, m[1]):
			c.probs.add(p, "no secret %q in this application", m[1])
		}
	}
	j, _ := json.Marshal(v)
	return c.value(p, j, true)
}

// key compiles an Idempotency-Key header. Its operation comes from its
// leading literal ('charge-'), or else is the vertex id.
func (c *compiler) key(at, id, v string) *keytemplate.Template {
	if secretPattern.MatchString(v) {
		c.probs.add(at, "a key must not carry a secret: it is stored with the step and shown back")
		return nil
	}
	t, err := keytemplate.Parse("", v, nil)
	if errors.Is(err, keytemplate.ErrBadOperation) {
		if t, err = keytemplate.Parse(strings.ReplaceAll(id, "-", "_"), v, nil); errors.Is(err, keytemplate.ErrBadOperation) {
			err = fmt.Errorf("start the key with its operation, a literal such as 'charge-' (keys are operation-prefixed, so two operations on one order never share one): %w", err)
		}
	}
	if err != nil {
		c.probs.add(at, "%v", err)
		return nil
	}
	return t
}

// verify reads a GATEWAY's verify block: a GET (on the same connection,
// or to a url) and the condition that says the effect exists already.
func (c *compiler) verify(at, id, connection string, raw json.RawMessage) *verify {
	var cfg map[string]json.RawMessage
	if !c.probs.decode(at, raw, &cfg, "must be an object: {\"url\" or \"path\", \"headers\"?, \"found\"}") {
		return nil
	}
	c.probs.unknown(at, cfg, "url", "path", "headers", "found")
	v := &verify{}
	v.url, v.path = c.where(at, cfg, connection, "a verify read")
	v.headers, _ = c.headers(at+"/headers", id, cfg["headers"], false)
	var found string
	if c.probs.decode(at+"/found", cfg["found"], &found, "must be a string") {
		if !isExpr(found) {
			c.probs.add(at+"/found", "an expression (\"=...\") over the read's {\"response\": {\"status\", \"body\"}} that holds when the effect exists")
		} else if e, err := keytemplate.Compile(found, nil); err != nil {
			c.probs.add(at+"/found", "%v", err)
		} else {
			v.found = e
		}
	}
	return v
}

// value reads a JSON value and compiles the expressions among its strings.
// header says it is one header's value (a string, maybe with secrets).
func (c *compiler) value(at string, raw json.RawMessage, header bool) *value {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		c.probs.add(at, "not JSON")
		return nil
	}
	out := &value{raw: raw, exprs: map[string]*keytemplate.Expression{}}
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(p+"/"+pointerToken(k), x)
			}
		case []any:
			for i, x := range v {
				walk(fmt.Sprintf("%s/%d", p, i), x)
			}
		case string:
			if !header && secretPattern.MatchString(v) {
				c.probs.add(at+p, "secrets go in headers only (a body or an output is stored with the step)")
				return
			}
			if !isExpr(v) {
				return
			}
			e, err := keytemplate.Compile(v, nil)
			if err != nil {
				c.probs.add(at+p, "%v", err)
				return
			}
			out.exprs[p] = e
		}
	}
	walk("", v)
	return out
}

// duration reads a Go duration string ("30s") within [lo, hi].
func (c *compiler) duration(at string, raw json.RawMessage, lo, hi time.Duration) time.Duration {
	var s string
	if !c.probs.decode(at, raw, &s, "a duration such as \"30s\"") {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < lo || d > hi {
		c.probs.add(at, "%q: a duration from %v to %v", s, lo, hi)
	}
	return d
}

func (c *compiler) edges() {
	for i, e := range c.w.def.Edges {
		at := fmt.Sprintf("/edges/%d", i)
		from, to := c.w.steps[e.From], c.w.steps[e.To]
		c.broken = c.broken || from == nil || to == nil
		switch {
		case from == nil:
			c.probs.add(at+"/from", "no vertex %q", e.From)
		case from.typ == End:
			c.probs.add(at+"/from", "%q is an END: nothing leaves it", e.From)
		}
		switch {
		case to == nil:
			c.probs.add(at+"/to", "no vertex %q", e.To)
		case to.typ == EntryPoint:
			c.probs.add(at+"/to", "%q is the ENTRY_POINT: only a trigger enters it", e.To)
		}
		r := route{to: e.To}
		if e.Condition != "" {
			if !isExpr(e.Condition) {
				c.probs.add(at+"/condition", "an expression (\"=...\") over the step's input and outputs")
			} else if x, err := keytemplate.Compile(e.Condition, nil); err != nil {
				c.probs.add(at+"/condition", "%v", err)
			} else {
				r.cond = x
			}
		}
		if from != nil {
			if prev := c.w.out[e.From]; len(prev) > 0 && prev[len(prev)-1].cond == nil {
				c.warns.add(at, "never taken: an earlier edge from %q has no condition, and edges are tried in order", e.From)
			}
			c.w.out[e.From] = append(c.w.out[e.From], r)
		}
	}
}

// graph checks that every vertex is reached from the ENTRY_POINT and
// reaches an END.
func (c *compiler) graph() {
	reached := map[string]bool{}
	var visit func(id string)
	visit = func(id string) {
		if reached[id] {
			return
		}
		reached[id] = true
		for _, r := range c.w.out[id] {
			visit(r.to)
		}
	}
	visit(c.w.entry)
	finishes := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for id, st := range c.w.steps {
			if finishes[id] {
				continue
			}
			ok := st.typ == End
			for _, r := range c.w.out[id] {
				ok = ok || finishes[r.to]
			}
			if ok {
				finishes[id], changed = true, true
			}
		}
	}
	for i, v := range c.w.def.Vertices {
		at := fmt.Sprintf("/vertices/%d", i)
		if rs := c.w.out[v.ID]; len(rs) > 0 && !slices.ContainsFunc(rs, func(r route) bool { return r.cond == nil }) {
			c.warns.add(at, "every edge from %q has a condition: when none holds, the run fails there (add a last edge without one)", v.ID)
		}
		switch {
		case !reached[v.ID]:
			c.probs.add(at, "%q is not reached from the ENTRY_POINT", v.ID)
		case !finishes[v.ID] && len(c.w.out[v.ID]) == 0:
			c.probs.add(at, "%q leads nowhere: add an edge to what comes next, or to an END", v.ID)
		case !finishes[v.ID] && onCycle(c.w.out, v.ID):
			c.probs.add(at, "%q is on a cycle without exit: no edge from the cycle leads to an END", v.ID)
		case !finishes[v.ID]:
			c.probs.add(at, "%q reaches no END", v.ID)
		}
	}
}

// onCycle reports whether id can reach itself.
func onCycle(out map[string][]route, id string) bool {
	seen := map[string]bool{}
	var walk func(at string) bool
	walk = func(at string) bool {
		for _, r := range out[at] {
			if r.to == id {
				return true
			}
			if !seen[r.to] {
				seen[r.to] = true
				if walk(r.to) {
					return true
				}
			}
		}
		return false
	}
	return walk(id)
}

// isExpr says whether a configuration string is an expression.
func isExpr(s string) bool { return strings.HasPrefix(strings.TrimLeft(s, " \t\r\n"), "=") }
