package cli

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/prom"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// serveFlags are the flags of `idem serve`; each has an IDEM_* variable.
type serveFlags struct {
	listen          string
	store           string
	taskTypes       []string
	onceTypes       []string
	lease           time.Duration
	keyLease        time.Duration
	maxAttempts     int
	demo            bool
	allowHosts      []string
	admin           string
	shutdownTimeout time.Duration
	migrate         bool
	logLevel        slog.Level
}

func newServeCmd() *cobra.Command {
	f := serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve --task-types export,report",
		Short: "Serve tasks, executions and workers over HTTP (durable executions)",
		Long: `Serve the task API: applications create tasks with an Idempotency-Key and
follow their executions; workers in any language claim steps, heartbeat,
report progress and complete or fail them under the claim's epoch.

Creating a task writes the task, its execution, its first events and the
stored answer in one transaction: a retry with the same key gets the same
task and execution, whatever crashed. A step whose worker loses its lease is
claimed again with a higher epoch, and the stale worker's writes are refused
(409 fenced); a type in --once-types is not run again but waits for an
operator (OUTCOME_UNKNOWN).

Applications and worker tokens are made with ` + "`idem app create`" + ` and
` + "`idem worker-token create`" + `. With --demo the service creates a demo
application and worker token, runs an in-process worker for the task type
"demo", and prints the curl lines to try.

The store is SQLite (sqlite:PATH, the default) or PostgreSQL; several serve
processes may share one PostgreSQL schema. Once listening, it prints "serve
listening on http://ADDR" on stdout. Every flag has an environment variable:
--task-types is IDEM_TASK_TYPES.`,
		Args: flagsOnly("serve"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), &f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on")
	fl.StringVar(&f.store, "store", "sqlite:idem.db", "where tasks live: sqlite:PATH or postgres://...")
	fl.StringSliceVar(&f.taskTypes, "task-types", nil, "task types that external workers run, comma-separated")
	fl.StringSliceVar(&f.onceTypes, "once-types", nil, "task types whose steps are not run again after a lost lease (an operator resolves them)")
	fl.DurationVar(&f.lease, "lease", execution.DefaultLease, "a claim's default lease (a worker's leaseSeconds overrides it), and a workflow step's")
	fl.DurationVar(&f.keyLease, "key-lease", key.DefaultLease, "how long a task creation's request key is held when its process dies before answering (its retries get 409 until then)")
	fl.IntVar(&f.maxAttempts, "max-attempts", execution.DefaultMaxAttempts, "claims a step gets before a retryable failure fails it for good")
	fl.BoolVar(&f.demo, "demo", false, "create a demo application and worker token, run an in-process worker for the type \"demo\", and print curl lines")
	fl.StringSliceVar(&f.allowHosts, "allow-hosts", nil, "hosts callbacks may go to (exact, or *.example.com), for untrusted tenants (default: any, private addresses included)")
	fl.StringVar(&f.admin, "admin", "", "address of a separate listener serving /metrics, /healthz and /readyz (default: none)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight requests may finish after SIGTERM")
	fl.BoolVar(&f.migrate, "migrate", false, "apply the store's pending migrations before starting")
	fl.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fl.VisitAll(func(fl *pflag.Flag) {
		bindEnv(cmd, fl.Name, "IDEM_"+strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_")))
	})
	return cmd
}

// types builds the declared task types from the flags.
func (f *serveFlags) types() (map[string]execution.TypeConfig, error) {
	if f.lease <= 0 || f.keyLease <= 0 || f.maxAttempts < 1 || f.shutdownTimeout <= 0 {
		return nil, usagef("--lease, --key-lease and --shutdown-timeout must be positive, --max-attempts at least 1")
	}
	names := slices.Clone(f.taskTypes)
	if f.demo && !slices.Contains(names, "demo") {
		names = append(names, "demo")
	}
	// No task types is a service that runs workflows only.
	types := map[string]execution.TypeConfig{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			return nil, usagef("--task-types: an empty type name")
		}
		types[n] = execution.TypeConfig{Lease: f.lease, MaxAttempts: f.maxAttempts}
	}
	for _, n := range f.onceTypes {
		tc, ok := types[strings.TrimSpace(n)]
		if !ok {
			return nil, usagef("--once-types: %q is not in --task-types", n)
		}
		tc.Once = true
		types[strings.TrimSpace(n)] = tc
	}
	return types, nil
}

func runServe(ctx context.Context, f *serveFlags, stdout, stderr io.Writer) error {
	types, err := f.types()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.logLevel}))
	st, err := openServeStore(ctx, f.store, storeOpts{migrate: f.migrate, logger: logger})
	if err != nil {
		return err
	}
	defer st.close()
	switch s := st.Store.(type) {
	case *sqlitestore.Store:
		return serveOn(ctx, s, st.desc, types, f, logger, stdout)
	case *pgstore.Store:
		return serveOn(ctx, s, st.desc, types, f, logger, stdout)
	}
	return fmt.Errorf("%s cannot serve tasks: use sqlite:PATH or postgres://", st.desc)
}

