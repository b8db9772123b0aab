package loadtest

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checks, the Check field of a Violation. G1, G2, ... are the
// guarantees of docs/guarantees.md.
const (
	// CheckDuplicateEffect: a scope (principal, key) has more than one
	// effect in the ledger (G1).
	CheckDuplicateEffect = "duplicate-effect"
	// CheckLostEffect: a scope was answered 2xx but the ledger has no
	// effect for it, or an answer names an effect the ledger lacks (G3).
	CheckLostEffect = "lost-effect"
	// CheckUnexpectedEffect: the ledger has an effect for a scope or body
	// that was never sent.
	CheckUnexpectedEffect = "unexpected-effect"
	// CheckReplayMismatch: a replay's status or body differs from the
	// first answer of its scope (G2).
	CheckReplayMismatch = "replay-mismatch"
	// CheckConflictAccepted: a request whose body differs from the body
	// that was executed for its scope was answered 2xx or replayed instead
	// of 422.
	CheckConflictAccepted = "conflict-accepted"
	// CheckCrossPrincipal: an answer carries an effect of another principal (G6).
	CheckCrossPrincipal = "cross-principal"
	// CheckCrossKey: an answer carries an effect of another key of the same
	// principal.
	CheckCrossKey = "cross-key"
	// CheckNonTerminal: a (scope, body)'s last answer was not terminal (G10).
	CheckNonTerminal = "non-terminal"
	// CheckLinearizability: a scope's history fits no sequential order of
	// the register model (see model.go).
	CheckLinearizability = "linearizability"
	// CheckRedelivered (only with CheckConfig.Proxied): the ledger behind
	// the target absorbed a repeated delivery for a scope none of whose
	// requests had an indeterminate outcome, so the target forwarded a
	// settled key again.
	CheckRedelivered = "redelivered"
	// CheckMalformed: the history itself is inconsistent (a completion
	// without its invoke, an op id used twice).
	CheckMalformed = "malformed-history"
)

// allChecks is the report's order.
var allChecks = []string{
	CheckDuplicateEffect, CheckLostEffect, CheckUnexpectedEffect, CheckReplayMismatch,
	CheckConflictAccepted, CheckCrossPrincipal, CheckCrossKey, CheckNonTerminal,
	CheckLinearizability, CheckRedelivered, CheckMalformed,
}

// CheckConfig configures Check and CheckRecords.
type CheckConfig struct {
	// History is the history file written by Run. Required by Check.
	History string
	// Effects is the ledger's log file or its URL (http://host:port gets
	// /effects appended). Required by Check.
	Effects string
	// AllowNonTerminal turns the non-terminal check off, for runs without a
	// drain. Defaults to false.
	AllowNonTerminal bool
	// Proxied says the ledger sits behind the target (a proxy) and dedups:
	// then each absorbed delivery is the target forwarding a key again,
	// which is allowed only after an indeterminate outcome (a request
	// timed out, cut, answered 5xx or 409 outcome-unknown); see
	// CheckRedelivered. Defaults to false.
	Proxied bool
	// LinTimeout bounds porcupine per scope; a scope that times out is
	// counted as unknown, not as a violation. Defaults to 10s.
	LinTimeout time.Duration
	// HTTPClient fetches Effects when it is a URL. Defaults to a client
	// with a 30s timeout.
	HTTPClient *http.Client
}

func (c *CheckConfig) withDefaults() CheckConfig {
	var out CheckConfig
	if c != nil {
		out = *c
	}
	if out.LinTimeout == 0 {
		out.LinTimeout = 10 * time.Second
	}
	return out
}

func (c *CheckConfig) validate() error {
	switch {
	case c.History == "":
		return errors.New("check: History is required")
	case c.Effects == "":
		return errors.New("check: Effects is required")
	case c.LinTimeout < 0:
		return errors.New("check: LinTimeout must not be negative")
	}
	return nil
}

// Violation is one broken invariant.
type Violation struct {
	// Check is one of the Check… constants.
	Check     string
	Principal string
	Key       string
	// Op is the operation involved, 0 if none in particular.
	Op     int64
	Detail string
}

