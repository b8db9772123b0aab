package cli

import (
	"os"

	"github.com/spf13/cobra"
)

// bindEnv makes env the default of flag when the flag is not given, so every
// flag has an environment equivalent for containers and systemd units.
func bindEnv(cmd *cobra.Command, flag, env string) {
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if v, ok := os.LookupEnv(env); ok && !c.Flags().Changed(flag) {
			if err := c.Flags().Set(flag, v); err != nil {
				return usageError{err}
			}
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}
