package loadtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RunConfig configures Run. Targets and History are required.
type RunConfig struct {
	// Targets are the URLs requests are POSTed to, e.g.
	// http://127.0.0.1:8081/charge; with several (one per proxy process)
	// operation n goes to Targets[n mod len], so the duplicates of a key,
	// and each retry, reach different processes. They should differ only in
	// host and port: a fingerprint covers the path. At least one is required.
	Targets []string
	// Keys is the number of scopes (principal, key) driven. Scope i belongs
	// to principal i mod Principals and uses key string i / Principals, so
	// each key string is sent by up to Principals principals with the same
	// body: a target that ignores the principal replays one principal's
	// answer to another, which the checker sees. Defaults to 100.
	Keys int
	// Dups is the number of requests per scope, sent close together so that
	// they race. Defaults to 3.
	Dups int
	// Clients is the number of concurrent clients, each with at most one
	// request in flight. Defaults to 8.
	Clients int
	// ConflictShare is the share of requests that carry another body for
	// their key (variant "b"); whichever body is executed first, requests
	// with the other must get 422. Within [0, 1]. Defaults to 0.
	ConflictShare float64
	// Principals is the number of principals, p0 … p(N-1). Defaults to 2.
	Principals int
	// PrincipalHeader is the header that carries the principal: for
	// Authorization the value is "Bearer pN", for any other header "pN".
	// Defaults to "Authorization".
	PrincipalHeader string
	// History is the file the history is written to (truncated first).
	// Required.
	History string
	// RetryUntilTerminal adds a drain after the main phase: every (scope,
	// body) whose last answer was not terminal (see Terminal; transport
	// errors included) is retried until terminal or DrainTimeout.
	// Defaults to false.
	RetryUntilTerminal bool
	// RetryFor makes each main-phase client behave like a real one: a
	// request whose answer is not terminal (see Terminal; transport errors
	// included) is sent again at once with the same key, waiting between
	// attempts as the drain does, until it is terminal or RetryFor has
	// passed since its first send; only then does the client take its next
	// request. What is still not terminal is left to the drain. Every
	// attempt is a main-phase operation. Defaults to 0: one send each.
	RetryFor time.Duration
	// Duration paces the main phase: request n is not sent before
	// start + n*Duration/(Keys*Dups), so the run lasts about Duration (for
	// chaos runs in which processes are killed meanwhile). Defaults to 0:
	// as fast as the clients go.
	Duration time.Duration
	// RequestTimeout bounds each request, from dial to the last body byte;
	// a timeout after sending is recorded as info. Defaults to 10s.
	RequestTimeout time.Duration
	// DrainTimeout bounds the drain. It must exceed the target's lease if
	// processes are killed, since an outcome-unknown key resolves only when
	// its lease ends. Defaults to 60s.
	DrainTimeout time.Duration
	// MaxRetryAfter caps the wait between retries, in the drain and with
	// RetryFor (Retry-After is honoured up to it). Defaults to 1s.
	MaxRetryAfter time.Duration
	// MaxResponseBody is the most response bytes read per request; beyond
	// it the body is hashed as cut and the record says truncated. Nothing
	// beyond 64 KiB is ever held in memory. Defaults to 1 MiB.
	MaxResponseBody int64
	// BodyPad adds this many bytes of padding to every request body (to
	// test body limits). Defaults to 0.
	BodyPad int
	// KeyPrefix starts every key, so that runs against one store never
	// share keys. Defaults to a random 8-hex-digit string.
	KeyPrefix string
	// Seed drives the choice of conflicting requests and the order of
	// sending. Defaults to 1.
	Seed uint64
	// Logger receives progress messages. Defaults to silence.
	Logger *slog.Logger
}