func (v Violation) String() string {
	s := fmt.Sprintf("[%s] %s/%s", v.Check, v.Principal, v.Key)
	if v.Op != 0 {
		s += fmt.Sprintf(" op %d", v.Op)
	}
	return s + ": " + v.Detail
}

// CheckReport is the result of a check.
type CheckReport struct {
	// Operations counts operations by outcome: ok, fail, info, and open
	// (an invoke never completed).
	Operations map[string]int
	Scopes     int
	Effects    int
	// Absorbed counts deliveries a deduplicating ledger answered from an
	// earlier effect: how often a key reached the upstream more than once.
	Absorbed int
	// LinChecked and LinUnknown count scopes given to porcupine and scopes
	// where it timed out.
	LinChecked int
	LinUnknown int
	// Counts has the number of violations per check (every check present).
	Counts     map[string]int
	Violations []Violation
}

// OK reports whether no invariant was broken.
func (r *CheckReport) OK() bool { return len(r.Violations) == 0 }

// Has reports whether some violation is of the given check.
func (r *CheckReport) Has(check string) bool { return r.Counts[check] > 0 }

// WriteText prints the report, with at most maxViolations violations named.
func (r *CheckReport) WriteText(w io.Writer, maxViolations int) {
	o := r.Operations
	fmt.Fprintf(w, "history     %d ok, %d fail, %d info, %d open over %d scopes\n", o[TypeOK], o[TypeFail], o[TypeInfo], o["open"], r.Scopes)
	fmt.Fprintf(w, "ledger      %d effects, %d absorbed deliveries\n", r.Effects, r.Absorbed)
	fmt.Fprintf(w, "porcupine   %d scopes checked, %d unknown (timed out)\n", r.LinChecked, r.LinUnknown)
	for _, c := range allChecks {
		status := "ok"
		if n := r.Counts[c]; n > 0 {
			status = fmt.Sprintf("%d VIOLATIONS", n)
		}
		fmt.Fprintf(w, "  %-20s %s\n", c, status)
	}
	if r.OK() {
		fmt.Fprintln(w, "PASS")
		return
	}
	fmt.Fprintf(w, "FAIL: %d violations\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == maxViolations {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(w, "  %s\n", v)
	}
}

// Check reads the history and the ledger's effects and checks them (see
// CheckRecords). The error is for inputs that cannot be read; broken
// invariants are in the report.
func Check(ctx context.Context, cfg *CheckConfig) (*CheckReport, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	hist, err := ReadHistory(c.History)
	if err != nil {
		return nil, err
	}
	var effects []Effect
	if strings.HasPrefix(c.Effects, "http://") || strings.HasPrefix(c.Effects, "https://") {
		client := c.HTTPClient
		if client == nil {
			tr := &http.Transport{DisableCompression: true}
			defer tr.CloseIdleConnections()
			client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
		}
		effects, err = FetchEffects(ctx, client, c.Effects)
	} else {
		effects, err = ReadEffectsFile(c.Effects)
	}
	if err != nil {
		return nil, err
	}
	return CheckRecords(hist, effects, &c), nil
}

// ReadEffectsFile reads a ledger log (or a saved GET /effects): JSON lines,
// or one JSON array. A torn last line is ignored.
func ReadEffectsFile(path string) ([]Effect, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("effects: %w", err)
	}
	defer f.Close()
	effects, err := ReadEffects(f)
	if err != nil {
		return nil, fmt.Errorf("effects %s: %w", path, err)
	}
	return effects, nil
}

// ReadEffects reads JSON lines of Effect, or one JSON array of them.
func ReadEffects(r io.Reader) ([]Effect, error) {
	br := bufio.NewReader(r)
	for {
		b, err := br.Peek(1)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, err
		}
		if b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n' {
			_, _ = br.ReadByte()
			continue
		}
		if b[0] == '[' {
			var arr []Effect
			if err := json.NewDecoder(br).Decode(&arr); err != nil {
				return nil, err
			}
			return arr, nil
		}
		break
	}
	var effects []Effect
	err := readJSONLines(br, func(line []byte) error {
		var e Effect
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		effects = append(effects, e)
		return nil
	})
	return effects, err
}