// openServeStore opens a store that can keep executions: SQLite or
// PostgreSQL.
func openServeStore(ctx context.Context, v string, o storeOpts) (*openedStore, error) {
	kind, _, err := parseStore(v)
	if err != nil {
		return nil, err
	}
	if kind != kindSQLite && kind != kindPostgres {
		return nil, usagef("--store %s: tasks need sqlite:PATH or postgres:// (they share transactions with request keys)", v)
	}
	return openStore(ctx, v, o)
}

func serveOn[TX any](ctx context.Context, s serve.Store[TX], desc string, types map[string]execution.TypeConfig,
	f *serveFlags, logger *slog.Logger, stdout io.Writer) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	outboxHooks, err := prom.Outbox(reg)
	if err != nil {
		return err
	}
	srv, err := serve.New(s, &serve.Config{Types: types, Logger: logger, OutboxHooks: outboxHooks, AllowHosts: f.allowHosts, WorkflowLease: f.lease,
		Key: &key.Config{Lease: f.keyLease, Logger: logger}})
	if err != nil {
		return usageError{err}
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	defer ln.Close()
	var adminLn net.Listener
	if f.admin != "" {
		if adminLn, err = net.Listen("tcp", f.admin); err != nil {
			return fmt.Errorf("--admin: %w", err)
		}
		defer adminLn.Close()
	}
	var shuttingDown atomic.Bool
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range types {
			if !yield(n) {
				return
			}
		}
	})
	logger.Info("idem serve starting", "listen", ln.Addr().String(), "store", desc, "task_types", strings.Join(names, ","),
		"once_types", strings.Join(f.onceTypes, ","), "lease", f.lease, "max_attempts", f.maxAttempts)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	serveErr := make(chan error, 2)
	wg.Go(func() {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	})
	wg.Go(func() { _ = srv.RunExpirer(bg) })
	wg.Go(func() { _ = srv.RunWakeups(bg) })
	wg.Go(func() { _ = srv.RunRelay(bg) })
	wg.Go(func() { _ = srv.RunWorkflows(bg) })
	wg.Go(func() { _ = srv.RunSchedules(bg) })
	wg.Go(func() { _ = key.RunSweeper(bg, s, &key.SweeperConfig{Logger: logger}) })
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "serve listening on %s\n", url)
	var adminSrv *http.Server
	if adminLn != nil {
		adminSrv = &http.Server{Handler: adminHandler(reg, &shuttingDown, func(ctx context.Context) error {
			// The store answers: an unknown application is a clean "no".
			if _, err := s.GetApp(ctx, "-"); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return nil
		}), ReadHeaderTimeout: 10 * time.Second, ErrorLog: hs.ErrorLog}
		wg.Go(func() {
			if err := adminSrv.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		})
		fmt.Fprintf(stdout, "admin listening on http://%s\n", adminLn.Addr())
	}
	if f.demo {
		if err := startDemo(bg, s, srv, url, stdout, &wg, logger); err != nil {
			stopBG()
			hs.Close()
			wg.Wait()
			return err
		}
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
	if err := hs.Shutdown(sctx); err != nil {
		logger.Warn("in-flight requests did not finish in time", "err", err)
		hs.Close()
	}
	stopAdmin(adminSrv)
	stopBG()
	wg.Wait()
	if runErr == nil {
		logger.Info("idem serve stopped")
	}
	return runErr
}

// startDemo makes the demo application and worker token (new ones each
// start), runs an in-process worker for the type "demo", and prints what
// to try.
func startDemo[TX any](ctx context.Context, s serve.Store[TX], srv *serve.Server[TX], url string, stdout io.Writer, wg *sync.WaitGroup, logger *slog.Logger) error {
	token := "demo_" + rand.Text()
	a, err := s.GetApp(ctx, "demo")
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = s.CreateApp(ctx, store.App{Name: "demo", TokenHashes: [][]byte{serve.HashToken(token)}, Scheme: "idem",
			Secrets: []string{rand.Text()}, CreatedAt: time.Now()})
	case err == nil:
		a.TokenHashes = append(a.TokenHashes, serve.HashToken(token))
		err = s.UpdateApp(ctx, a)
	}
	if err != nil {
		return fmt.Errorf("demo application: %w", err)
	}
	w, err := srv.Engine().NewWorker(map[string]execution.Handler[TX]{
		"demo": func(ctx context.Context, job execution.Job) (execution.Result[TX], error) {
			out, err := json.Marshal(map[string]any{"echo": json.RawMessage(job.Task.Input), "by": "the demo worker"})
			return execution.Result[TX]{Output: out}, err
		},
	}, &execution.WorkerConfig{Concurrency: 4})
	if err != nil {
		return fmt.Errorf("demo worker: %w", err)
	}
	wg.Go(func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			logger.Error("demo worker stopped", "error", err)
		}
	})
	fmt.Fprintf(stdout, `
demo application token: %[2]s  (the task type "demo" is run by an in-process worker)

  curl -s -X POST %[1]s/v1/tasks -H 'Authorization: Bearer %[2]s' \
       -H 'Idempotency-Key: order-42' -H 'Content-Type: application/json' \
       -d '{"type":"demo","input":{"order":"o-42"}}'
  # the same again: the same task and execution, with Idempotent-Replayed: true;
  # the same key with another input: 422 application/problem+json, idempotency-key-reused
  curl -s %[1]s/v1/executions/EXECUTION_ID -H 'Authorization: Bearer %[2]s'
  curl -s %[1]s/v1/executions/EXECUTION_ID/events -H 'Authorization: Bearer %[2]s'
`, url, token)
	return nil
}

