package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/webhook"
)

// newInboxCmd is `idem inbox`: the operator's view of a service's inbox
// through the admin API it mounts (webhook.Admin). Requeue runs the
// service's own apply function, so it must go through the service.
func newInboxCmd() *cobra.Command {
	var (
		admin   string
		timeout time.Duration
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "List and requeue dead letters, list gaps, through a service's admin API",
		Long: `Talk to the admin API a service mounts with webhook.Admin (for example at
http://127.0.0.1:9090/admin/inbox/). The API has no authentication of its own:
serve it on a private address.`,
	}
	cmd.PersistentFlags().StringVar(&admin, "admin", "", "base URL of the service's webhook.Admin handler (required)")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 30*time.Second, "timeout of each request")
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print the API's JSON instead of a table")

	client := func() (*adminClient, error) {
		if admin == "" {
			return nil, usageError{errors.New("--admin is required")}
		}
		u, err := url.Parse(admin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usageError{fmt.Errorf("--admin %q: want an http(s) URL", admin)}
		}
		if !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		return &adminClient{base: u, http: &http.Client{Timeout: timeout}}, nil
	}

	var after int64
	var limit int
	var all bool
	list := &cobra.Command{
		Use:   "dead-letters",
		Short: "List dead letters (reason, attempts, event), oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 8, 2, ' ', 0)
			if !asJSON {
				fmt.Fprintln(tw, "ID\tSOURCE\tEVENT ID\tSUBJECT\tSEQ\tATTEMPTS\tLAST FAILED\tREASON")
			}
			for {
				var page webhook.DeadLetterPage
				q := url.Values{"after": {strconv.FormatInt(after, 10)}, "limit": {strconv.Itoa(limit)}}
				raw, err := c.do(cmd.Context(), http.MethodGet, "dead-letters?"+q.Encode(), &page)
				if err != nil {
					return err
				}
				if asJSON {
					fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(raw)))
				} else {
					for _, d := range page.DeadLetters {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", d.ID, d.Source, d.EventID, d.Subject, d.Sequence, d.Attempts, d.LastFailed, d.Reason)
					}
				}
				if !all || page.Next == 0 {
					break
				}
				after = page.Next
			}
			return tw.Flush()
		},
	}
	list.Flags().Int64Var(&after, "after", 0, "list dead letters with an ID above this")
	list.Flags().IntVar(&limit, "limit", 100, "page size (1..1000)")
	list.Flags().BoolVar(&all, "all", false, "follow the pages to the end")

	requeue := &cobra.Command{
		Use:   "requeue ID...",
		Short: "Process dead letters again with the service's apply function",
		Long: `Each ID is processed in its own transaction, which removes the dead letter:
the event is applied (or parked), or dead-lettered again under a new ID with
its attempts added up. Exits non-zero if any ID could not be requeued.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			var ids []int64
			for _, a := range args {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id < 1 {
					return usageError{fmt.Errorf("dead letter id %q: want a positive integer", a)}
				}
				ids = append(ids, id)
			}
			var failed []error
			for _, id := range ids {
				var res webhook.Response
				raw, err := c.do(cmd.Context(), http.MethodPost, "dead-letters/"+strconv.FormatInt(id, 10)+"/requeue", &res)
				switch {
				case err != nil:
					failed = append(failed, fmt.Errorf("%d: %w", id, err))
				case asJSON:
					fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(raw)))
				default:
					line := fmt.Sprintf("%d: %s", id, res.Outcome)
					if len(res.Applied) > 0 {
						line += fmt.Sprintf(" applied %v", res.Applied)
					}
					if res.Reason != "" {
						line += " (" + res.Reason + ")"
					}
					fmt.Fprintln(cmd.OutOrStdout(), line)
				}
			}
			return errors.Join(failed...)
		},
	}

	var gapLimit int
	gaps := &cobra.Command{
		Use:   "gaps",
		Short: "List recorded gaps (snapshot: skipped; delta: held until filled or compensated)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			var out struct {
				Gaps []struct {
					Source, Subject, Mode string
					From, To              int64
					FirstSeen             string `json:"first_seen"`
				} `json:"gaps"`
			}
			raw, err := c.do(cmd.Context(), http.MethodGet, "gaps?limit="+strconv.Itoa(gapLimit), &out)
			if err != nil {
				return err
			}
			if asJSON {
				fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(raw)))
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "SOURCE\tSUBJECT\tMODE\tFROM\tTO\tFIRST SEEN")
			for _, g := range out.Gaps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", g.Source, g.Subject, g.Mode, g.From, g.To, g.FirstSeen)
			}
			return tw.Flush()
		},
	}
	gaps.Flags().IntVar(&gapLimit, "limit", 100, "how many gaps (1..1000)")

	cmd.AddCommand(list, requeue, gaps)
	return cmd
}

type adminClient struct {
	base *url.URL
	http *http.Client
}

// do calls the admin API and decodes a 200 answer into out; any other
// answer is an error carrying the problem's detail.
func (c *adminClient) do(ctx context.Context, method, rel string, out any) ([]byte, error) {
	u, err := c.base.Parse(rel)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var p struct{ Type, Title, Detail string }
		if json.Unmarshal(raw, &p) == nil && p.Title != "" {
			return nil, fmt.Errorf("%s: %s (%s) %s", u.Path, resp.Status, p.Title, p.Detail)
		}
		return nil, fmt.Errorf("%s: %s", u.Path, resp.Status)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, fmt.Errorf("%s: decoding the answer: %w", u.Path, err)
	}
	return raw, nil
}