// FetchEffects GETs the ledger's effects from rawURL; a URL without a path
// gets /effects.
func FetchEffects(ctx context.Context, client *http.Client, rawURL string) ([]Effect, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("effects: %w", err)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/effects"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("effects: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("effects: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("effects: GET %s: %s", u, resp.Status)
	}
	effects, err := ReadEffects(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("effects %s: %w", u, err)
	}
	return effects, nil
}

// operation is an invoke and its completion (nil while open).
type operation struct {
	inv  Record
	done *Record
}

// ret is the completion time for the model; +∞ for an operation whose
// outcome is unknown (it may take effect at any time after its call).
func (o *operation) ret() int64 {
	if classify(o.done) == kindUnknown {
		return math.MaxInt64
	}
	return o.done.T
}

// answered reports whether the op got a response (status and body).
func (o *operation) answered() bool { return o.done != nil && o.done.Type == TypeOK }

// indeterminate reports whether the target may have forwarded the request
// without the client learning the outcome.
func indeterminate(o *operation) bool {
	return classify(o.done) == kindUnknown ||
		(o.done.Status == 409 && slug(o.done.ProblemType) == "outcome-unknown")
}

func (o *operation) is2xx() bool {
	return o.answered() && o.done.Status >= 200 && o.done.Status < 300
}

type scope struct {
	principal, key string
	ops            []*operation
	effects        []Effect // kind effect only, in Seq order
	absorbed       int
}

// CheckRecords checks a history against the ledger's effects: every check
// listed with the Check… constants. cfg may be nil; History and Effects are
// not used.
func CheckRecords(history []Record, effects []Effect, cfg *CheckConfig) *CheckReport {
	c := cfg.withDefaults()
	rep := &CheckReport{Operations: map[string]int{}, Counts: map[string]int{}}
	add := func(v Violation) {
		rep.Violations = append(rep.Violations, v)
		rep.Counts[v.Check]++
	}

	// Pair invokes with completions, group by scope.
	byOp := map[int64]*operation{}
	scopes := map[[2]string]*scope{}
	var order [][2]string
	getScope := func(principal, key string) *scope {
		k := [2]string{principal, key}
		s := scopes[k]
		if s == nil {
			s = &scope{principal: principal, key: key}
			scopes[k] = s
			order = append(order, k)
		}
		return s
	}
	for i := range history {
		r := history[i]
		op := byOp[r.Op]
		switch {
		case r.Type == TypeInvoke && op != nil:
			add(Violation{Check: CheckMalformed, Principal: r.Principal, Key: r.Key, Op: r.Op, Detail: "op id invoked twice"})
		case r.Type == TypeInvoke:
			op = &operation{inv: r}
			byOp[r.Op] = op
			s := getScope(r.Principal, r.Key)
			s.ops = append(s.ops, op)
		case op == nil || op.done != nil:
			add(Violation{Check: CheckMalformed, Principal: r.Principal, Key: r.Key, Op: r.Op, Detail: r.Type + " without a pending invoke"})
		case r.Type == TypeOK || r.Type == TypeFail || r.Type == TypeInfo:
			op.done = &r
		default:
			add(Violation{Check: CheckMalformed, Principal: r.Principal, Key: r.Key, Op: r.Op, Detail: "unknown type " + r.Type})
		}
	}
	for _, op := range byOp {
		if op.done == nil {
			rep.Operations["open"]++
		} else {
			rep.Operations[op.done.Type]++
		}
	}

	// Effects by id and by scope.
	byID := map[string]Effect{}
	for _, e := range effects {
		s := scopes[[2]string{e.Principal, e.Key}]
		switch e.Kind {
		case KindAbsorbed:
			rep.Absorbed++
			if s != nil {
				s.absorbed++
			}
			continue
		case KindEffect, "":
		default:
			continue
		}
		rep.Effects++
		byID[e.ID] = e
		if s == nil {
			add(Violation{Check: CheckUnexpectedEffect, Principal: e.Principal, Key: e.Key,
				Detail: fmt.Sprintf("effect %s for a scope that was never sent", e.ID)})
			continue
		}
		s.effects = append(s.effects, e)
	}
	rep.Scopes = len(scopes)

	var lin []*scope
	for _, k := range order {
		s := scopes[k]
		checkScope(s, byID, &c, add)
		lin = append(lin, s)
	}
	for _, v := range checkLinearizable(lin, c.LinTimeout, rep) {
		add(v)
	}
	for _, ch := range allChecks {
		rep.Counts[ch] += 0
	}
	return rep
}