var appName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func newAppCmd() *cobra.Command {
	var storeURL string
	cmd := &cobra.Command{
		Use:   "app",
		Short: "Create, list, rotate and disable the applications of idem serve",
	}
	cmd.PersistentFlags().StringVar(&storeURL, "store", "sqlite:idem.db", "the service's store: sqlite:PATH or postgres://...")
	var callback, scheme string
	create := &cobra.Command{
		Use:   "create NAME --callback URL",
		Short: "Create an application; prints its token and callback secret once, as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !appName.MatchString(name) {
				return usagef("application name %q: lower-case letters, digits and '-', at most 63", name)
			}
			if scheme != "idem" && scheme != "standard" {
				return usagef("--scheme %q: idem or standard", scheme)
			}
			if callback != "" && !strings.HasPrefix(callback, "http://") && !strings.HasPrefix(callback, "https://") {
				return usagef("--callback %q: an http:// or https:// URL", callback)
			}
			token, secret := rand.Text(), rand.Text()
			return withApps(cmd.Context(), storeURL, func(s store.AppStore) error {
				err := s.CreateApp(cmd.Context(), store.App{Name: name, TokenHashes: [][]byte{serve.HashToken(token)}, CallbackURL: callback,
					Scheme: scheme, Secrets: []string{secret}, CreatedAt: time.Now()})
				if errors.Is(err, store.ErrDuplicate) {
					return fmt.Errorf("application %q exists already", name)
				}
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), map[string]string{"name": name, "token": token, "callbackSecret": secret})
			})
		},
	}
	create.Flags().StringVar(&callback, "callback", "", "URL that receives the application's execution events")
	create.Flags().StringVar(&scheme, "scheme", "idem", "callback signature scheme: idem or standard")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the applications (never their tokens or secrets), as JSON lines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApps(cmd.Context(), storeURL, func(s store.AppStore) error {
				apps, err := s.ListApps(cmd.Context())
				if err != nil {
					return err
				}
				for _, a := range apps {
					if err := printJSON(cmd.OutOrStdout(), map[string]any{"name": a.Name, "callback": a.CallbackURL, "scheme": a.Scheme,
						"tokens": len(a.TokenHashes), "disabled": a.Disabled, "createdAt": a.CreatedAt.UTC()}); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	var revoke bool
	rotate := &cobra.Command{
		Use:   "rotate NAME",
		Short: "Add a new token (printed once, as JSON); --revoke-old drops the others",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			token := rand.Text()
			return withApps(cmd.Context(), storeURL, func(s store.AppStore) error {
				a, err := s.GetApp(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if revoke {
					a.TokenHashes = nil
				}
				a.TokenHashes = append(a.TokenHashes, serve.HashToken(token))
				if err := s.UpdateApp(cmd.Context(), a); err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), map[string]string{"name": a.Name, "token": token})
			})
		},
	}
	rotate.Flags().BoolVar(&revoke, "revoke-old", false, "drop every other token of the application")
	disable := &cobra.Command{
		Use:   "disable NAME",
		Short: "Disable an application: its tokens answer 403 application-disabled",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withApps(cmd.Context(), storeURL, func(s store.AppStore) error {
				a, err := s.GetApp(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				a.Disabled = true
				return s.UpdateApp(cmd.Context(), a)
			})
		},
	}
	cmd.AddCommand(create, list, rotate, disable)

	return cmd
}

// withApps opens the applications of the store named by storeURL for fn.
func withApps(ctx context.Context, storeURL string, fn func(s store.AppStore) error) error {
	st, err := openServeStore(ctx, storeURL, storeOpts{logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer st.close()
	apps, ok := st.Store.(store.AppStore)
	if !ok {
		return fmt.Errorf("%s keeps no applications", st.desc)
	}
	return fn(apps)
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func newWorkerTokenCmd() *cobra.Command {
	var storeURL string
	cmd := &cobra.Command{Use: "worker-token", Short: "Make worker tokens for idem serve"}
	cmd.PersistentFlags().StringVar(&storeURL, "store", "sqlite:idem.db", "the service's store: sqlite:PATH or postgres://...")
	cmd.AddCommand(&cobra.Command{
		Use:   "create",
		Short: "Create a worker token; prints it once, as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			token := rand.Text()
			return withApps(cmd.Context(), storeURL, func(s store.AppStore) error {
				if err := s.AddWorkerToken(cmd.Context(), serve.HashToken(token), time.Now()); err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), map[string]string{"token": token})
			})
		},
	})
	return cmd
}
