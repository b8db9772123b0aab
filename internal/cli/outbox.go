package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store"
)

// outboxAdmin is what `idem outbox` needs of a store: the outbox methods
// that run on their own (SQLite and PostgreSQL have them).
type outboxAdmin interface {
	ListIntents(ctx context.Context, state store.IntentState, after int64, limit int) ([]store.Intent, error)
	RequeueIntent(ctx context.Context, id int64, now time.Time) error
	EnableTarget(ctx context.Context, target string) error
	DisabledTargets(ctx context.Context) ([]string, error)
}

var intentStates = map[string]store.IntentState{
	"pending": store.IntentPending, "in_flight": store.IntentInFlight, "done": store.IntentDone, "dead": store.IntentDead,
}

// newOutboxCmd is `idem outbox`: the operator's view of an outbox, straight
// from the store (requeueing an intent needs no business code: the relay
// delivers it as stored, with its stored key).
func newOutboxCmd() *cobra.Command {
	var storeURL string
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "List intents, requeue dead ones, re-enable targets (SQLite or PostgreSQL store)",
	}
	cmd.PersistentFlags().StringVar(&storeURL, "store", "", "the store: sqlite:PATH or postgres://... (env IDEM_STORE)")
	open := func(cmd *cobra.Command) (outboxAdmin, func(), error) {
		v := storeURL
		if v == "" {
			v = os.Getenv("IDEM_STORE")
		}
		if v == "" {
			return nil, nil, usageError{errors.New("--store is required")}
		}
		st, err := openStore(cmd.Context(), v, storeOpts{logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, nil, err
		}
		ob, ok := st.Store.(outboxAdmin)
		if !ok {
			st.close()
			return nil, nil, usageError{fmt.Errorf("--store %s has no outbox (SQLite and PostgreSQL do)", st.desc)}
		}
		return ob, st.close, nil
	}

	var (
		state  string
		after  int64
		limit  int
		all    bool
		asJSON bool
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List intents in one state (default dead), oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, ok := intentStates[state]
			if !ok || limit < 1 || limit > 1000 {
				return usageError{fmt.Errorf("--state %q --limit %d: want pending, in_flight, done or dead, and 1..1000", state, limit)}
			}
			ob, closeFn, err := open(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 8, 2, ' ', 0)
			if !asJSON {
				fmt.Fprintln(tw, "ID\tTARGET\tMETHOD\tPATH\tSTREAM\tSEQ\tATTEMPTS\tKEY\tLAST ERROR")
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			for {
				page, err := ob.ListIntents(cmd.Context(), st, after, limit)
				if err != nil {
					return err
				}
				for _, in := range page {
					if asJSON {
						if err := enc.Encode(in); err != nil {
							return err
						}
						continue
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", in.ID, in.Target, in.Method, in.Path, in.Stream,
						in.Sequence, in.Attempts, in.Headers["Idempotency-Key"], in.LastError)
				}
				if !all || len(page) < limit {
					break
				}
				after = page[len(page)-1].ID
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&state, "state", "dead", "pending, in_flight, done or dead")
	list.Flags().Int64Var(&after, "after", 0, "list intents with an ID above this")
	list.Flags().IntVar(&limit, "limit", 100, "page size (1..1000)")
	list.Flags().BoolVar(&all, "all", false, "follow the pages to the end")
	list.Flags().BoolVar(&asJSON, "json", false, "one JSON object per intent")

	requeue := &cobra.Command{
		Use:   "requeue ID...",
		Short: "Make dead intents pending again, with a new attempt budget and their stored key",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ids []int64
			for _, a := range args {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id < 1 {
					return usageError{fmt.Errorf("intent id %q: want a positive integer", a)}
				}
				ids = append(ids, id)
			}
			ob, closeFn, err := open(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			var failed []error
			for _, id := range ids {
				if err := ob.RequeueIntent(cmd.Context(), id, time.Now()); err != nil {
					failed = append(failed, fmt.Errorf("%d: %w", id, err))
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d: pending\n", id)
			}
			return errors.Join(failed...)
		},
	}

	enable := &cobra.Command{
		Use:   "enable TARGET",
		Short: "Re-enable a target that answered 410 Gone; its waiting intents are delivered again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, closeFn, err := open(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := ob.EnableTarget(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: enabled\n", args[0])
			return nil
		},
	}
	disabled := &cobra.Command{
		Use:   "disabled",
		Short: "List the targets disabled by a 410 Gone",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ob, closeFn, err := open(cmd)
			if err != nil {
				return err
			}
			defer closeFn()
			ts, err := ob.DisabledTargets(cmd.Context())
			if err != nil {
				return err
			}
			for _, t := range ts {
				fmt.Fprintln(cmd.OutOrStdout(), t)
			}
			return nil
		},
	}
	cmd.AddCommand(list, requeue, enable, disabled)
	return cmd
}
