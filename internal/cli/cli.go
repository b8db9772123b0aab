// Package cli holds the idem command's subcommands. cmd/idem only calls
// Main, so every command can be tested in-process, without exec.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/loadtest"
	"github.com/idemhq/idem/internal/webhookcmd"
)

// Main runs the idem command with args (without the program name) and
// returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "idem:", err)
		var ue usageError
		if errors.As(err, &ue) || webhookcmd.ExitCode(err) == 2 {
			return 2
		}
		return 1
	}
	return 0
}

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ error }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "idem",
		Short:         "idem stops duplicate effects: idempotency keys, inbox, ordering, outbox",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newMigrateCmd())
	root.AddCommand(newProxyCmd())
	root.AddCommand(loadtest.Command())
	root.AddCommand(webhookcmd.Command())
	root.AddCommand(newInboxCmd())
	root.AddCommand(newOutboxCmd())
	root.AddCommand(newTemplateCmd())
	return root
}
