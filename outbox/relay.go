package outbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/internal/loop"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
)

// Relay delivers the outbox's intents: it claims due rows with a lease and
// an epoch, sends each with its stored idempotency key, and records the
// result fenced by the claim. Several relays (processes) may share one
// store. Safe for concurrent use.
type Relay[TX any] struct {
	s       store.OutboxStore[TX]
	cfg     Config
	targets map[string]*Target
	log     *slog.Logger
	hooks   Hooks
	nudge   chan struct{}
}

// New returns a relay over s.
func New[TX any](s store.OutboxStore[TX], cfg *Config) (*Relay[TX], error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil store", ErrBadConfig)
	}
	c, targets, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Relay[TX]{s: s, cfg: c, targets: targets, log: c.Logger, hooks: c.Hooks, nudge: make(chan struct{}, 1)}, nil
}

// EnqueueTx writes the intent in tx, the caller's business transaction: it
// exists if and only if tx commits. Its idempotency key is computed now by
// the target's template and stored with it (as a header), so every attempt
// sends the same key whatever happens to the relay or its configuration. An
// intent whose key cannot be computed (a missing field) is refused with
// ErrBadIntent, inside the business transaction, where the caller can still
// roll back. Call Notify after the commit to wake an in-process relay.
func (r *Relay[TX]) EnqueueTx(ctx context.Context, tx TX, in Intent) (id int64, err error) {
	t := r.targets[in.Target]
	switch {
	case t == nil:
		return 0, fmt.Errorf("%w: unknown target %q", ErrBadIntent, in.Target)
	case in.Method == "":
		return 0, fmt.Errorf("%w: no method", ErrBadIntent)
	case in.Path != "" && !strings.HasPrefix(in.Path, "/"):
		return 0, fmt.Errorf("%w: path %q must start with /", ErrBadIntent, in.Path)
	}
	row := store.Intent{
		Target: in.Target, Method: in.Method, Path: in.Path, Body: in.Body,
		Metadata: in.Metadata, Stream: in.Stream, DueAt: in.NotBefore,
	}
	k, err := keyOf(t, row)
	if err != nil {
		return 0, fmt.Errorf("%w: target %q: key template: %w", ErrBadIntent, in.Target, err)
	}
	row.Headers = make(map[string]string, len(in.Headers)+1)
	for name, v := range in.Headers {
		row.Headers[http.CanonicalHeaderKey(name)] = v
	}
	row.Headers[http.CanonicalHeaderKey(t.KeyHeader)] = k
	now := r.cfg.Now()
	if row.DueAt.IsZero() {
		row.DueAt = now
	}
	row.EnqueuedAt = now
	id, _, err = r.s.EnqueueTx(ctx, tx, row)
	return id, err
}

// Notify wakes the relay's Run loop (after committing intents in this
// process) so that it does not wait for its poll interval.
func (r *Relay[TX]) Notify() {
	select {
	case r.nudge <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends: it claims a batch, delivers it (up to
// Concurrency at once), and claims again at once when the batch was full;
// otherwise it sleeps until woken (the store's notifications, Notify) or
// PollInterval passes. Store errors are logged and retried after
// PollInterval. It returns ctx's error.
func (r *Relay[TX]) Run(ctx context.Context) error {
	var wake <-chan struct{}
	if w, ok := any(r.s).(store.OutboxWaker); ok {
		if ch, err := w.OutboxWakeups(ctx); err == nil {
			wake = ch
		} else {
			r.log.WarnContext(ctx, "outbox: no wake-ups from the store, polling", "error", err)
		}
	}
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			r.log.ErrorContext(ctx, "outbox: claim failed", "error", err)
		}
		if err == nil && n == r.cfg.Batch {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.nudge:
		case _, ok := <-wake:
			if !ok { // the listening connection ended: poll until it comes back
				wake = nil
				if w, ok := any(r.s).(store.OutboxWaker); ok {
					if ch, err := w.OutboxWakeups(ctx); err == nil {
						wake = ch
					}
				}
			}
		case <-time.After(r.cfg.PollInterval):
		}
	}
}

// RunOnce claims one batch of due intents, delivers them and records their
// results, and returns how many it claimed.
func (r *Relay[TX]) RunOnce(ctx context.Context) (int, error) {
	skip, err := r.s.DisabledTargets(ctx)
	if err != nil {
		return 0, err
	}
	claimed, err := r.s.ClaimIntents(ctx, store.OutboxClaim{Owner: rand.Text(), Now: r.cfg.Now(), Lease: r.cfg.Lease, Limit: r.cfg.Batch, Skip: skip})
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	done := make([]delivered, len(claimed))
	for i, in := range claimed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			done[i] = r.deliver(ctx, in)
		})
	}
	wg.Wait()
	r.recordDone(ctx, claimed, done)
	return len(claimed), nil
}

