package loadtest

import (
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
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Effect kinds, the "kind" field of a ledger line.
const (
	// KindEffect is an effect: the ledger "charged".
	KindEffect = "effect"
	// KindAbsorbed is a delivery that a deduplicating ledger answered with
	// an earlier effect instead of charging again. It is not an effect; the
	// checker counts these to show how often a key reached the upstream twice.
	KindAbsorbed = "absorbed"
)

// Effect is one line of the ledger: GET /effects and the --log file hold one
// per line, in Seq order.
type Effect struct {
	// Seq numbers the lines from 1, across restarts on the same log.
	Seq int64 `json:"seq"`
	// Kind is effect or absorbed.
	Kind string `json:"kind"`
	// ID is the effect's unique id; an absorbed line carries the id of the
	// effect that was answered again.
	ID string `json:"id"`
	// Principal is the principal header's value without a "Bearer " prefix.
	Principal string `json:"principal"`
	// Key is the Idempotency-Key received (unquoted), "" if none.
	Key string `json:"key"`
	// BodyHash is the hex SHA-256 of the request body.
	BodyHash string `json:"body_hash"`
	Method   string `json:"method"`
	Path     string `json:"path"`
	// Time is the wall-clock time the ledger recorded it.
	Time time.Time `json:"time"`
}

// LedgerConfig configures the ledger upstream. The zero value is valid.
type LedgerConfig struct {
	// Listen is the TCP address to listen on; port 0 picks a free port
	// (see Ledger.Addr). Defaults to "127.0.0.1:8090".
	Listen string
	// Dedup makes the ledger an idempotent upstream: a request with the
	// (principal, Idempotency-Key) of an earlier effect gets that effect's
	// response again, byte for byte, with Idempotent-Replayed: true (and is
	// logged as absorbed); with another body it gets 422
	// idempotency-key-reused. Without Dedup every request is an effect.
	// Defaults to false.
	Dedup bool
	// Delay is waited before each effect is recorded (a slow upstream). The
	// wait continues if the client goes away, as a real server's work
	// would: that is the "sent, answer lost" case. Defaults to 0.
	Delay time.Duration
	// FailRate is the share of requests answered 500 without any effect
	// (checked before Delay). Must be within [0, 1]. Defaults to 0.
	FailRate float64
	// Log is a file to which each line is appended and fsynced before the
	// request is answered, so that a test can read the effects after the
	// ledger died. Lines already in it are loaded at start (a restarted
	// ledger keeps its dedup state and sequence). Defaults to "" (memory
	// only).
	Log string
	// PrincipalHeader names the header that carries the principal; a
	// "Bearer " prefix is stripped. Defaults to "Authorization".
	PrincipalHeader string
	// MaxBody is the largest request body accepted; larger gets 413.
	// Defaults to 1 MiB.
	MaxBody int64
	// Seed seeds the FailRate draws. Defaults to 1.
	Seed uint64
	// Logger receives errors (a failed fsync). Defaults to silence.
	Logger *slog.Logger

	// onDelay, for tests, is called when a request starts its Delay.
	onDelay func()
}

func (c *LedgerConfig) withDefaults() LedgerConfig {
	var out LedgerConfig
	if c != nil {
		out = *c
	}
	if out.Listen == "" {
		out.Listen = "127.0.0.1:8090"
	}
	if out.PrincipalHeader == "" {
		out.PrincipalHeader = "Authorization"
	}
	if out.MaxBody == 0 {
		out.MaxBody = 1 << 20
	}
	if out.Seed == 0 {
		out.Seed = 1
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

func (c *LedgerConfig) validate() error {
	switch {
	case c.Delay < 0:
		return errors.New("ledger: Delay must not be negative")
	case c.FailRate < 0 || c.FailRate > 1:
		return fmt.Errorf("ledger: FailRate %v must be within [0, 1]", c.FailRate)
	case c.MaxBody < 0:
		return errors.New("ledger: MaxBody must not be negative")
	}
	return nil
}

// Ledger is an HTTP upstream that records every effect. Any POST, PUT,
// PATCH or DELETE is a charge: it answers 201 with a JSON body
//
//	{"effect_id":"e-…","seq":1,"principal":"p0","key":"…","body_hash":"…"}
//
// GET /effects lists every line as JSON lines (?format=json for an array),
// GET /stats gives counters, GET /healthz answers 200.
type Ledger struct {
	cfg      LedgerConfig
	ln       net.Listener
	srv      *http.Server
	log      *syncLog
	ctx      context.Context // cancelled by Close: cuts Delay short
	cancel   context.CancelFunc
	served   chan struct{}
	instance string

	mu        sync.Mutex
	rng       *mrand.Rand
	seq       int64
	lines     []Effect
	first     map[scopeKey]int // dedup: index in lines of the scope's effect
	requests  int64
	failures  int64
	conflicts int64
}

type scopeKey struct{ principal, key string }

// StartLedger loads cfg.Log if any, listens on cfg.Listen and serves in the
// background until Close. cfg may be nil.
func StartLedger(cfg *LedgerConfig) (*Ledger, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	var inst [4]byte
	_, _ = rand.Read(inst[:])
	l := &Ledger{
		cfg:      c,
		served:   make(chan struct{}),
		instance: hex.EncodeToString(inst[:]),
		rng:      mrand.New(mrand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15)),
		first:    make(map[scopeKey]int),
	}
	if c.Log != "" {
		if err := l.load(c.Log); err != nil {
			return nil, err
		}
		lg, err := openSyncLog(c.Log)
		if err != nil {
			return nil, fmt.Errorf("ledger log: %w", err)
		}
		l.log = lg
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		if l.log != nil {
			_ = l.log.close()
		}
		return nil, fmt.Errorf("ledger: %w", err)
	}
	l.ln = ln
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.srv = &http.Server{
		Handler:           l,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(c.Logger.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(l.served)
		_ = l.srv.Serve(ln)
	}()
	return l, nil
}

// RunLedger starts a ledger, writes "ledger listening on http://ADDR" to
// out, and serves until ctx is done.
func RunLedger(ctx context.Context, cfg *LedgerConfig, out io.Writer) error {
	l, err := StartLedger(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ledger listening on %s\n", l.URL())
	<-ctx.Done()
	return l.Close()
}

// Addr is the address the ledger listens on (host:port).
func (l *Ledger) Addr() string { return l.ln.Addr().String() }

// URL is "http://" + Addr.
func (l *Ledger) URL() string { return "http://" + l.Addr() }

// Effects returns a copy of every line so far, absorbed deliveries included.
func (l *Ledger) Effects() []Effect {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Effect(nil), l.lines...)
}

// Close stops the ledger: pending delays end, in-flight requests get up to
// five seconds, the log is flushed and closed.
func (l *Ledger) Close() error {
	l.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.srv.Shutdown(ctx)
	if err != nil {
		_ = l.srv.Close()
	}
	<-l.served
	if l.log != nil {
		if cerr := l.log.close(); err == nil {
			err = cerr
		}
	}
	return err
}

func (l *Ledger) load(path string) error {
	effects, err := ReadEffectsFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range effects {
		l.lines = append(l.lines, e)
		if e.Seq > l.seq {
			l.seq = e.Seq
		}
		if e.Kind == KindEffect {
			sk := scopeKey{e.Principal, e.Key}
			if _, ok := l.first[sk]; !ok {
				l.first[sk] = len(l.lines) - 1
			}
		}
	}
	return nil
}

func (l *Ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		l.charge(w, r)
	case http.MethodGet, http.MethodHead:
		switch r.URL.Path {
		case "/effects":
			l.serveEffects(w, r)
		case "/stats":
			l.mu.Lock()
			st := map[string]int64{"lines": int64(len(l.lines)), "requests": l.requests,
				"failures": l.failures, "conflicts": l.conflicts}
			l.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
		case "/healthz":
			w.WriteHeader(http.StatusOK)
		default:
			http.NotFound(w, r)
		}
	default:
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE")
		problem(w, http.StatusMethodNotAllowed, "method-not-allowed", r.Method)
	}
}

func (l *Ledger) serveEffects(w http.ResponseWriter, r *http.Request) {
	lines := l.Effects()
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		if lines == nil {
			lines = []Effect{}
		}
		_ = json.NewEncoder(w).Encode(lines)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, e := range lines {
		if err := enc.Encode(e); err != nil {
			return
		}
	}
}

func (l *Ledger) charge(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, "body-too-large", err.Error())
			return
		}
		problem(w, http.StatusBadRequest, "bad-body", err.Error())
		return
	}
	sum := sha256.Sum256(body)
	bodyHash := hex.EncodeToString(sum[:])
	sk := scopeKey{principal: principalOf(r.Header.Get(l.cfg.PrincipalHeader)), key: keyOf(r.Header.Get("Idempotency-Key"))}

	l.mu.Lock()
	l.requests++
	if l.hitLocked(w, r, sk, bodyHash) {
		return
	}
	fail := l.cfg.FailRate > 0 && l.rng.Float64() < l.cfg.FailRate
	if fail {
		l.failures++
	}
	l.mu.Unlock()
	if fail {
		problem(w, http.StatusInternalServerError, "ledger-failure", "injected failure: nothing was recorded")
		return
	}
	if l.cfg.Delay > 0 {
		if l.cfg.onDelay != nil {
			l.cfg.onDelay()
		}
		t := time.NewTimer(l.cfg.Delay)
		select {
		case <-t.C:
		case <-l.ctx.Done():
			t.Stop()
			problem(w, http.StatusServiceUnavailable, "ledger-stopping", "ledger is shutting down: nothing was recorded")
			return
		}
	}

	l.mu.Lock()
	if l.hitLocked(w, r, sk, bodyHash) { // a concurrent duplicate won meanwhile
		return
	}
	l.seq++
	e := Effect{Seq: l.seq, Kind: KindEffect, ID: "e-" + l.instance + "-" + strconv.FormatInt(l.seq, 10),
		Principal: sk.principal, Key: sk.key, BodyHash: bodyHash, Method: r.Method, Path: r.URL.Path,
		Time: time.Now().UTC()}
	if _, ok := l.first[sk]; !ok {
		l.first[sk] = len(l.lines)
	}
	done := l.appendLocked(e)
	l.mu.Unlock()
	if !l.wait(w, done) {
		return
	}
	writeEffect(w, e)
}

