package cli

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

func newMigrateCmd() *cobra.Command {
	var storeURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply idem's schema migrations to a store (SQLite or PostgreSQL)",
		Long: `Apply idem's pending schema migrations, embedded in this binary, to the store.

Stores never migrate by themselves: they refuse to start on a schema with
pending migrations. Run this at deploy. On PostgreSQL an advisory lock makes
concurrent runs safe. Redis and memory stores have no schema.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, target, err := parseStore(storeURL)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var applied []store.Migration
			switch kind {
			case kindSQLite:
				db, err := sqlitestore.Open(target, nil)
				if err != nil {
					return err
				}
				defer db.Close()
				applied, err = sqlitestore.Migrate(ctx, db)
				if err != nil {
					return err
				}
			case kindPostgres:
				pool, err := pgxpool.New(ctx, target)
				if err != nil {
					return fmt.Errorf("postgres: %w", err)
				}
				defer pool.Close()
				applied, err = pgstore.Migrate(ctx, pool)
				if err != nil {
					return err
				}
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s store has no schema: nothing to migrate\n", kind)
				return nil
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
				return nil
			}
			for _, r := range applied {
				fmt.Fprintf(cmd.OutOrStdout(), "applied %d %s\n", r.Version, r.Name)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "sqlite:idem.db", "store to migrate: sqlite:PATH or postgres://... (env IDEM_STORE)")
	bindEnv(cmd, "store", "IDEM_STORE")
	return cmd
}