// delivered is a delivery whose completion waits to be recorded with the
// batch's others.
type delivered struct {
	ok     bool // the target took it: record it done
	status int
	start  time.Time
}

// recordDone records the batch's completed deliveries: together, in one
// round trip and one commit, when the store can (store.OutboxBatcher),
// else one by one. Each keeps its own fence: one taken over by another
// relay is reported alone.
func (r *Relay[TX]) recordDone(ctx context.Context, claimed []store.Intent, done []delivered) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	now := r.cfg.Now()
	var fences []store.IntentFence
	var statuses []int
	var at []int
	for i, d := range done {
		if d.ok {
			fences, statuses, at = append(fences, claimed[i].Fence()), append(statuses, d.status), append(at, i)
		}
	}
	if len(at) == 0 {
		return
	}
	errs := make([]error, len(at))
	b, batched := any(r.s).(store.OutboxBatcher)
	if batched && len(at) > 1 {
		var err error
		if errs, err = b.CompleteIntents(ctx, fences, statuses, now); err != nil {
			errs = make([]error, len(at))
			for j := range errs {
				errs[j] = err
			}
		}
	} else {
		for j, f := range fences {
			errs[j] = r.s.CompleteIntent(ctx, f, statuses[j], now)
		}
	}
	for j, i := range at {
		r.recorded(ctx, claimed[i], "done", "", done[i].start, errs[j])
	}
}

// Drain runs RunOnce until nothing is due (for tests and batch jobs).
func (r *Relay[TX]) Drain(ctx context.Context) error {
	for {
		n, err := r.RunOnce(ctx)
		if err != nil || n == 0 {
			return err
		}
	}
}

// recordTimeout bounds the recording of one result.
const recordTimeout = 10 * time.Second

// outcome is what to record for one attempt.
type outcome struct {
	kind    string // done, retry, dead, disable
	status  int
	after   time.Duration // retry: delay from the server (Retry-After), 0: backoff
	message string
}

