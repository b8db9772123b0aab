package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// newExecutionCmd is `idem execution`: an operator's actions on an
// application's execution, on the service's store.
func newExecutionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "execution",
		Short: "Retry, start over or cancel an execution of idem serve (an operator's actions, audited)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("missing subcommand: retry, start-over or cancel (see idem execution --help)")
		},
	}
	cmd.AddCommand(
		newExecutionActionCmd("retry", "Resume a failed execution at its failed step, with the same keys",
			`Resume the execution ID: a FAILED one runs its failed step again (the same
downstream key, a fresh retry budget), a RUNNING one its OUTCOME_UNKNOWN
steps; steps that completed never run again. A repeat changes nothing.
As POST /v1/executions/ID/retry does.`),
		newExecutionActionCmd("start-over", "Start a finished execution over as a new one",
			`Start the finished execution ID over: a new execution of the same input,
pinned to the original version (or the latest, with --latest), whose steps
compute their keys from that input again, so targets absorb what the first
run did. A trigger of its identity then gets the new run. As POST
/v1/executions/ID/start-over does.`),
		newExecutionActionCmd("cancel", "Cancel an execution",
			`Cancel the execution ID: a QUEUED one at once, a RUNNING one when its
worker next hears of it (or its lease ends). As POST
/v1/executions/ID/cancel does.`),
	)
	return cmd
}

func newExecutionActionCmd(action, short, long string) *cobra.Command {
	var storeURL, app, operator string
	var latest bool
	cmd := &cobra.Command{
		Use:   action + " ID --app APP",
		Short: short,
		Long: long + `

The action is recorded in the execution's events (idem.execution.operator)
with who took it: "cli operator:NAME" (--operator, or $USER). Prints the
execution as the API shows it.

Exit codes: 0 done, 1 refused or failed (not found, a transition that does
not apply), 2 usage.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("%s takes one execution ID, got %d arguments", action, len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !appName.MatchString(app) {
				return usagef("--app %q: the application's name", app)
			}
			if operator == "" {
				operator = os.Getenv("USER")
			}
			who := "cli"
			if operator = strings.TrimSpace(operator); operator != "" {
				who += " operator:" + operator
			}
			st, err := openServeStore(cmd.Context(), storeURL, storeOpts{logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return err
			}
			defer st.close()
			a := operatorAction{action: action, app: app, id: args[0], latest: latest, actor: who}
			var e Execution
			switch s := st.Store.(type) {
			case *sqlitestore.Store:
				e, err = act(cmd.Context(), s, a)
			case *pgstore.Store:
				e, err = act(cmd.Context(), s, a)
			default:
				return fmt.Errorf("%s keeps no executions", st.desc)
			}
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), e)
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "sqlite:idem.db", "the service's store: sqlite:PATH or postgres://...")
	cmd.Flags().StringVar(&app, "app", "", "the application whose execution it is (required)")
	cmd.Flags().StringVar(&operator, "operator", "", "who takes the action, for the audit (default: $USER)")
	if action == "start-over" {
		cmd.Flags().BoolVar(&latest, "latest", false, "pin the workflow's latest version instead of the original one")
	}
	return cmd
}

// Execution is an execution as the command prints it.
type Execution struct {
	ID       string `json:"id"`
	Number   int    `json:"number"`
	Status   string `json:"status"`
	Workflow string `json:"workflow,omitempty"`
	Version  int    `json:"version,omitempty"`
	Error    string `json:"error,omitempty"`
}

type operatorAction struct {
	action, app, id, actor string
	latest                 bool
}

// act takes a on s, through the service's own code (its engine, the
// audit and, for a start over, the trigger's move).
func act[TX any](ctx context.Context, s serve.Store[TX], a operatorAction) (Execution, error) {
	srv, err := serve.New(s, &serve.Config{})
	if err != nil {
		return Execution{}, err
	}
	var e store.Execution
	switch a.action {
	case "retry":
		e, err = srv.Retry(ctx, a.app, a.id, a.actor)
	case "start-over":
		e, err = srv.StartOver(ctx, a.app, a.id, a.latest, a.actor)
	default:
		e, _, err = srv.Cancel(ctx, a.app, a.id, a.actor)
	}
	if err != nil {
		return Execution{}, fmt.Errorf("%s of execution %s: %w", a.action, a.id, err)
	}
	return Execution{ID: e.ID, Number: e.Number, Status: execution.Status(e.Status).String(), Workflow: e.Workflow, Version: e.Version, Error: e.Error}, nil
}