// hitLocked is called with l.mu held. With Dedup, if the scope already has
// an effect it answers (replay or 422), unlocks and returns true; otherwise
// it returns false with l.mu still held. A correct idempotent upstream never
// fails a request it can answer from its record, so a hit is checked before
// the FailRate draw.
func (l *Ledger) hitLocked(w http.ResponseWriter, r *http.Request, sk scopeKey, bodyHash string) bool {
	i, ok := l.first[sk]
	if !ok || !l.cfg.Dedup || sk.key == "" {
		return false
	}
	orig := l.lines[i]
	if orig.BodyHash != bodyHash {
		l.conflicts++
		l.mu.Unlock()
		problem(w, http.StatusUnprocessableEntity, "idempotency-key-reused", "this key was used with another body")
		return true
	}
	l.seq++
	done := l.appendLocked(Effect{Seq: l.seq, Kind: KindAbsorbed, ID: orig.ID, Principal: sk.principal, Key: sk.key,
		BodyHash: bodyHash, Method: r.Method, Path: r.URL.Path, Time: time.Now().UTC()})
	l.mu.Unlock()
	if l.wait(w, done) {
		w.Header().Set("Idempotent-Replayed", "true")
		writeEffect(w, orig)
	}
	return true
}

// appendLocked adds e to memory and queues it for the log, under l.mu so
// that the log is in Seq order.
func (l *Ledger) appendLocked(e Effect) <-chan error {
	l.lines = append(l.lines, e)
	if l.log == nil {
		return nil
	}
	line, _ := json.Marshal(e)
	return l.log.append(append(line, '\n'))
}