// checkScope runs every check but linearizability on one scope.
func checkScope(s *scope, byID map[string]Effect, c *CheckConfig, add func(Violation)) {
	v := func(check string, op int64, format string, args ...any) {
		add(Violation{Check: check, Principal: s.principal, Key: s.key, Op: op, Detail: fmt.Sprintf(format, args...)})
	}
	ops := slices.Clone(s.ops)
	slices.SortStableFunc(ops, func(a, b *operation) int { return cmp.Compare(a.ret(), b.ret()) })

	sent := map[string]bool{}
	for _, op := range ops {
		sent[op.inv.BodyHash] = true
	}

	// G1: at most one effect.
	if len(s.effects) > 1 {
		ids := make([]string, len(s.effects))
		for i, e := range s.effects {
			ids[i] = e.ID
		}
		v(CheckDuplicateEffect, 0, "%d effects: %s", len(s.effects), strings.Join(ids, ", "))
	}
	for _, e := range s.effects {
		if !sent[e.BodyHash] {
			v(CheckUnexpectedEffect, 0, "effect %s has body %s, never sent for this scope", e.ID, short(e.BodyHash))
		}
	}

	// The executed body: the effect's, else the first stored answer's.
	executed := ""
	if len(s.effects) > 0 {
		executed = s.effects[0].BodyHash
	} else {
		for _, op := range ops {
			if op.answered() && classify(op.done) == kindExec {
				executed = op.inv.BodyHash
				break
			}
		}
	}

	// Reference answer for replays: the first stored answer, else the
	// first replay.
	var ref *operation
	for _, op := range ops {
		if op.answered() && classify(op.done) == kindExec && op.inv.BodyHash == executed {
			ref = op
			break
		}
	}

	lostReported := false
	for _, op := range ops {
		if !op.answered() {
			continue
		}
		d := op.done
		// G3: answered 2xx, so exactly one effect.
		if op.is2xx() && len(s.effects) == 0 && !lostReported {
			v(CheckLostEffect, d.Op, "answered %d but the ledger has no effect for this scope", d.Status)
			lostReported = true
		}
		// G6: the answer's effect belongs to this scope.
		if d.Effect != "" {
			e, ok := byID[d.Effect]
			switch {
			case !ok:
				v(CheckLostEffect, d.Op, "answered with effect %s, which the ledger does not have", d.Effect)
			case e.Principal != s.principal:
				v(CheckCrossPrincipal, d.Op, "answered with effect %s of principal %q (key %q)", e.ID, e.Principal, e.Key)
			case e.Key != s.key:
				v(CheckCrossKey, d.Op, "answered with effect %s of key %q", e.ID, e.Key)
			}
		}
		// Other-body requests must be refused.
		if (op.is2xx() || d.Replayed) && executed != "" && op.inv.BodyHash != executed {
			how := "answered"
			if d.Replayed {
				how = "replayed"
			}
			v(CheckConflictAccepted, d.Op, "body %s differs from the executed body %s but was %s %d, not refused with 422",
				short(op.inv.BodyHash), short(executed), how, d.Status)
		}
		// G2: replays are byte-identical to the first answer.
		if d.Replayed && op.inv.BodyHash == executed {
			if ref == nil {
				ref = op
				continue
			}
			if d.Status != ref.done.Status || d.RespHash != ref.done.RespHash {
				v(CheckReplayMismatch, d.Op, "replay %d %s differs from the first answer (op %d) %d %s",
					d.Status, short(d.RespHash), ref.done.Op, ref.done.Status, short(ref.done.RespHash))
			}
		}
	}

	// A proxy forwards a key again only when an outcome was unknown.
	if c.Proxied && s.absorbed > 0 && !slices.ContainsFunc(ops, indeterminate) {
		v(CheckRedelivered, 0, "the ledger absorbed %d repeated deliveries, but no request had an indeterminate outcome", s.absorbed)
	}

	// G10: each (scope, body)'s last answer is terminal.
	if !c.AllowNonTerminal {
		// The last by the time the client saw the outcome (an info op
		// ended, for the client, when it gave up); an open op is last.
		seen := func(o *operation) int64 {
			if o.done == nil {
				return math.MaxInt64
			}
			return o.done.T
		}
		bySeen := slices.Clone(ops)
		slices.SortStableFunc(bySeen, func(a, b *operation) int { return cmp.Compare(seen(a), seen(b)) })
		last := map[string]*operation{}
		for _, op := range bySeen {
			last[op.inv.BodyHash] = op
		}
		bodies := make([]string, 0, len(last))
		for b := range last {
			bodies = append(bodies, b)
		}
		slices.Sort(bodies)
		for _, b := range bodies {
			op := last[b]
			switch {
			case op.done == nil:
				v(CheckNonTerminal, op.inv.Op, "body %s: last request never completed", short(b))
			case op.done.Type != TypeOK:
				v(CheckNonTerminal, op.inv.Op, "body %s: last request ended %s (%s)", short(b), op.done.Type, op.done.Error)
			case !Terminal(op.done.Status, op.done.ProblemType):
				v(CheckNonTerminal, op.inv.Op, "body %s: last answer %d %s", short(b), op.done.Status, slug(op.done.ProblemType))
			}
		}
	}
}

