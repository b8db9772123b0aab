package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/workflow"
)

// maxDefinition bounds a definition read from stdin.
const maxDefinition = 1 << 20

// newWorkflowCmd is `idem workflow`: workflow definitions from a terminal.
func newWorkflowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Check workflow definitions (JSON or YAML) before storing them",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("missing subcommand: validate (see idem workflow --help)")
		},
	}
	cmd.AddCommand(newWorkflowValidateCmd())
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
			var data []byte
			var err error
			if args[0] == "-" {
				data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxDefinition))
			} else {
				data, err = os.ReadFile(args[0])
			}
			if err != nil {
				return usagef("%v", err)
			}
			opts := &workflow.Options{}
			if len(secrets) > 0 || len(connections) > 0 {
				opts.Secrets, opts.Connections = append([]string{}, secrets...), append([]string{}, connections...)
			}
			def, err := workflow.Parse(data)
			var warns []workflow.Problem
			if err == nil {
				_, warns, err = workflow.Compile(def, opts)
			}
			out := cmd.OutOrStdout()
			var inv *workflow.InvalidError
			if errors.As(err, &inv) {
				for _, p := range inv.Problems {
					fmt.Fprintln(out, p)
				}
				return fmt.Errorf("%s: %d problems", args[0], len(inv.Problems))
			}
			if err != nil {
				return err
			}
			for _, w := range warns {
				fmt.Fprintln(out, "warning:", w)
			}
			fmt.Fprintf(out, "%s: valid (%d vertices, %d edges)\n", args[0], len(def.Vertices), len(def.Edges))
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&secrets, "secret", nil, "a secret name the application defines (repeat, or comma-separated)")
	cmd.Flags().StringSliceVar(&connections, "connection", nil, "a connection name the application defines (repeat, or comma-separated)")
	return cmd
}
