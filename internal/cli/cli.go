// Package cli holds the idem command's subcommands. cmd/idem only calls
// Main, so every command can be tested in-process, without exec.
//
// Exit codes, for every command: 0 success, 1 failure (the error is on
// stderr after "idem: "), 2 usage: bad or missing flags or arguments
// (errors of type usageError, and cobra's flag errors).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Main runs the idem command with args (without the program name) and
// returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	code, _ := execute(ctx, args, nil, stdout, stderr)
	return code
}

// execute is Main with a stdin (nil: the process's), returning the error
// the exit code comes from too, so that tests can look into it.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	root := newRoot()
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	if stdin != nil {
		root.SetIn(stdin)
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "idem:", err)
	}
	return exitCode(err), err
}

// usageError marks errors in how the command was called (exit code 2).
// It is the only mark: every command returns its usage errors as one.
type usageError struct{ error }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitCode maps a command's error to the process exit code: nil is 0, a
// usageError is 2, anything else is 1.
func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

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
	root.AddCommand(newServeCmd())
	root.AddCommand(newAppCmd())
	root.AddCommand(newWorkerTokenCmd())
	root.AddCommand(newBenchCmd())
	root.AddCommand(newWebhookCmd())
	root.AddCommand(newInboxCmd())
	root.AddCommand(newOutboxCmd())
	root.AddCommand(newWorkflowCmd())
	root.AddCommand(newExecutionCmd())
	root.AddCommand(newConnectionCmd())
	root.AddCommand(newSecretCmd())
	root.AddCommand(newTemplateCmd())
	return root
}

// flagsOnly refuses positional arguments to a command that takes flags
// only.
func flagsOnly(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q: idem %s takes flags only", args[0], name)
		}
		return nil
	}
}
