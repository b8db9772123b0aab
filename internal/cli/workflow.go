package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/workflow"
)

// maxDefinition bounds a definition read from stdin.
const maxDefinition = 1 << 20

// newWorkflowCmd is `idem workflow`: workflow definitions from a terminal.
func newWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Check workflow definitions (JSON or YAML) and store them for idem serve",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("missing subcommand: validate or apply (see idem workflow --help)")
		},
	}
	cmd.AddCommand(newWorkflowValidateCmd(), newWorkflowApplyCmd())
	return cmd
}

func newWorkflowValidateCmd() *cobra.Command {
	var secrets, connections []string
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a workflow definition; print each problem with its path",
		Long: `Check the workflow definition in FILE (JSON or YAML; - for stdin) as idem
serve does when it is stored, and print each problem on stdout, one a line,
as "PATH: REASON", PATH a JSON Pointer into the definition. Warnings (a
POST without a key or a verify step, an edge never taken) are printed as
"warning: PATH: REASON" and do not fail the check.

Secrets ({{ secrets.NAME }}) and connections are checked against --secret
and --connection when any is given; otherwise only their form is.

Exit codes: 0 the definition is valid, 1 it is not, 2 usage (no such file).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("validate takes one FILE (or - for stdin), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			wf, _, warns, err := loadDefinition(cmd, args[0], secrets, connections)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, w := range warns {
				fmt.Fprintln(out, "warning:", w)
			}
			d := wf.Definition()
			fmt.Fprintf(out, "%s: valid (%d vertices, %d edges)\n", args[0], len(d.Vertices), len(d.Edges))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&secrets, "secret", nil, "a secret name the application defines (repeat, or comma-separated)")
	cmd.Flags().StringSliceVar(&connections, "connection", nil, "a connection name the application defines (repeat, or comma-separated)")
	return cmd
}

// loadDefinition reads FILE (- for stdin) and checks it as idem serve does;
// an invalid definition prints its problems on stdout, one a line, and
// fails.
func loadDefinition(cmd *cobra.Command, file string, secrets, connections []string) (*workflow.Workflow, []byte, []workflow.Problem, error) {
	data, err := readFile(cmd, file)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := &workflow.Options{}
	if len(secrets) > 0 || len(connections) > 0 {
		opts.Secrets, opts.Connections = append([]string{}, secrets...), append([]string{}, connections...)
	}
	w, def, warns, err := workflow.Load(data, opts)
	if err := printProblems(cmd, file, err); err != nil {
		return nil, nil, nil, err
	}
	return w, def, warns, nil
}

// readFile reads FILE, or stdin for -.
func readFile(cmd *cobra.Command, file string) ([]byte, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxDefinition))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usagef("%v", err)
	}
	return data, nil
}

// printProblems prints an invalid definition's problems on stdout, one a
// line, and returns the error that fails the command (err itself when it
// is no *InvalidError).
func printProblems(cmd *cobra.Command, file string, err error) error {
	if inv, ok := errors.AsType[*workflow.InvalidError](err); ok {
		for _, p := range inv.Problems {
			fmt.Fprintln(cmd.OutOrStdout(), p)
		}
		return fmt.Errorf("%s: %d problems", file, len(inv.Problems))
	}
	return err
}

func newWorkflowApplyCmd() *cobra.Command {
	return newApplyCmd(workflow.Kind, "workflow", `Check the workflow definition in FILE (JSON or YAML; - for stdin) as idem
serve does when it is stored (its secrets and connections against the
application's) and store it in --store as the next version of the
application's workflow NAME (by default FILE's name without its
extension), as PUT /v1/workflows/NAME does.`)
}

// newApplyCmd is `idem workflow apply` and `idem connection apply`.
func newApplyCmd(kind, what, long string) *cobra.Command {
	var storeURL, app, name string
	cmd := &cobra.Command{
		Use:   "apply FILE --app APP [--name NAME]",
		Short: "Check a " + what + " and store it as the application's " + what + "'s next version",
		Long: long + ` Prints {"name", "version", "created"}: created is
false when it equals the latest version (no new version).

Exit codes: 0 stored (or already the latest), 1 invalid or not stored,
2 usage.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("apply takes one FILE (or - for stdin), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" && args[0] != "-" {
				name = strings.TrimSuffix(filepath.Base(args[0]), filepath.Ext(args[0]))
			}
			if !appName.MatchString(app) {
				return usagef("--app %q: the application's name", app)
			}
			if !workflow.ValidName(name) {
				return usagef("%s name %q: 1 to 63 lowercase letters, digits, '_' and '-' (--name)", what, name)
			}
			data, err := readFile(cmd, args[0])
			if err != nil {
				return err
			}
			st, err := openServeStore(cmd.Context(), storeURL, storeOpts{logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return err
			}
			defer st.close()
			apps, okApps := st.Store.(store.AppStore)
			defs, okDefs := st.Store.(store.DefinitionStore)
			secrets, okSecrets := st.Store.(store.SecretStore)
			if !okApps || !okDefs || !okSecrets {
				return fmt.Errorf("%s keeps no workflows", st.desc)
			}
			ctx := cmd.Context()
			if _, err := apps.GetApp(ctx, app); err != nil {
				return fmt.Errorf("application %q: %w", app, err)
			}
			// Checked as the service checks them: against the
			// application's secrets and connections.
			opts := &workflow.Options{Connections: []string{}}
			if opts.Secrets, err = secrets.SecretNames(ctx, app); err != nil {
				return err
			}
			var body []byte
			var warns []workflow.Problem
			if kind == workflow.Kind {
				if def, err := workflow.Parse(data); err == nil {
					for _, c := range def.ConnectionNames() {
						_, err := defs.GetDefinition(ctx, store.DefinitionKey{App: app, Kind: workflow.ConnectionKind, Name: c}, 0)
						switch {
						case err == nil:
							opts.Connections = append(opts.Connections, c)
						case !errors.Is(err, store.ErrNotFound):
							return err
						}
					}
				}
				_, body, warns, err = workflow.Load(data, opts)
			} else {
				_, body, err = workflow.LoadConnection(data, opts)
			}
			if err := printProblems(cmd, args[0], err); err != nil {
				return err
			}
			d, created, err := defs.PutDefinition(ctx, store.DefinitionKey{App: app, Kind: kind, Name: name}, body, time.Now())
			if err != nil {
				return err
			}
			for _, w := range warns {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			return printJSON(cmd.OutOrStdout(), map[string]any{"name": name, "version": d.Version, "created": created})
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "sqlite:idem.db", "the service's store: sqlite:PATH or postgres://...")
	cmd.Flags().StringVar(&app, "app", "", "the application whose "+what+" it is (required)")
	cmd.Flags().StringVar(&name, "name", "", "the "+what+"'s name (default: FILE's name without its extension)")
	return cmd
}

// newConnectionCmd is `idem connection`: connections from a terminal.
func newConnectionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "connection",
		Short: "Store connections (a target's base URL, auth, key template, policy) for workflows' GATEWAY steps",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("missing subcommand: apply (see idem connection --help)")
		},
	}
	cmd.AddCommand(newApplyCmd(workflow.ConnectionKind, "connection", `Check the connection in FILE (JSON or YAML; - for stdin) as idem serve
does (its secrets against the application's) and store it in --store as
the next version of the application's connection NAME (by default FILE's
name without its extension), as PUT /v1/connections/NAME does.`))
	return cmd
}