func (c *RunConfig) withDefaults() RunConfig {
	var out RunConfig
	if c != nil {
		out = *c
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&out.Keys, 100)
	def(&out.Dups, 3)
	def(&out.Clients, 8)
	def(&out.Principals, 2)
	if out.PrincipalHeader == "" {
		out.PrincipalHeader = "Authorization"
	}
	if out.RequestTimeout == 0 {
		out.RequestTimeout = 10 * time.Second
	}
	if out.DrainTimeout == 0 {
		out.DrainTimeout = 60 * time.Second
	}
	if out.MaxRetryAfter == 0 {
		out.MaxRetryAfter = time.Second
	}
	if out.MaxResponseBody == 0 {
		out.MaxResponseBody = 1 << 20
	}
	if out.KeyPrefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		out.KeyPrefix = hex.EncodeToString(b[:])
	}
	if out.Seed == 0 {
		out.Seed = 1
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

func (c *RunConfig) validate() error {
	if len(c.Targets) == 0 {
		return errors.New("run: Targets is required")
	}
	for _, t := range c.Targets {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("run: target %q is not an http(s) URL", t)
		}
	}
	switch {
	case c.History == "":
		return errors.New("run: History is required")
	case c.Keys < 1:
		return errors.New("run: Keys must be at least 1")
	case c.Dups < 1:
		return errors.New("run: Dups must be at least 1")
	case c.Clients < 1:
		return errors.New("run: Clients must be at least 1")
	case c.Principals < 1:
		return errors.New("run: Principals must be at least 1")
	case c.ConflictShare < 0 || c.ConflictShare > 1:
		return fmt.Errorf("run: ConflictShare %v must be within [0, 1]", c.ConflictShare)
	case c.Duration < 0:
		return errors.New("run: Duration must not be negative")
	case c.RequestTimeout < 0, c.DrainTimeout < 0, c.MaxRetryAfter < 0, c.RetryFor < 0:
		return errors.New("run: timeouts must not be negative")
	case c.MaxResponseBody < 0, c.BodyPad < 0:
		return errors.New("run: MaxResponseBody and BodyPad must not be negative")
	case strings.ContainsFunc(c.KeyPrefix, func(r rune) bool { return r < 0x21 || r > 0x7e }):
		return fmt.Errorf("run: KeyPrefix %q must be printable ASCII without spaces", c.KeyPrefix)
	case len(c.KeyPrefix) > 200:
		return errors.New("run: KeyPrefix is too long")
	}
	return nil
}

// Latencies are percentiles of request latency (invoke to completion).
type Latencies struct {
	P50, P90, P99, Max time.Duration
}

// RunReport sums up a run.
type RunReport struct {
	// Requests counts main-phase operations, retries included; Elapsed is
	// the main phase's duration and Throughput Requests per second over it.
	Requests int
	// Retries counts the main-phase operations that were retries
	// (RetryFor).
	Retries    int
	Elapsed    time.Duration
	Throughput float64
	Latency    Latencies
	// Outcomes counts main-phase operations by outcome: "fail", "info",
	// "replayed", and status codes ("201", "409", "422", ...) for the rest.
	Outcomes map[string]int
	// DrainPending is the number of (scope, body) pairs not terminal after
	// the main phase; DrainRequests the operations the drain sent;
	// DrainUnresolved the pairs still not terminal at its end.
	DrainPending    int
	DrainRequests   int
	DrainUnresolved int
	DrainElapsed    time.Duration
}

// WriteText prints the report for people.
func (r *RunReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "requests    %d in %v: %.0f req/s\n", r.Requests, r.Elapsed.Round(time.Millisecond), r.Throughput)
	fmt.Fprintf(w, "latency     p50 %v  p90 %v  p99 %v  max %v\n", r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max)
	names := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%d", k, r.Outcomes[k])
	}
	fmt.Fprintf(w, "outcomes   %s\n", b.String())
	if r.Retries > 0 {
		fmt.Fprintf(w, "retries     %d of the requests were retries in the main phase\n", r.Retries)
	}
	if r.DrainPending > 0 || r.DrainRequests > 0 {
		fmt.Fprintf(w, "drain       %d pending, %d requests, %d unresolved, %v\n",
			r.DrainPending, r.DrainRequests, r.DrainUnresolved, r.DrainElapsed.Round(time.Millisecond))
	}
}

// slot is one request to send.
type slot struct {
	logical int // index into runner.logical
}