// deliver makes one attempt and records its outcome, fenced; a success is
// returned for recordDone to record with the batch's others.
func (r *Relay[TX]) deliver(ctx context.Context, in store.Intent) delivered {
	start := time.Now()
	t := r.targets[in.Target]
	var o outcome
	switch {
	case t == nil:
		o = outcome{kind: "dead", message: fmt.Sprintf("unknown target %q (not configured in this relay)", in.Target)}
	case in.Attempts > r.cfg.MaxAttempts:
		// Every claim spends an attempt, and the budget is checked when a
		// failure is recorded; an intent whose relays died before recording
		// anything would otherwise be claimed for ever.
		o = outcome{kind: "dead", message: fmt.Sprintf("out of budget: claimed %d times, the last %d without a recorded result (relays died while delivering it)",
			in.Attempts, in.Attempts-r.cfg.MaxAttempts)}
	default:
		o = r.attempt(ctx, t, in)
	}
	if ctx.Err() != nil && o.kind == "retry" {
		return delivered{} // shutting down: the lease ends and another attempt follows
	}
	if o.kind == "done" {
		return delivered{ok: true, status: o.status, start: start}
	}
	now := r.cfg.Now()
	// The result is recorded even when ctx ended meanwhile (shutdown): the
	// target may have acted, and recording it spares a needless re-send.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	ctx = rctx
	var err error
	switch o.kind {
	case "disable":
		due := now // held by the disabled target until it is enabled again
		if derr := r.s.DisableTarget(ctx, in.Target, o.message, now); derr != nil {
			// Not disabled: put the intent back after a backoff, or it would
			// be claimed at once and meet the 410 again and again.
			r.log.ErrorContext(ctx, "outbox: disabling target failed; the intent waits a backoff", "target", in.Target, "error", derr)
			due = now.Add(r.backoff(in.Attempts))
		} else {
			r.log.WarnContext(ctx, "outbox: target disabled (410 Gone): its intents wait until it is enabled again", "target", in.Target)
		}
		err = r.s.RetryIntent(ctx, in.Fence(), due, o.message)
	case "retry":
		if in.Attempts >= r.cfg.MaxAttempts {
			o.kind = "dead"
			o.message = fmt.Sprintf("out of budget after %d attempts; last: %s", in.Attempts, o.message)
			err = r.s.KillIntent(ctx, in.Fence(), o.message, now)
			break
		}
		delay := o.after
		if delay == 0 {
			delay = r.backoff(in.Attempts)
		}
		err = r.s.RetryIntent(ctx, in.Fence(), now.Add(delay), o.message)
	default:
		err = r.s.KillIntent(ctx, in.Fence(), o.message, now)
	}
	r.recorded(ctx, in, o.kind, o.message, start, err)
	return delivered{}
}

// recorded reports how recording in's result (kind) went: err is the
// recording's error.
func (r *Relay[TX]) recorded(ctx context.Context, in store.Intent, kind, message string, start time.Time, err error) {
	r.hooks.OnAttempt(in.Target, kind, time.Since(start))
	switch {
	case errors.Is(err, store.ErrFenced):
		r.hooks.OnFenced()
		r.log.WarnContext(ctx, "outbox: result not recorded: another relay took the intent over (this one outlived its lease)",
			"intent", in.ID, "epoch", in.Epoch, "result", kind)
	case err != nil:
		r.log.ErrorContext(ctx, "outbox: recording the result failed; the lease will end and the intent be tried again with the same key",
			"intent", in.ID, "result", kind, "error", err)
	case kind == "dead":
		r.log.WarnContext(ctx, "outbox: intent dead", "intent", in.ID, "target", in.Target, "attempts", in.Attempts, "reason", message)
	}
}

