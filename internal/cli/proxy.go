package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/prom"
	"github.com/idemhq/idem/proxy"
)

// proxyFlags are the flags of `idem proxy`; each has an IDEM_* variable.
type proxyFlags struct {
	upstream           string
	listen             string
	store              string
	principalHeader    string
	methods            []string
	requireKey         bool
	retention          time.Duration
	lease              time.Duration
	maxBody            byteSize
	maxResponse        byteSize
	significantHeaders []string
	upstreamTimeout    time.Duration
	unknownHold        time.Duration
	waitInFlight       time.Duration
	recordTimeout      time.Duration
	bodyTimeout        time.Duration
	memoryBudget       byteSize
	admin              string
	shutdownTimeout    time.Duration
	migrate            bool
	allowNonDurable    bool
	redisPrefix        string
	logLevel           slog.Level
}

func newProxyCmd() *cobra.Command {
	f := proxyFlags{maxBody: 1 << 20, maxResponse: 1 << 20}
	cmd := &cobra.Command{
		Use:   "proxy --upstream URL",
		Short: "Put the Idempotency-Key contract in front of any HTTP API",
		Long: `Forward requests to the upstream behind the Idempotency-Key contract: a POST or
PATCH with an Idempotency-Key runs upstream at most once per caller and key,
and its retries get the first answer again, with Idempotent-Replayed: true.

The caller is, by default, a hash of the Authorization value (its scheme's case
folded): a caller is a credential, so a retry sent after an OAuth token refresh
is a new caller and its key starts afresh. To avoid that, put a gateway in
front that sets a stable caller id in a header, and name that header with
--principal-header. Requests without a caller (no credentials) pass through
untouched, as do GET and other methods. The key is forwarded unchanged, so an
idempotent upstream dedups too.

A request that never reached the upstream (connection refused) gets 502 and
may be retried at once. One whose answer was lost after it was sent (timeout,
reset) gets 504 or 502 upstream-outcome-unknown: it may have taken effect, and
the upstream may still be working on it, so retries get 409 outcome-unknown for
--unknown-hold (10m), then the next retry is forwarded again with the same key.
If the store fails while the upstream acts, the client gets 503 and the proxy
keeps the key held and records the answer once the store is back: the retry
gets the replay.

Several proxies may share one PostgreSQL schema, SQLite file or Redis. SQLite
and PostgreSQL need ` + "`idem migrate`" + ` first (or --migrate). SIGTERM or SIGINT stops
accepting, lets in-flight requests finish for --shutdown-timeout, and exits.

Once listening, it prints "proxy listening on http://ADDR" (and the admin
address) on stdout, which tells the port chosen for --listen 127.0.0.1:0.
Logs go to stderr. Every flag has an environment variable: --max-body is
IDEM_MAX_BODY.`,
		Args: flagsOnly("proxy"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProxy(cmd.Context(), &f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.upstream, "upstream", "", "base URL of the API to protect, http:// or https:// (required)")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8081", "address to serve the proxy on")
	fl.StringVar(&f.store, "store", "sqlite:idem.db", "where keys live: sqlite:PATH, postgres://..., redis://... or memory:")
	fl.StringVar(&f.principalHeader, "principal-header", "", "header with a stable caller id set by a trusted gateway (default: a hash of the Authorization value, so a refreshed token is a new caller)")
	fl.StringSliceVar(&f.methods, "methods", []string{"POST", "PATCH"}, "methods that take part; others pass through")
	fl.BoolVar(&f.requireKey, "require-key", false, "answer 400 to a participating request without Idempotency-Key")
	fl.DurationVar(&f.retention, "retention", key.DefaultRetention, "how long a completed key replays its response")
	fl.DurationVar(&f.lease, "lease", key.DefaultLease, "how long a claim holds a key without a heartbeat (extended while the upstream works)")
	fl.Var(&f.maxBody, "max-body", "largest request body, e.g. 1MiB, 512KiB, 1048576 (413 beyond it)")
	fl.Var(&f.maxResponse, "max-response", "largest response body stored for replay; larger ones are delivered once and not replayed")
	fl.StringSliceVar(&f.significantHeaders, "significant-headers", nil, "request headers that are part of the fingerprint, comma-separated")
	fl.DurationVar(&f.upstreamTimeout, "upstream-timeout", proxy.DefaultUpstreamTimeout, "bound on one upstream exchange")
	fl.DurationVar(&f.waitInFlight, "wait-in-flight", 0, "how long a duplicate of a request in flight waits for its answer (a replay) before it is answered 409 request-in-flight (default 0: at once)")
	fl.DurationVar(&f.unknownHold, "unknown-hold", 0, "how long a key whose upstream answer was lost answers 409 outcome-unknown before a retry is forwarded again; the upstream must finish any request within it (default 10m, or twice --upstream-timeout if longer)")
	fl.DurationVar(&f.recordTimeout, "record-timeout", key.DefaultRecordTimeout, "how long to keep trying to record an upstream answer the store did not take (its key stays held meanwhile)")
	fl.DurationVar(&f.bodyTimeout, "body-timeout", httpidem.DefaultBodyTimeout, "bound on reading a keyed request's body (408 after it)")
	fl.Var(&f.memoryBudget, "memory-budget", "request and response bodies held in memory at once, beyond 16KiB each (503 server-busy beyond it) (default 32MiB, or --max-body plus --max-response if larger)")
	fl.StringVar(&f.admin, "admin", "", "address of a separate listener serving /metrics, /healthz and /readyz (default: none)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight requests may finish after SIGTERM")
	fl.BoolVar(&f.migrate, "migrate", false, "apply the store's pending migrations (SQLite, PostgreSQL) before starting")
	fl.BoolVar(&f.allowNonDurable, "allow-non-durable", false, "accept a Redis that does not fsync every write (a crash may lose claims)")
	fl.StringVar(&f.redisPrefix, "redis-prefix", "idem:", "prefix of idem's Redis keys")
	fl.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fl.VisitAll(func(fl *pflag.Flag) {
		bindEnv(cmd, fl.Name, "IDEM_"+strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_")))
	})
	return cmd
}

// budgetDesc says which memory budget the proxy enforces: the flag's, or
// httpidem's default for these limits (which httpidem alone computes).
func (f *proxyFlags) budgetDesc() string {
	if f.memoryBudget == 0 {
		return "default (32MiB, or max-body + max-response if larger)"
	}
	return f.memoryBudget.String()
}

// check validates the flags beyond their types.
func (f *proxyFlags) check() (*url.URL, error) {
	if f.upstream == "" {
		return nil, usageError{errors.New("--upstream is required (or IDEM_UPSTREAM)")}
	}
	u, err := url.Parse(f.upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("--upstream %q: want an http:// or https:// URL with a host", f.upstream)}
	}
	for i, m := range f.methods {
		m = strings.ToUpper(strings.TrimSpace(m))
		switch {
		case m == "" || strings.ContainsFunc(m, func(r rune) bool { return r < 'A' || r > 'Z' }):
			return nil, usageError{fmt.Errorf("--methods: %q is not a method", f.methods[i])}
		case m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace || m == http.MethodConnect:
			return nil, usageError{fmt.Errorf("--methods: %s is safe; only unsafe methods take part", m)}
		}
		f.methods[i] = m
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"retention", f.retention}, {"lease", f.lease}, {"upstream-timeout", f.upstreamTimeout}, {"shutdown-timeout", f.shutdownTimeout},
		{"record-timeout", f.recordTimeout}, {"body-timeout", f.bodyTimeout}} {
		if d.v <= 0 {
			return nil, usageError{fmt.Errorf("--%s %v: must be positive", d.name, d.v)}
		}
	}
	if f.lease > f.retention {
		return nil, usageError{fmt.Errorf("--lease %v is longer than --retention %v", f.lease, f.retention)}
	}
	if f.maxBody <= 0 || f.maxResponse <= 0 {
		return nil, usageError{errors.New("--max-body and --max-response must be positive")}
	}
	if f.unknownHold < 0 {
		return nil, usageError{fmt.Errorf("--unknown-hold %v: must be positive", f.unknownHold)}
	}
	if f.recordTimeout > f.retention {
		f.recordTimeout = f.retention // an answer is never kept past its key
	}
	if f.memoryBudget != 0 && f.memoryBudget < f.maxBody {
		return nil, usageError{fmt.Errorf("--memory-budget %v is smaller than --max-body %v", f.memoryBudget.String(), f.maxBody.String())}
	}
	return u, nil
}

func runProxy(ctx context.Context, f *proxyFlags, stdout, stderr io.Writer) error {
	upstream, err := f.check()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.logLevel}))

	st, err := openStore(ctx, f.store, storeOpts{
		migrate:         f.migrate,
		allowNonDurable: f.allowNonDurable,
		redisPrefix:     f.redisPrefix,
		logger:          logger,
	})
	if err != nil {
		return err
	}
	defer st.close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := prom.Proxy(reg)
	if err != nil {
		return err
	}
	p, err := proxy.New(&proxy.Config{
		Upstream:           upstream,
		Store:              st,
		PrincipalHeader:    f.principalHeader,
		Methods:            f.methods,
		RequireKey:         f.requireKey,
		Lease:              f.lease,
		Retention:          f.retention,
		MaxBody:            int64(f.maxBody),
		MaxResponse:        int64(f.maxResponse),
		SignificantHeaders: f.significantHeaders,
		UpstreamTimeout:    f.upstreamTimeout,
		UnknownHold:        f.unknownHold,
		WaitInFlight:       f.waitInFlight,
		RecordTimeout:      f.recordTimeout,
		BodyTimeout:        f.bodyTimeout,
		MemoryBudget:       int64(f.memoryBudget),
		Hooks:              metrics.Hooks,
		Logger:             logger,
	})
	if err != nil {
		return usageError{err}
	}
	metrics.Watch(p)

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	// Watched for requests with both Content-Length and Transfer-Encoding,
	// which the proxy refuses (ConnContext below lets it see them).
	ln = proxy.Listener(ln)
	defer ln.Close()
	var adminLn net.Listener
	if f.admin != "" {
		if adminLn, err = net.Listen("tcp", f.admin); err != nil {
			return fmt.Errorf("--admin: %w", err)
		}
		defer adminLn.Close()
	}

	caps := st.Capabilities()
	principal := "sha256(Authorization)"
	if f.principalHeader != "" {
		principal = "header " + f.principalHeader
	}
	attrs := []any{
		"listen", ln.Addr().String(), "upstream", upstream.Redacted(),
		"store", st.desc, "durable", caps.Durable, "shared", caps.Shared,
		"principal", principal, "methods", strings.Join(f.methods, ","), "require_key", f.requireKey,
		"retention", f.retention, "lease", f.lease, "max_body", f.maxBody.String(), "max_response", f.maxResponse.String(),
		"significant_headers", strings.Join(f.significantHeaders, ","), "upstream_timeout", f.upstreamTimeout,
		"unknown_hold", f.unknownHold, "record_timeout", f.recordTimeout, "body_timeout", f.bodyTimeout,
		"memory_budget", f.budgetDesc(),
	}
	if adminLn != nil {
		attrs = append(attrs, "admin", adminLn.Addr().String())
	}
	logger.Info("idem proxy starting", attrs...)
	if !caps.Durable {
		logger.Warn("the store is not durable: a crash of it may lose keys, and a request may then run twice", "store", st.desc)
	}

	var shuttingDown atomic.Bool
	srv := &http.Server{
		Handler:           p,
		ConnContext:       proxy.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	var adminSrv *http.Server
	if adminLn != nil {
		adminSrv = &http.Server{
			Handler:           adminMux(p, reg, &shuttingDown),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          srv.ErrorLog,
		}
	}

	var wg sync.WaitGroup
	serveErr := make(chan error, 2)
	serve := func(s *http.Server, l net.Listener) {
		wg.Go(func() {
			if err := s.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		})
	}
	serve(srv, ln)
	fmt.Fprintf(stdout, "proxy listening on http://%s\n", ln.Addr())
	if adminSrv != nil {
		serve(adminSrv, adminLn)
		fmt.Fprintf(stdout, "admin listening on http://%s\n", adminLn.Addr())
	}
	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	if !caps.SelfExpiring {
		wg.Go(func() { _ = key.RunSweeper(sweepCtx, st, &key.SweeperConfig{Logger: logger}) })
	}

	var runErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down: no new connections; in-flight requests may finish", "timeout", f.shutdownTimeout)
	case runErr = <-serveErr:
		logger.Error("serving failed; shutting down", "err", runErr)
	}
	shuttingDown.Store(true)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("in-flight requests did not finish in time: aborting them (those that reached the upstream keep their keys until the lease ends)", "err", err)
	}
	// Ends upstream calls still running (only after a timed-out Shutdown)
	// and waits for their handlers, so that the store outlives them.
	p.Close()
	// Answers the store did not take while it failed are still being
	// recorded: give them the shutdown timeout before the store closes.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), f.shutdownTimeout)
	if err := p.Drain(dctx); err != nil {
		logger.Error("exiting with upstream answers not recorded: their keys free when their leases end, and a retry may reach the upstream again", "err", err)
	}
	dcancel()
	// The aborted requests' answers (502, 504) were written when their
	// handlers returned; let the server flush them before it closes the
	// connections, or their clients see a reset instead.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	_ = srv.Shutdown(fctx)
	fcancel()
	srv.Close()
	stopAdmin(adminSrv)
	stopSweep()
	wg.Wait()
	if runErr == nil {
		logger.Info("idem proxy stopped")
	}
	return runErr
}

// adminMux serves /metrics, /healthz (the process is up) and /readyz (the
// store answers, and the proxy is not shutting down).
func adminMux(p *proxy.Proxy, reg *prometheus.Registry, shuttingDown *atomic.Bool) http.Handler {
	return adminHandler(reg, shuttingDown, p.Ready)
}

// stopAdmin shuts the admin listener's server down (nil: none), closing
// it after 5 s.
func stopAdmin(srv *http.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
}

// adminHandler serves /metrics from reg, /healthz (the process is up) and
// /readyz (ready answers, and the process is not shutting down), for the
// --admin listener of idem proxy and idem serve.
func adminHandler(reg *prometheus.Registry, shuttingDown *atomic.Bool, ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if shuttingDown.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	return mux
}

// byteSize is a flag holding a number of bytes: 1048576, 1MiB, 512KiB,
// 1MB, 64k.
type byteSize int64

var byteUnits = []struct {
	suffix string
	n      int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1},
}

func (b *byteSize) Set(s string) error {
	v := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size: want bytes, or a number with KiB, MiB, GiB, KB, MB, GB", s)
	}
	*b = byteSize(n * mult)
	return nil
}

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.n && n%u.n == 0 {
			return strconv.FormatInt(n/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Type() string { return "size" }