// logical is a (scope, body) pair: what a client means to do, possibly sent
// several times.
type logical struct {
	key, principal, header string
	body                   []byte
	bodyHash               string
}

type lastAnswer struct {
	t        int64
	terminal bool
	seen     bool
}

type runner struct {
	cfg     RunConfig
	start   time.Time
	client  *http.Client
	hist    *historyWriter
	opSeq   atomic.Int64
	logical []logical

	mu   sync.Mutex
	last []lastAnswer // by logical index
}

// Run drives cfg.Targets as RunConfig describes, writes the history, and
// returns the report. Failed requests are data, not errors: Run returns an
// error only if it cannot start or write the history, or ctx ends (then
// with the partial report).
func Run(ctx context.Context, cfg *RunConfig) (*RunReport, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	hist, err := newHistoryWriter(c.History)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * c.Clients,
		MaxIdleConnsPerHost: 2 * c.Clients,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	r := &runner{cfg: c, client: &http.Client{Transport: tr, CheckRedirect: noRedirect}, hist: hist}
	slots := r.plan()
	r.last = make([]lastAnswer, len(r.logical))
	r.start = time.Now()

	rep := &RunReport{Outcomes: make(map[string]int)}
	lat := r.mainPhase(ctx, slots, rep)
	rep.Elapsed = time.Since(r.start)
	rep.Requests = len(lat)
	if rep.Elapsed > 0 {
		rep.Throughput = float64(rep.Requests) / rep.Elapsed.Seconds()
	}
	rep.Latency = percentiles(lat)
	if c.RetryUntilTerminal && ctx.Err() == nil {
		r.drain(ctx, rep)
	}
	if err := hist.close(); err != nil {
		return rep, err
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("run interrupted: %w", err)
	}
	return rep, nil
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// plan builds the logical requests and the sending order: the Dups requests
// of a scope, and the scopes sharing a key string, are neighbours, then
// shuffled within windows of 2×Clients so that duplicates race.
func (r *runner) plan() []slot {
	c := r.cfg
	rng := mrand.New(mrand.NewPCG(c.Seed, c.Seed+1))
	idx := map[string]int{}
	var slots []slot
	for i := range c.Keys {
		p := i % c.Principals
		keyStr := fmt.Sprintf("%s-%d", c.KeyPrefix, i/c.Principals)
		principal := "p" + strconv.Itoa(p)
		header := principal
		if strings.EqualFold(c.PrincipalHeader, "Authorization") {
			header = "Bearer " + principal
		}
		for range c.Dups {
			variant := "a"
			if c.ConflictShare > 0 && rng.Float64() < c.ConflictShare {
				variant = "b"
			}
			id := principal + "\x00" + keyStr + "\x00" + variant
			li, ok := idx[id]
			if !ok {
				body := fmt.Appendf(nil, `{"key":%q,"amount":%d,"variant":%q,"pad":%q}`,
					keyStr, 100+i/c.Principals, variant, strings.Repeat("x", c.BodyPad))
				sum := sha256.Sum256(body)
				li = len(r.logical)
				idx[id] = li
				r.logical = append(r.logical, logical{key: keyStr, principal: principal, header: header,
					body: body, bodyHash: hex.EncodeToString(sum[:])})
			}
			slots = append(slots, slot{logical: li})
		}
	}
	win := 2 * c.Clients
	for lo := 0; lo < len(slots); lo += win {
		hi := min(lo+win, len(slots))
		rng.Shuffle(hi-lo, func(a, b int) { slots[lo+a], slots[lo+b] = slots[lo+b], slots[lo+a] })
	}
	return slots
}

// mainPhase sends every slot once and returns the latencies.
func (r *runner) mainPhase(ctx context.Context, slots []slot, rep *RunReport) []time.Duration {
	var next atomic.Int64
	lats := make([][]time.Duration, r.cfg.Clients)
	outcomes := make([]map[string]int, r.cfg.Clients)
	retries := make([]int, r.cfg.Clients)
	var wg sync.WaitGroup
	for cl := range r.cfg.Clients {
		outcomes[cl] = map[string]int{}
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= len(slots) || ctx.Err() != nil {
					return
				}
				if r.cfg.Duration > 0 {
					at := r.start.Add(time.Duration(int64(r.cfg.Duration) * int64(n) / int64(len(slots))))
					if !sleepCtx(ctx, time.Until(at)) {
						return
					}
				}
				li := slots[n].logical
				res := r.do(ctx, cl, li, PhaseMain)
				lats[cl] = append(lats[cl], res.latency)
				outcomes[cl][res.outcome()]++
				if r.cfg.RetryFor <= 0 {
					continue
				}
				deadline := time.Now().Add(r.cfg.RetryFor)
				backoff := firstBackoff
				for !res.terminal() && time.Now().Before(deadline) {
					if !sleepCtx(ctx, r.retryWait(res, &backoff)) {
						return
					}
					res = r.do(ctx, cl, li, PhaseMain)
					lats[cl] = append(lats[cl], res.latency)
					outcomes[cl][res.outcome()]++
					retries[cl]++
				}
			}
		})
	}
	wg.Wait()
	var all []time.Duration
	for cl := range lats {
		all = append(all, lats[cl]...)
		for k, v := range outcomes[cl] {
			rep.Outcomes[k] += v
		}
		rep.Retries += retries[cl]
	}
	return all
}