// wait waits for the line's fsync; on failure it answers 500.
func (l *Ledger) wait(w http.ResponseWriter, done <-chan error) bool {
	if done == nil {
		return true
	}
	if err := <-done; err != nil {
		l.cfg.Logger.Error("ledger log", "err", err)
		problem(w, http.StatusInternalServerError, "ledger-log-failed", err.Error())
		return false
	}
	return true
}

// ledgerAnswer is the JSON body of a charge. Its encoding is deterministic,
// so a replay is byte-identical.
type ledgerAnswer struct {
	EffectID  string `json:"effect_id"`
	Seq       int64  `json:"seq"`
	Principal string `json:"principal"`
	Key       string `json:"key"`
	BodyHash  string `json:"body_hash"`
}

func writeEffect(w http.ResponseWriter, e Effect) {
	b, _ := json.Marshal(ledgerAnswer{EffectID: e.ID, Seq: e.Seq, Principal: e.Principal, Key: e.Key, BodyHash: e.BodyHash})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(b, '\n'))
}

// problemBase prefixes the ledger's problem types; the checker only looks at
// the last segment (the slug), as docs/http.md defines them.
const problemBase = "https://idem.dev/problems/"

func problem(w http.ResponseWriter, status int, slug, detail string) {
	b, _ := json.Marshal(map[string]any{
		"type": problemBase + slug, "title": http.StatusText(status), "status": status, "detail": detail,
	})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// principalOf strips a "Bearer " prefix.
func principalOf(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return v
}

// keyOf trims the header and unquotes a structured-field string.
func keyOf(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(v[1 : len(v)-1])
	}
	return v
}
