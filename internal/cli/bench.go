package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/internal/loadtest"
)

// newBenchCmd is `idem bench`: ledger, run and check, the command face of
// package loadtest.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load and chaos tool: a ledger upstream, a load driver that records a history, and a checker",
		Long: `Load and chaos tool for any target that follows idem's HTTP contract.

  idem bench ledger --listen 127.0.0.1:9000 --dedup --log effects.jsonl
  idem proxy --upstream http://127.0.0.1:9000 --listen 127.0.0.1:8081
  idem bench run --target http://127.0.0.1:8081/charge --keys 200 --dups 4 \
      --clients 16 --conflict-share 0.05 --history history.jsonl --retry-until-terminal
  idem bench check --history history.jsonl --effects effects.jsonl --proxied

The ledger records every effect; run drives the target (repeat --target for
several proxy processes) and writes every request as a JSON line; check
verifies the history against the ledger (duplicated, lost and unexpected
effects, replay fidelity, conflicts, isolation between principals, liveness,
per-key linearizability) and exits non-zero on any violation.`,
	}
	cmd.AddCommand(newBenchLedgerCmd(), newBenchRunCmd(), newBenchCheckCmd())
	return cmd
}

func newBenchLedgerCmd() *cobra.Command {
	var c loadtest.LedgerConfig
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Serve an upstream that records every effect (POST any path; GET /effects)",
		Long: `Serve an upstream that records every effect.

Any POST, PUT, PATCH or DELETE is an effect, answered 201 with a JSON body
naming a unique effect id and the request body's hash. With --dedup the
ledger is an idempotent upstream: the same (principal, Idempotency-Key) gets
the first answer again with Idempotent-Replayed: true, another body gets 422;
without it every request is an effect. GET /effects lists every line as JSON
lines. With --log each line is fsynced to a file before the answer, and
loaded again at start. It prints "ledger listening on URL" (use port 0 for
any free port) and runs until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return loadtest.RunLedger(cmd.Context(), &c, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Listen, "listen", "127.0.0.1:8090", "address to listen on (port 0: any free port)")
	f.BoolVar(&c.Dedup, "dedup", false, "dedup on the forwarded Idempotency-Key and principal (an idempotent upstream)")
	f.DurationVar(&c.Delay, "delay", 0, "wait this long before recording each effect")
	f.Float64Var(&c.FailRate, "fail-rate", 0, "share of new requests answered 500 with no effect, within [0, 1]")
	f.StringVar(&c.Log, "log", "", "append each line to this file, fsynced before answering (loaded at start)")
	f.StringVar(&c.PrincipalHeader, "principal-header", "Authorization", `header that carries the principal ("Bearer " is stripped)`)
	f.Int64Var(&c.MaxBody, "max-body", 1<<20, "largest request body accepted")
	f.Uint64Var(&c.Seed, "seed", 1, "seed of the failure draws")
	return cmd
}

func newBenchRunCmd() *cobra.Command {
	var c loadtest.RunConfig
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Drive a target with duplicates, conflicts and several principals; record the history",
		Long: `Drive a target with --keys scopes × --dups duplicates at --clients concurrent
clients, spread over the --target URLs in turn. Scope i belongs to principal p(i mod P) and uses key string
PREFIX-(i/P), so the same key is sent by several principals with the same
body. A share --conflict-share of requests carries another body. Every
request is written to --history as JSON lines: an invoke line before sending,
then ok (a response), fail (never sent: dial refused) or info (outcome
unknown: timeout or reset after sending). With --retry-until-terminal, every
request whose last answer was not terminal (409 in flight or outcome unknown,
5xx, transport error) is retried afterwards until terminal or --drain-timeout.
With --retry-for, each client retries a request that is not terminal at once,
for up to that long, before its next request, as a real client would.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := loadtest.Run(cmd.Context(), &c)
			if rep != nil {
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					_ = enc.Encode(rep)
				} else {
					rep.WriteText(cmd.OutOrStdout())
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&c.Targets, "target", nil, "URL requests are POSTed to (required; repeat for several processes, used in turn)")
	f.IntVar(&c.Keys, "keys", 100, "number of (principal, key) scopes")
	f.IntVar(&c.Dups, "dups", 3, "requests per scope")
	f.IntVar(&c.Clients, "clients", 8, "concurrent clients")
	f.Float64Var(&c.ConflictShare, "conflict-share", 0, "share of requests with another body for their key")
	f.IntVar(&c.Principals, "principals", 2, "number of principals")
	f.StringVar(&c.PrincipalHeader, "principal-header", "Authorization", `principal header ("Bearer pN" for Authorization, else "pN")`)
	f.StringVar(&c.History, "history", "history.jsonl", "history file (JSON lines, truncated first)")
	f.BoolVar(&c.RetryUntilTerminal, "retry-until-terminal", false, "after the main phase, retry every unresolved request until terminal")
	f.DurationVar(&c.RetryFor, "retry-for", 0, "in the main phase, retry each request that is not terminal at once, for up to this long")
	f.DurationVar(&c.Duration, "duration", 0, "spread the main phase over about this long (0: as fast as possible)")
	f.DurationVar(&c.RequestTimeout, "timeout", 10*time.Second, "per-request timeout")
	f.DurationVar(&c.DrainTimeout, "drain-timeout", 60*time.Second, "bound on the drain (must exceed the target's lease)")
	f.DurationVar(&c.MaxRetryAfter, "max-retry-after", time.Second, "cap on the wait between retries")
	f.Int64Var(&c.MaxResponseBody, "max-response-body", 1<<20, "response bytes read per request at most")
	f.IntVar(&c.BodyPad, "body-pad", 0, "padding bytes added to every request body")
	f.StringVar(&c.KeyPrefix, "key-prefix", "", "prefix of every key (default: random)")
	f.Uint64Var(&c.Seed, "seed", 1, "seed of conflicts and sending order")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func newBenchCheckCmd() *cobra.Command {
	var c loadtest.CheckConfig
	var maxViolations int
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check a history against the ledger's effects; non-zero exit on any violation",
		Long: `Check a history written by "bench run" against the ledger's effects (its
--log file, or its URL). Checks: at most one effect per (principal, key) and
exactly one when it was answered 2xx; no effect for anything never sent;
every replay byte-identical to the first answer; requests with another body
never accepted or replayed; no answer carrying another principal's or key's
effect; every request terminal at the end (unless --allow-non-terminal); and
each key's history linearizable (porcupine) against a register holding the
stored response, indeterminate requests allowed both ways. With --proxied
(the deduplicating ledger behind a proxy), a key the proxy forwarded again
without any indeterminate outcome is a violation too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := loadtest.Check(cmd.Context(), &c)
			if err != nil {
				return err
			}
			rep.WriteText(cmd.OutOrStdout(), maxViolations)
			if !rep.OK() {
				return fmt.Errorf("check: %d violations", len(rep.Violations))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.History, "history", "history.jsonl", "history file written by bench run")
	f.StringVar(&c.Effects, "effects", "", "ledger log file or ledger URL (required)")
	f.BoolVar(&c.AllowNonTerminal, "allow-non-terminal", false, "do not require every request to end terminal")
	f.BoolVar(&c.Proxied, "proxied", false, "the deduplicating ledger sits behind the target: flag keys forwarded again without an indeterminate outcome")
	f.DurationVar(&c.LinTimeout, "lin-timeout", 10*time.Second, "porcupine time limit per key")
	f.IntVar(&maxViolations, "max-violations", 10, "violations named in the report")
	return cmd
}
