package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/redisstore"
)

// The request every HTTP row sends: a charge, as a payment API takes it.
const (
	chargeBody = `{"amount":100,"currency":"EUR","customer":"cus_123"}`
	chargePath = "/charges"
	alice      = "Bearer alice"
	bob        = "Bearer bob"
)

// charges is the handler every HTTP setup serves, net/http's and Fiber's
// alike: it reads the body, counts the run (the effect the idempotency
// layer must not repeat), waits work (the checks widen the race window
// with it; the measurements keep it 0) and answers 201 with the run's
// number and the caller, so that a check can tell whose answer it got.
type charges struct {
	runs atomic.Int64
	work time.Duration
}

func (h *charges) answer(caller string) []byte {
	n := h.runs.Add(1)
	if h.work > 0 {
		time.Sleep(h.work)
	}
	return fmt.Appendf(nil, `{"id":"ch_%d","caller":%q}`, n, caller)
}

func (h *charges) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	body := h.answer(r.Header.Get("Authorization"))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(body)
}

func (h *charges) fiber(c fiber.Ctx) error {
	_ = c.Body()
	body := h.answer(c.Get("Authorization"))
	c.Set("Content-Type", "application/json")
	return c.Status(http.StatusCreated).Send(body)
}

// httpSetup is one way to serve POST /charges with the charges handler.
type httpSetup struct {
	name string
	idem bool // idem as configured by default: the ratios divide its rate
	// guarded is true when the setup promises anything about keys: its
	// replays must not run the handler.
	guarded bool
	// replayOnly setups are measured in the replay row only.
	replayOnly bool
	// start serves h on a loopback port. Servers started with the same
	// prefix share their store, as processes on one Redis do.
	start func(ctx context.Context, e *env, prefix string, h *charges) (url string, stop func(), err error)
}

// httpSetups are idem's middleware and its peers, on one Redis.
var httpSetups = []httpSetup{
	{name: "idem httpidem + redisstore (default: 16 MiB replay cache)", idem: true, guarded: true, start: startIdem(nil)},
	{name: "idem httpidem + redisstore, replay cache off", guarded: true, replayOnly: true, start: startIdem(&key.Config{ReplayCacheBytes: -1})},
	{name: "Fiber v3 idempotency + Redis storage", guarded: true, start: startFiber(true)},
	{name: "Fiber v3, bare handler", start: startFiber(false)},
	{name: "net/http, bare handler", start: startBare},
}

// authorization is idem's principal: the Authorization value.
func authorization(r *http.Request) (string, bool) {
	a := r.Header.Get("Authorization")
	return a, a != ""
}

// startIdem serves h behind httpidem over a Redis store under prefix, with
// the guard configured by cfg (nil: the defaults).
func startIdem(cfg *key.Config) func(context.Context, *env, string, *charges) (string, func(), error) {
	return func(ctx context.Context, e *env, prefix string, h *charges) (string, func(), error) {
		durable, err := e.redisDurable(ctx)
		if err != nil {
			return "", nil, err
		}
		st, err := redisstore.New(ctx, e.redis, &redisstore.Config{Prefix: prefix, AllowNonDurable: !durable})
		if err != nil {
			return "", nil, err
		}
		g, err := key.New(st, cfg)
		if err != nil {
			return "", nil, err
		}
		m, err := httpidem.New(g, &httpidem.Config{Principal: authorization})
		if err != nil {
			return "", nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("POST "+chargePath, m.Wrap(h))
		return serveHTTP(mux)
	}
}

func startBare(_ context.Context, _ *env, _ string, h *charges) (string, func(), error) {
	mux := http.NewServeMux()
	mux.Handle("POST "+chargePath, h)
	return serveHTTP(mux)
}

// serveHTTP serves h with net/http on a loopback port.
func serveHTTP(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// startFiber serves h with Fiber v3 on a loopback port, behind its
// idempotency middleware over Redis under prefix when guarded. The
// middleware is configured as its documentation shows, except for the
// header, which is the standard's Idempotency-Key here as in idem (Fiber's
// default is X-Idempotency-Key); its lock is the default, in memory.
func startFiber(guarded bool) func(context.Context, *env, string, *charges) (string, func(), error) {
	return func(_ context.Context, e *env, prefix string, h *charges) (string, func(), error) {
		app := fiber.New()
		if guarded {
			app.Use(idempotency.New(idempotency.Config{
				Storage:   &fiberRedis{client: e.redis, prefix: prefix + "fiber:"},
				KeyHeader: httpidem.HeaderKey,
			}))
		}
		app.Post(chargePath, h.fiber)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		go func() { _ = app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}) }()
		return "http://" + ln.Addr().String(), func() { _ = app.Shutdown() }, nil
	}
}