// checkLinearizable runs porcupine on every scope, in parallel.
func checkLinearizable(scopes []*scope, timeout time.Duration, rep *CheckReport) []Violation {
	type result struct {
		res porcupine.CheckResult
		n   int
	}
	results := make([]result, len(scopes))
	model := registerModel()
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				next.Lock()
				j := i
				i++
				next.Unlock()
				if j >= len(scopes) {
					return
				}
				ops := linOps(scopes[j])
				results[j] = result{res: porcupine.Ok, n: len(ops)}
				if len(ops) > 0 {
					results[j].res = porcupine.CheckOperationsTimeout(model, ops, timeout)
				}
			}
		})
	}
	wg.Wait()
	var out []Violation
	for j, r := range results {
		if r.n == 0 {
			continue
		}
		rep.LinChecked++
		switch r.res {
		case porcupine.Unknown:
			rep.LinUnknown++
		case porcupine.Illegal:
			s := scopes[j]
			out = append(out, Violation{Check: CheckLinearizability, Principal: s.principal, Key: s.key,
				Detail: "no sequential order explains: " + describeOps(s.ops)})
		}
	}
	return out
}

// linOps turns a scope's operations into porcupine's, leaving out fails.
func linOps(s *scope) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, op := range s.ops {
		if op.done != nil && op.done.Type == TypeFail {
			continue
		}
		out := linOutput{kind: classify(op.done)}
		if out.kind != kindUnknown {
			out.status, out.resp = op.done.Status, op.done.RespHash
		}
		ops = append(ops, porcupine.Operation{
			ClientId: op.inv.Client,
			Input:    linInput{body: op.inv.BodyHash},
			Call:     op.inv.T,
			Output:   out,
			Return:   op.ret(),
		})
	}
	return ops
}

// describeOps lists up to eight operations by call time.
func describeOps(ops []*operation) string {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b *operation) int { return cmp.Compare(a.inv.T, b.inv.T) })
	var parts []string
	for i, op := range ops {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("... %d more", len(ops)-i))
			break
		}
		if op.done != nil && op.done.Type == TypeFail {
			continue
		}
		k := classify(op.done)
		end, status := "∞", ""
		if k != kindUnknown {
			end = fmt.Sprint(op.done.T)
		}
		if op.done != nil && op.done.Status != 0 {
			status = fmt.Sprintf(" %d", op.done.Status)
		}
		parts = append(parts, fmt.Sprintf("op %d [%d,%s] %s body=%s%s", op.inv.Op, op.inv.T, end, k, short(op.inv.BodyHash), status))
	}
	return strings.Join(parts, "; ")
}
