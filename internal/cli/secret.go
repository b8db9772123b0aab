package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/workflow"
)

// newSecretCmd is `idem secret`: an application's secrets, for its
// workflows' headers, from a terminal. Values are read from stdin, never
// from the command line (which other users of the machine can see), and
// never printed.
func newSecretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Set, list and delete an application's secrets (values from stdin, never shown)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("missing subcommand: set, list or delete (see idem secret --help)")
		},
	}
	var storeURL, app string
	withStore := func(cmd *cobra.Command, fn func(s store.SecretStore) error) error {
		if !appName.MatchString(app) {
			return usagef("--app %q: the application's name", app)
		}
		st, err := openServeStore(cmd.Context(), storeURL, storeOpts{logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		defer st.close()
		s, ok := st.Store.(store.SecretStore)
		apps, okApps := st.Store.(store.AppStore)
		if !ok || !okApps {
			return fmt.Errorf("%s keeps no secrets", st.desc)
		}
		if _, err := apps.GetApp(cmd.Context(), app); err != nil {
			return fmt.Errorf("application %q: %w", app, err)
		}
		return fn(s)
	}
	name := func(args []string) error {
		if len(args) != 1 || !workflow.ValidSecretName(args[0]) {
			return usagef("one secret NAME: 1 to 64 letters, digits and '_'")
		}
		return nil
	}
	set := &cobra.Command{
		Use:   "set NAME --app APP",
		Short: "Set a secret to the value read from stdin (one line)",
		Args:  func(_ *cobra.Command, args []string) error { return name(args) },
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 8<<10+2))
			if err != nil {
				return err
			}
			v := strings.TrimRight(string(b), "\r\n")
			if v == "" || len(v) > 8<<10 || strings.ContainsAny(v, "\r\n") {
				return usagef("the value on stdin: 1 byte to 8 KiB, on one line")
			}
			return withStore(cmd, func(s store.SecretStore) error {
				if err := s.PutSecret(cmd.Context(), app, args[0], []byte(v), time.Now()); err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"name": args[0]})
			})
		},
	}
	list := &cobra.Command{
		Use:   "list --app APP",
		Short: "List the names of the application's secrets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(s store.SecretStore) error {
				names, err := s.SecretNames(cmd.Context(), app)
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"names": names})
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME --app APP",
		Short: "Delete a secret",
		Args:  func(_ *cobra.Command, args []string) error { return name(args) },
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, func(s store.SecretStore) error { return s.DeleteSecret(cmd.Context(), app, args[0]) })
		},
	}
	for _, c := range []*cobra.Command{set, list, del} {
		c.Flags().StringVar(&storeURL, "store", "sqlite:idem.db", "the service's store: sqlite:PATH or postgres://...")
		c.Flags().StringVar(&app, "app", "", "the application (required)")
		cmd.AddCommand(c)
	}
	return cmd
}