// post sends one charge and returns the status and body of the answer.
func post(ctx context.Context, client *http.Client, url, idemKey, caller, body string) (int, string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+chargePath, strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", caller)
	req.Header.Set(httpidem.HeaderKey, idemKey)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = io.Copy(&buf, resp.Body)
	return resp.StatusCode, buf.String(), resp.Header, err
}

// newClient is a keep-alive HTTP client with a connection for each of n
// clients.
func newClient(n int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: n, MaxIdleConnsPerHost: n, IdleConnTimeout: time.Minute}}
}

// runHTTPReplay measures replays: each client sends, again and again, a
// key it completed before the measurement.
func runHTTPReplay(ctx context.Context, e *env, opts options) ([]line, error) {
	return runHTTP(ctx, e, opts, "HTTP replay, Redis", true)
}

// runHTTPNew measures new keys: every request carries a key never sent.
func runHTTPNew(ctx context.Context, e *env, opts options) ([]line, error) {
	return runHTTP(ctx, e, opts, "HTTP new key, Redis", false)
}

func runHTTP(ctx context.Context, e *env, opts options, row string, replay bool) ([]line, error) {
	var out []line
	for _, s := range httpSetups {
		if s.replayOnly && !replay {
			continue
		}
		check, err := e.httpCheck(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("%s: checks: %w", s.name, err)
		}
		h := &charges{}
		url, stop, err := s.start(ctx, e, e.prefix(), h)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		for _, n := range opts.clients {
			opts.logger.Info("measuring", "row", row, "peer", s.name, "clients", n)
			r, err := measureHTTP(ctx, s, url, h, n, opts.warmup, opts.duration, replay)
			if err != nil {
				stop()
				return nil, fmt.Errorf("%s, %d clients: %w", s.name, n, err)
			}
			out = append(out, line{row: row, peer: s.name, idem: s.idem, clients: n, result: r, unit: "req/s", guarantees: check.String(), kept: check.ok()})
		}
		stop()
	}
	return out, nil
}