// drain retries every logical request whose last answer was not terminal.
func (r *runner) drain(ctx context.Context, rep *RunReport) {
	start := time.Now()
	var pending []int
	r.mu.Lock()
	for i, la := range r.last {
		if la.seen && !la.terminal {
			pending = append(pending, i)
		}
	}
	r.mu.Unlock()
	rep.DrainPending = len(pending)
	if len(pending) == 0 {
		return
	}
	r.cfg.Logger.Info("drain", "pending", len(pending))
	dctx, cancel := context.WithTimeout(ctx, r.cfg.DrainTimeout)
	defer cancel()
	var next, sent, unresolved atomic.Int64
	var wg sync.WaitGroup
	for cl := range min(r.cfg.Clients, len(pending)) {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= len(pending) {
					return
				}
				if !r.retryUntilTerminal(dctx, cl, pending[n], &sent) {
					unresolved.Add(1)
				}
			}
		})
	}
	wg.Wait()
	rep.DrainRequests = int(sent.Load())
	rep.DrainUnresolved = int(unresolved.Load())
	rep.DrainElapsed = time.Since(start)
}

func (r *runner) retryUntilTerminal(ctx context.Context, cl, li int, sent *atomic.Int64) bool {
	backoff := firstBackoff
	for ctx.Err() == nil {
		res := r.do(ctx, cl, li, PhaseDrain)
		sent.Add(1)
		if res.terminal() {
			return true
		}
		if !sleepCtx(ctx, r.retryWait(res, &backoff)) {
			break
		}
	}
	return false
}

// firstBackoff is the wait before the first retry of a request whose
// answer carried no Retry-After; it doubles up to MaxRetryAfter.
const firstBackoff = 20 * time.Millisecond

// retryWait is the wait before retrying after res: its Retry-After, else
// the backoff (which it doubles), capped by MaxRetryAfter.
func (r *runner) retryWait(res result, backoff *time.Duration) time.Duration {
	wait := *backoff
	if s, err := strconv.Atoi(strings.TrimSpace(res.rec.RetryAfter)); err == nil && s >= 0 {
		wait = time.Duration(s) * time.Second
	}
	*backoff = min(2**backoff, r.cfg.MaxRetryAfter)
	return min(max(wait, 10*time.Millisecond), r.cfg.MaxRetryAfter)
}

type result struct {
	rec     Record
	latency time.Duration
}

// terminal reports whether res is a response that settles its request.
func (res result) terminal() bool {
	return res.rec.Type == TypeOK && Terminal(res.rec.Status, res.rec.ProblemType)
}

func (res result) outcome() string {
	switch {
	case res.rec.Type != TypeOK:
		return res.rec.Type
	case res.rec.Replayed:
		return "replayed"
	default:
		return strconv.Itoa(res.rec.Status)
	}
}

