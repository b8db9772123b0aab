package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/keytemplate"
)

// newTemplateCmd is `idem template`: try an Idempotency-Key template
// (package keytemplate) before deploying it.
func newTemplateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Try Idempotency-Key templates on an intent before deploying them",
		Args:  noTemplateArgs,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("missing subcommand: eval (see idem template --help)")}
		},
	}
	cmd.AddCommand(newTemplateEvalCmd())
	return cmd
}

func newTemplateEvalCmd() *cobra.Command {
	var (
		template  string
		operation string
		maxInput  int
	)
	cmd := &cobra.Command{
		Use:   "eval --template T [--operation OP] < intent.json",
		Short: "Print the key a template gives for the intent on stdin",
		Long: `Print the Idempotency-Key that the template --template gives for the intent
read as JSON on stdin, as the outbox would send it, for example:

  echo '{"payload": {"order": {"id": "o-42"}}}' |
    idem template eval --template "= 'charge-' & payload.order.id"
  charge-o-42

The template is a JSONata expression over the intent, whose business data is
its field payload; the leading "=" (which marks an expression in a
configuration file) may be left out here. The key starts with the operation
and a "-": --operation names it, or it is taken from a leading literal such
as 'charge-'. See the keytemplate package for what templates may contain.

Exit codes:
  0  the key is printed on stdout
  1  the template is valid but gives no key for this input: a missing or
     null field, a value that is not a string or number, a key that is not
     1-255 bytes of printable ASCII, an evaluation error, stdin not one JSON
     object or over --max-input-bytes
  2  usage: bad or missing flags, or a template refused when it is defined
     (syntax error, reads the clock or randomness, not allowed in a key
     template, bad operation); stdin is not read then`,
		Args: noTemplateArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if template == "" {
				return usageError{errors.New("--template is required")}
			}
			if maxInput < 1 {
				return usageError{fmt.Errorf("--max-input-bytes %d: want a positive number of bytes", maxInput)}
			}
			t, err := keytemplate.Expr(operation, template, &keytemplate.Config{MaxInputBytes: maxInput})
			if err != nil {
				return usageError{fmt.Errorf("--template: %w", err)}
			}
			// Read one byte more than allowed, so that Key reports the
			// size instead of a truncated document.
			in, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), int64(maxInput)+1))
			if err != nil {
				return fmt.Errorf("read the intent from stdin: %w", err)
			}
			k, err := t.Key(in)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), k)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&template, "template", "", "the JSONata template, e.g. \"= 'charge-' & payload.order.id\" (required)")
	f.StringVar(&operation, "operation", "", "the key's operation prefix (default: from the template's leading 'op-' literal)")
	f.IntVar(&maxInput, "max-input-bytes", keytemplate.DefaultMaxInputBytes, "the largest intent accepted on stdin")
	return cmd
}

// noTemplateArgs refuses arguments as a usage error (exit 2).
func noTemplateArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (the template goes in --template)", args[0])}
	}
	return nil
}