// measureHTTP drives n keep-alive clients against url for warmup, then for
// d measured.
func measureHTTP(ctx context.Context, s httpSetup, url string, h *charges, n int, warmup, d time.Duration, replay bool) (result, error) {
	client := newClient(n)
	defer client.CloseIdleConnections()
	ks := newKeys()
	own := make([]string, n) // each client's completed key, for replays
	for c := range own {
		own[c] = ks.next()
		if status, body, _, err := post(ctx, client, url, own[c], alice, chargeBody); err != nil || status != http.StatusCreated {
			return result{}, fmt.Errorf("first request: %d %s %v", status, body, err)
		}
	}
	before := h.runs.Load()
	r, err := measure(ctx, n, warmup, d, func(ctx context.Context, c int) error {
		k := own[c]
		if !replay {
			k = ks.next()
		}
		status, body, hdr, err := post(ctx, client, url, k, alice, chargeBody)
		switch {
		case err != nil:
			return err
		case status != http.StatusCreated:
			return fmt.Errorf("%w: %d %s", errUnexpected, status, body)
		case replay && s.idem && hdr.Get(httpidem.HeaderReplayed) != "true":
			return fmt.Errorf("%w: not a replay: %s", errUnexpected, body)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if replay && s.guarded && h.runs.Load() != before {
		return r, fmt.Errorf("%w: the handler ran %d times on replays", errUnexpected, h.runs.Load()-before)
	}
	return r, nil
}

// httpCheck is what the guarantee checks observed of one setup.
type httpCheck struct {
	// sent requests with one key, half to each of two servers sharing
	// the store, at once; runs is how often the handler ran for them.
	sent, runs int64
	// otherBody is what a request with a completed key and another body
	// got; otherBodyRefused is true when it was refused without a run.
	otherBody        string
	otherBodyRefused bool
	// otherCaller is what the same key and body from another caller got;
	// otherCallerOwn is true when it got an answer of its own.
	otherCaller    string
	otherCallerOwn bool
}

// ok is true when the setup kept all three guarantees.
func (c httpCheck) ok() bool { return c.runs == 1 && c.otherBodyRefused && c.otherCallerOwn }

func (c httpCheck) String() string {
	return fmt.Sprintf("1 key ×%d at once on 2 servers: ran %d×; other body: %s; other caller: %s",
		c.sent, c.runs, c.otherBody, c.otherCaller)
}

// checkWork is how long the handler runs in the checks: long enough that
// concurrent duplicates arrive while the first one runs.
const checkWork = 100 * time.Millisecond

// httpCheck runs the guarantee checks of s once per run (both HTTP rows
// show them), on a store of their own.
func (e *env) httpCheck(ctx context.Context, s httpSetup) (httpCheck, error) {
	if c, ok := e.httpChecks[s.name]; ok {
		return c, nil
	}
	c, err := checkHTTP(ctx, e, s)
	if err != nil {
		return c, err
	}
	if e.httpChecks == nil {
		e.httpChecks = map[string]httpCheck{}
	}
	e.httpChecks[s.name] = c
	return c, nil
}

// checkHTTP observes three things of s. (a) Two servers share one store;
// eight requests with one key, four to each, are sent at once: how often
// does the handler run? (b) A key completed with one body is sent with
// another: refused, or answered with the first body's answer? (c) A key
// completed for one caller (Authorization) is sent by another: does that
// caller get the first one's answer?
func checkHTTP(ctx context.Context, e *env, s httpSetup) (httpCheck, error) {
	const sent = 8
	prefix := e.prefix()
	h := &charges{work: checkWork}
	var urls [2]string
	for i := range urls {
		url, stop, err := s.start(ctx, e, prefix, h)
		if err != nil {
			return httpCheck{}, err
		}
		defer stop()
		urls[i] = url
	}
	client := newClient(sent)
	defer client.CloseIdleConnections()
	ks := newKeys()
	c := httpCheck{sent: sent}

	// (a) one key, at once, on two servers.
	k := ks.next()
	start := make(chan struct{})
	errs := make(chan error, sent)
	var wg sync.WaitGroup
	for i := range sent {
		wg.Go(func() {
			<-start
			_, _, _, err := post(ctx, client, urls[i%2], k, alice, chargeBody)
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return c, err
		}
	}
	c.runs = h.runs.Load()

	// (b) a completed key with another body.
	k = ks.next()
	if status, body, _, err := post(ctx, client, urls[0], k, alice, chargeBody); err != nil || status != http.StatusCreated {
		return c, fmt.Errorf("(b) first request: %d %s %v", status, body, err)
	}
	runs := h.runs.Load()
	status, _, _, err := post(ctx, client, urls[0], k, alice, `{"amount":999,"currency":"EUR","customer":"cus_123"}`)
	if err != nil {
		return c, err
	}
	switch {
	case h.runs.Load() != runs:
		c.otherBody = fmt.Sprintf("ran again (%d)", status)
	case status == http.StatusCreated:
		c.otherBody = "got the first body's answer (201)"
	default:
		c.otherBody = fmt.Sprintf("refused (%d)", status)
		c.otherBodyRefused = status == http.StatusUnprocessableEntity
	}

	// (c) a completed key from another caller.
	k = ks.next()
	if status, body, _, err := post(ctx, client, urls[0], k, alice, chargeBody); err != nil || status != http.StatusCreated {
		return c, fmt.Errorf("(c) first request: %d %s %v", status, body, err)
	}
	runs = h.runs.Load()
	status, body, _, err := post(ctx, client, urls[0], k, bob, chargeBody)
	if err != nil {
		return c, err
	}
	switch {
	case strings.Contains(body, alice):
		c.otherCaller = fmt.Sprintf("got the first caller's answer (%d)", status)
	case h.runs.Load() == runs+1 && strings.Contains(body, bob):
		c.otherCaller = "ran for it (own answer)"
		c.otherCallerOwn = true
	default:
		return c, fmt.Errorf("%w: (c) %d %s", errUnexpected, status, body)
	}
	return c, nil
}