// errNoResend is the error of a request that net/http wanted to resend
// after it may have been delivered.
var errNoResend = errors.New("not resending a request that may have been delivered")

// keepLimit is how much of a response body is kept to find its effect id
// or problem type; the rest is only hashed.
const keepLimit = 64 << 10

// do sends one request for logical request li and records it.
func (r *runner) do(ctx context.Context, cl, li int, phase string) result {
	lg := &r.logical[li]
	op := r.opSeq.Add(1)
	target := int(op % int64(len(r.cfg.Targets)))
	base := Record{Op: op, Client: cl, Target: target, Key: lg.key, Principal: lg.principal, BodyHash: lg.bodyHash, Phase: phase}
	inv := base
	inv.Type = TypeInvoke
	inv.T = r.now()
	r.hist.add(inv)

	done := base
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	var wrote atomic.Bool
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
		WroteHeaders: func() { wrote.Store(true) },
	})
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, r.cfg.Targets[target], bytes.NewReader(lg.body))
	if err != nil {
		panic(err) // the targets were validated
	}
	// net/http resends a request carrying Idempotency-Key, unseen, when a
	// reused connection fails after sending it; then one operation of the
	// history would hide two deliveries. A GetBody that refuses keeps the
	// safe retry (nothing was written: the body is not rewound) and turns
	// the unsafe one into an error, recorded as info.
	req.GetBody = func() (io.ReadCloser, error) { return nil, errNoResend }
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", lg.key)
	req.Header.Set(r.cfg.PrincipalHeader, lg.header)
	resp, err := r.client.Do(req)
	if err != nil {
		done.Error = err.Error()
		done.Type = TypeInfo
		if !wrote.Load() {
			// No request header was ever complete, on any attempt: the
			// target cannot have acted on it.
			done.Type = TypeFail
		}
	} else {
		r.readResponse(resp, &done)
	}
	done.T = r.now()
	r.hist.add(done)

	terminal := done.Type == TypeOK && Terminal(done.Status, done.ProblemType)
	r.mu.Lock()
	if la := &r.last[li]; !la.seen || done.T >= la.t {
		*la = lastAnswer{t: done.T, terminal: terminal, seen: true}
	}
	r.mu.Unlock()
	return result{rec: done, latency: time.Duration(done.T - inv.T)}
}

func (r *runner) readResponse(resp *http.Response, rec *Record) {
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	rec.Replayed = strings.EqualFold(strings.TrimSpace(resp.Header.Get("Idempotent-Replayed")), "true")
	rec.RetryAfter = resp.Header.Get("Retry-After")
	h := sha256.New()
	kept := &capped{max: keepLimit}
	n, err := io.Copy(io.MultiWriter(h, kept), io.LimitReader(resp.Body, r.cfg.MaxResponseBody))
	if err == nil && n == r.cfg.MaxResponseBody {
		var one [1]byte
		if k, _ := io.ReadFull(resp.Body, one[:]); k == 1 {
			rec.Truncated = true // hashed up to the limit; the rest is not read
		}
	}
	rec.RespHash = hex.EncodeToString(h.Sum(nil))
	if err != nil {
		// The status arrived but the body was cut: what the target stored
		// is unknown to us.
		rec.Type = TypeInfo
		rec.Error = "reading body: " + err.Error()
		rec.RespHash = ""
		return
	}
	rec.Type = TypeOK
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/problem+json"):
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(kept.b, &p) == nil {
			rec.ProblemType = p.Type
		}
	case strings.Contains(ct, "json"):
		var a struct {
			EffectID string `json:"effect_id"`
		}
		if json.Unmarshal(kept.b, &a) == nil {
			rec.Effect = a.EffectID
		}
	}
}

// capped keeps the first max bytes written to it and drops the rest.
type capped struct {
	b   []byte
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (r *runner) now() int64 { return int64(time.Since(r.start)) }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func percentiles(lat []time.Duration) Latencies {
	if len(lat) == 0 {
		return Latencies{}
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	return Latencies{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: lat[len(lat)-1]}
}
