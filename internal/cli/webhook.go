package cli

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/signature"
)

// webhookMaxBody bounds the body `idem webhook` reads from stdin.
const webhookMaxBody = 64 << 20

// webhookUsagef is usagef for `idem webhook`, whose usage messages have
// always begun with "usage: " (idem: usage: --secret is required).
func webhookUsagef(format string, args ...any) error {
	return usagef("usage: "+format, args...)
}

// newWebhookCmd is `idem webhook`: sign a body, or verify one, from the
// shell, with the idem or the Standard Webhooks scheme (see package
// signature). Exit codes:
//
//	0  signed, or verified
//	1  verification failed: the error wraps signature.ErrMalformed,
//	   ErrExpired or ErrBadSignature and says which (also stdin read errors)
//	2  usage: bad or missing flags, an unknown scheme, a refused secret,
//	   a --header that is not "Name: value"
func newWebhookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Sign or verify webhook bodies (idem and Standard Webhooks schemes)",
		Long: `Sign or verify webhook bodies, for people who script and debug webhooks.

Both subcommands read the body on stdin and use its bytes exactly as read:
'echo' adds a newline, 'printf %s' does not. Schemes:
  idem      Idem-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>;
            the secret's bytes are the key, as given
  standard  Standard Webhooks v1.0.0: webhook-id, webhook-timestamp,
            webhook-signature: v1,<base64>; secrets are whsec_<base64>
Secrets must be at least 16 bytes (after base64 decoding for standard).

Exit codes: 0 ok, 1 verification failed (malformed, expired, bad signature),
2 usage.`,
		Args: noWebhookArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return webhookUsagef("missing subcommand: sign or verify (see idem webhook --help)")
		},
	}
	// The subtree's flag errors keep the "usage: " prefix too.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return webhookUsagef("%v", err) })
	cmd.AddCommand(newWebhookSignCmd(), newWebhookVerifyCmd())
	return cmd
}

func noWebhookArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return webhookUsagef("unexpected argument %q", args[0])
	}
	return nil
}

// parseScheme checks the --scheme and --secret flags that sign and verify
// share.
func parseScheme(s string, secrets []string) (signature.Scheme, error) {
	switch sc := signature.Scheme(s); sc {
	case signature.SchemeIdem, signature.SchemeStandard:
		if len(secrets) == 0 {
			return "", webhookUsagef("--secret is required")
		}
		return sc, nil
	case "":
		return "", webhookUsagef("--scheme is required: idem or standard")
	}
	return "", webhookUsagef("--scheme %q: want idem or standard", s)
}

func readWebhookBody(cmd *cobra.Command) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), webhookMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read body from stdin: %w", err)
	}
	if len(body) > webhookMaxBody {
		return nil, webhookUsagef("body on stdin is over %d bytes", webhookMaxBody)
	}
	return body, nil
}

func newWebhookSignCmd() *cobra.Command {
	var (
		scheme  string
		secrets []string
		id      string
		unix    int64
	)
	cmd := &cobra.Command{
		Use:   "sign --scheme idem|standard --secret S [--id ID] [--timestamp UNIX] < body",
		Short: "Print the signature headers to send with the body on stdin",
		Long: `Print the signature headers to send with the body on stdin, one
"Name: value" per line. Each --secret adds one signature (rotation).
--id is the webhook-id of the standard scheme (default: a random msg_ id);
--timestamp is in unix seconds (default: now).`,
		Args: noWebhookArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := parseScheme(scheme, secrets)
			if err != nil {
				return err
			}
			if id != "" && sc != signature.SchemeStandard {
				return webhookUsagef("--id applies only to --scheme standard")
			}
			s, err := signature.NewSigner(sc, secrets, nil)
			if err != nil {
				return webhookUsagef("%v", err)
			}
			opts := &signature.SignOpts{ID: id}
			if cmd.Flags().Changed("timestamp") {
				if unix < 0 || unix >= 1e12 {
					return webhookUsagef("--timestamp %d: want unix seconds", unix)
				}
				opts.Timestamp = time.Unix(unix, 0)
			}
			body, err := readWebhookBody(cmd)
			if err != nil {
				return err
			}
			h, err := s.Sign(body, opts)
			if err != nil {
				return webhookUsagef("%v", err)
			}
			names := []string{signature.HeaderIdemSignature}
			if sc == signature.SchemeStandard {
				names = []string{signature.HeaderWebhookID, signature.HeaderWebhookTimestamp, signature.HeaderWebhookSignature}
			}
			for _, n := range names {
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", n, h.Get(n)); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&scheme, "scheme", "", "signature scheme: idem or standard (required)")
	f.StringArrayVar(&secrets, "secret", nil, "signing secret; repeat to sign with several (required)")
	f.StringVar(&id, "id", "", "webhook-id for --scheme standard (default: random msg_ id)")
	f.Int64Var(&unix, "timestamp", 0, "signing time in unix seconds (default: now)")
	return cmd
}

func newWebhookVerifyCmd() *cobra.Command {
	var (
		scheme    string
		secrets   []string
		headers   []string
		tolerance time.Duration
		unix      int64
	)
	cmd := &cobra.Command{
		Use:   "verify --scheme idem|standard --secret S [--header 'Name: value']... [--tolerance D] [--now UNIX] < body",
		Short: "Verify the body on stdin against signature headers; exit 0 when it verifies",
		Long: `Verify the body on stdin against the signature headers given with
--header 'Name: value' (repeat; the output of 'sign' works line by line).
Any of the --secret values may match (rotation). Exits 0 and prints "ok"
when it verifies; otherwise exits 1 with the reason on stderr: malformed,
expired (a genuine signature outside --tolerance of --now) or bad signature.`,
		Args: noWebhookArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := parseScheme(scheme, secrets)
			if err != nil {
				return err
			}
			h := http.Header{}
			for _, line := range headers {
				name, value, ok := strings.Cut(line, ":")
				name = strings.TrimSpace(name)
				if !ok || name == "" || strings.ContainsAny(name, " \t") {
					return webhookUsagef("--header %q: want 'Name: value'", line)
				}
				h.Add(name, strings.TrimSpace(value))
			}
			if tolerance == 0 {
				return webhookUsagef("--tolerance must be between %s and %s", signature.MinTolerance, signature.MaxTolerance)
			}
			cfg := &signature.Config{Tolerance: tolerance}
			if cmd.Flags().Changed("now") {
				at := time.Unix(unix, 0)
				cfg.Now = func() time.Time { return at }
			}
			v, err := signature.NewVerifier(sc, secrets, cfg)
			if err != nil {
				return webhookUsagef("%v", err)
			}
			body, err := readWebhookBody(cmd)
			if err != nil {
				return err
			}
			if err := v.Verify(h, body); err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&scheme, "scheme", "", "signature scheme: idem or standard (required)")
	f.StringArrayVar(&secrets, "secret", nil, "verifying secret; repeat for several (rotation) (required)")
	f.StringArrayVar(&headers, "header", nil, "a received header as 'Name: value'; repeat")
	f.DurationVar(&tolerance, "tolerance", signature.DefaultTolerance, "largest accepted distance between the timestamp and now, both ways")
	f.Int64Var(&unix, "now", 0, "the current time in unix seconds (default: the clock)")
	return cmd
}