// attempt sends the intent once (after Read-Verify-Write's check) and
// classifies the answer with the target's policy.
func (r *Relay[TX]) attempt(ctx context.Context, t *Target, in store.Intent) outcome {
	key := in.Headers[http.CanonicalHeaderKey(t.KeyHeader)]
	if t.Verify != nil {
		found, err := t.Verify(ctx, in)
		if err != nil {
			return outcome{kind: "retry", message: "read-verify-write: verify failed: " + err.Error()}
		}
		if found {
			r.log.InfoContext(ctx, "outbox: effect found by read-verify-write; not written again", "intent", in.ID, "key", key)
			return outcome{kind: "done", status: http.StatusOK}
		}
	}
	base, signer := t.URL, t.Signer
	if t.Route != nil {
		var err error
		if base, signer, err = t.Route(ctx, in); err != nil {
			return outcome{kind: "retry", message: "route: " + err.Error()}
		}
	}
	actx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, in.Method, strings.TrimSuffix(base, "/")+in.Path, bytes.NewReader(in.Body))
	if err != nil {
		return outcome{kind: "dead", message: "building the request: " + err.Error()}
	}
	for name, v := range in.Headers {
		req.Header.Set(name, v)
	}
	if t.Events != nil {
		ev := event.Event{ID: key, Source: t.Events.Source, Type: t.Events.Type, Subject: in.Stream, Sequence: in.Sequence,
			DataContentType: in.Headers["Content-Type"], Data: in.Body}
		hdr, body, err := event.ToHTTP(ev, event.ModeBinary)
		if err != nil {
			return outcome{kind: "dead", message: "building the CloudEvent: " + err.Error()}
		}
		for name, vs := range hdr {
			req.Header[name] = vs
		}
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	if signer != nil {
		var opts *signature.SignOpts
		if signer.Scheme() == signature.SchemeStandard {
			opts = &signature.SignOpts{ID: key}
		}
		body, _ := req.GetBody()
		b, _ := io.ReadAll(body)
		sig, err := signer.Sign(b, opts)
		if err != nil {
			return outcome{kind: "dead", message: "signing: " + err.Error()}
		}
		for name, vs := range sig {
			req.Header[name] = vs
		}
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		// Sent or not, we cannot tell: the outcome is unknown. The retry
		// carries the same key, so a target that honours it dedups.
		r.hooks.OnUnknown()
		next := "re-attempting later with the same key"
		if in.Attempts >= r.cfg.MaxAttempts {
			next = "the budget is spent, so the intent goes dead (it may have taken effect)"
		}
		r.log.WarnContext(ctx, "outbox: outcome unknown (no answer); "+next,
			"intent", in.ID, "target", t.Name, "key", key, "attempt", in.Attempts, "error", err)
		return outcome{kind: "retry", message: "no answer: " + err.Error()}
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return classify(t, resp.StatusCode, resp.Header.Get("Retry-After"), r.cfg.Now(), head)
}

// classify applies the target's response policy (see the package doc).
func classify(t *Target, status int, retryAfter string, now time.Time, head []byte) outcome {
	msg := fmt.Sprintf("%d %s", status, http.StatusText(status))
	switch {
	case status >= 200 && status < 300:
		return outcome{kind: "done", status: status}
	case status >= 300 && status < 400:
		return outcome{kind: "dead", status: status, message: msg + ": redirects are not followed (fix the target's URL)"}
	case status == http.StatusConflict && t.Conflict == ConflictDone:
		return outcome{kind: "done", status: status}
	case status == http.StatusConflict:
		return outcome{kind: "retry", status: status, message: msg + ": in progress"}
	case status == http.StatusGone:
		return outcome{kind: "disable", status: status, message: msg + ": target disabled"}
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		return outcome{kind: "retry", status: status, after: parseRetryAfter(retryAfter, now), message: msg}
	case status == http.StatusRequestTimeout || status >= 500:
		return outcome{kind: "retry", status: status, message: msg}
	case t.ClientErrors == ClientErrorsComplete:
		return outcome{kind: "done", status: status}
	default:
		m := msg
		if len(head) > 0 {
			m += ": " + strings.ToValidUTF8(string(head), "?")
		}
		return outcome{kind: "dead", status: status, message: m}
	}
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or
// unreadable (the backoff applies). It is capped at a day.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		d = time.Duration(min(s, 86400)) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), 24*time.Hour)
}

// backoff is the delay after attempt n (from 1): Backoff doubled n-1 times,
// capped, with full jitter over its upper half.
func (r *Relay[TX]) backoff(n int) time.Duration {
	d := r.cfg.Backoff
	for i := 1; i < n && d < r.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.cfg.MaxBackoff)
	return d/2 + mrand.N(d/2+1)
}

// RunSweeper calls Sweep every Config.SweepInterval until ctx ends, logging
// errors, so that done intents do not pile up. Several relays may run it on
// one store. It returns ctx's error.
func (r *Relay[TX]) RunSweeper(ctx context.Context) error {
	return loop.Every(ctx, r.cfg.SweepInterval, func() bool {
		if n, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.log.ErrorContext(ctx, "outbox: sweep failed", "error", err)
		} else if n > 0 {
			r.log.DebugContext(ctx, "outbox: swept done intents", "deleted", n)
		}
		return false
	})
}

// Sweep deletes done intents older than Retention, in batches.
func (r *Relay[TX]) Sweep(ctx context.Context) (int, error) {
	before := r.cfg.Now().Add(-r.cfg.Retention)
	total := 0
	for {
		n, err := r.s.SweepIntents(ctx, before, 1000)
		total += n
		if err != nil || n < 1000 {
			return total, err
		}
	}
}
