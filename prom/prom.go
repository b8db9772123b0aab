package prom

import (
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/proxy"
	"github.com/idemhq/idem/webhook"
)

var (
	// ErrBadConfig is wrapped by the error of a function given a nil
	// Registerer.
	ErrBadConfig = errors.New("prom: bad config")
	// ErrAlreadyRegistered is wrapped by the error of a function whose
	// registry already holds the metrics of a component of the same kind.
	ErrAlreadyRegistered = errors.New("prom: already registered")
)

// Inbox registers the idem_inbox_* metrics on reg and returns the hooks
// that feed them, for inbox.Config.Hooks.
func Inbox(reg prometheus.Registerer) (inbox.Hooks, error) {
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_inbox_events_total",
		Help: "Events whose transaction committed, by outcome: processed, duplicate, stale, superseded, parked, dead_lettered.",
	}, []string{"outcome"})
	gaps := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_inbox_gaps_total",
		Help: "Gaps recorded in streams, by mode: snapshot (skipped, the snapshot holds the facts) or delta (held until filled or compensated).",
	}, []string{"mode"})
	compensated := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_inbox_gaps_compensated_total",
		Help: "Delta gaps closed by the compensation hook after their deadline.",
	})
	deadLetters := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_inbox_dead_letters_total",
		Help: "Dead letters written (the event's own, or a released parked event's).",
	})
	retries := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_inbox_apply_retries_total",
		Help: "Transactions rolled back and tried again after a transient apply failure.",
	})
	backpressure := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_inbox_backpressure_total",
		Help: "Events refused (not acknowledged) because their stream had MaxParked events parked.",
	})
	unavailable := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_inbox_store_unavailable_total",
		Help: "Events not acknowledged because the store could not answer or the commit's outcome was unknown.",
	})
	batches := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_inbox_batches_total",
		Help: "Batches of events in one transaction (inbox.Config.Batch), by result: committed, or abandoned (nothing committed, each event run again alone).",
	}, []string{"result"})
	batchEvents := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_inbox_batch_events_total",
		Help: "Events in those batches, by the batch's result: divided by idem_inbox_batches_total, the mean batch size.",
	}, []string{"result"})
	// Every label value exists from the start, so that rate() sees a zero
	// first.
	for _, r := range []string{"committed", "abandoned"} {
		batches.WithLabelValues(r)
		batchEvents.WithLabelValues(r)
	}
	for _, o := range []inbox.Outcome{inbox.OutcomeProcessed, inbox.OutcomeDuplicate, inbox.OutcomeStale,
		inbox.OutcomeSuperseded, inbox.OutcomeParked, inbox.OutcomeDeadLettered} {
		events.WithLabelValues(o.String())
	}
	gaps.WithLabelValues(order.ModeSnapshot.String())
	gaps.WithLabelValues(order.ModeDelta.String())
	if err := register(reg, "inbox", "Processor", events, gaps, compensated, deadLetters, retries, backpressure, unavailable, batches, batchEvents); err != nil {
		return inbox.Hooks{}, err
	}
	return inbox.Hooks{
		OnEvent:        func(r inbox.Result) { events.WithLabelValues(r.Outcome.String()).Inc() },
		OnGaps:         func(m order.Mode, n int) { gaps.WithLabelValues(m.String()).Add(float64(n)) },
		OnDeadLetters:  func(n int) { deadLetters.Add(float64(n)) },
		OnCompensated:  compensated.Inc,
		OnRetry:        retries.Inc,
		OnBackpressure: backpressure.Inc,
		OnUnavailable:  unavailable.Inc,
		OnBatch: func(n int, committed bool) {
			r := "abandoned"
			if committed {
				r = "committed"
			}
			batches.WithLabelValues(r).Inc()
			batchEvents.WithLabelValues(r).Add(float64(n))
		},
	}, nil
}

// Outbox registers the idem_outbox_* metrics on reg and returns the hooks
// that feed them, for outbox.Config.Hooks.
func Outbox(reg prometheus.Registerer) (outbox.Hooks, error) {
	deliveries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_outbox_deliveries_total",
		Help: "Delivery attempts by target and result: done, retry, dead, disable.",
	}, []string{"target", "result"})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "idem_outbox_attempt_duration_seconds",
		Help:    "Time of one delivery attempt, from the claim to the recorded result.",
		Buckets: prometheus.DefBuckets,
	})
	fenced := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_outbox_fenced_total",
		Help: "Results not recorded because another relay had taken the intent over (this relay outlived its lease).",
	})
	unknown := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_outbox_unknown_outcomes_total",
		Help: "Attempts that got no answer (timeout, reset): the next attempt re-sends with the same key.",
	})
	if err := register(reg, "outbox", "Relay", deliveries, duration, fenced, unknown); err != nil {
		return outbox.Hooks{}, err
	}
	return outbox.Hooks{
		OnAttempt: func(target, result string, d time.Duration) {
			deliveries.WithLabelValues(target, result).Inc()
			duration.Observe(d.Seconds())
		},
		OnFenced:  fenced.Inc,
		OnUnknown: unknown.Inc,
	}, nil
}

// Webhook registers the idem_webhook_* metrics on reg and returns the
// hooks that feed them, for webhook.Config.Hooks. The inbox behind the
// endpoint has its own (Inbox).
func Webhook(reg prometheus.Registerer) (webhook.Hooks, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_webhook_requests_total",
		Help: "Webhook requests by result: an inbox outcome (processed, duplicate, stale, superseded, parked, dead_lettered) or a problem slug (signature-invalid, event-malformed, store-unavailable, ...).",
	}, []string{"result"})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "idem_webhook_request_duration_seconds",
		Help:    "Time from the request to its answer, including the transaction.",
		Buckets: prometheus.DefBuckets,
	})
	if err := register(reg, "webhook", "Handler", requests, duration); err != nil {
		return webhook.Hooks{}, err
	}
	return webhook.Hooks{
		OnRequest: func(result string, d time.Duration) {
			requests.WithLabelValues(result).Inc()
			duration.Observe(d.Seconds())
		},
	}, nil
}

// ProxyMetrics are the idem_proxy_* metrics of one proxy: Hooks for
// proxy.Config.Hooks feed the counters, and the gauges read the proxy
// given to Watch (zero until then).
type ProxyMetrics struct {
	// Hooks feed the counters and histograms; set them as
	// proxy.Config.Hooks.
	Hooks proxy.Hooks
	p     atomic.Pointer[proxy.Proxy]
}

// Watch makes the gauges read p's Stats.
func (m *ProxyMetrics) Watch(p *proxy.Proxy) { m.p.Store(p) }

func (m *ProxyMetrics) stats() proxy.Stats {
	if p := m.p.Load(); p != nil {
		return p.Stats()
	}
	return proxy.Stats{}
}

// Proxy registers the idem_proxy_* metrics on reg. Set the result's Hooks
// as proxy.Config.Hooks, then Watch the proxy that New returns:
//
//	m, err := prom.Proxy(reg)
//	p, err := proxy.New(&proxy.Config{..., Hooks: m.Hooks})
//	m.Watch(p)
func Proxy(reg prometheus.Registerer) (*ProxyMetrics, error) {
	m := &ProxyMetrics{}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_proxy_requests_total",
		Help: "Requests that took part in idempotency (unsafe method, principal, key), by outcome: executed, replayed, in_flight, unknown, conflict, unavailable, ...; passed-through requests count as passthrough.",
	}, []string{"outcome"})
	upstreamLatency := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "idem_proxy_upstream_duration_seconds",
		Help:    "Time from sending a request upstream to its response headers (or error).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	upstreamErrors := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_proxy_upstream_errors_total",
		Help: "Upstream calls that got no response, by kind: unreachable (never sent; claim released) or unknown (sent, answer lost; key held until its lease ends).",
	}, []string{"kind"})
	// Both kinds exist from the start, so that rate() sees a zero first.
	upstreamErrors.WithLabelValues(proxy.UpstreamUnreachable)
	upstreamErrors.WithLabelValues(proxy.UpstreamUnknown)
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_proxy_in_flight_requests",
		Help: "Requests being served by the proxy right now.",
	}, func() float64 { return float64(m.stats().InFlight) })
	recording := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_proxy_recording_answers",
		Help: "Upstream answers the store did not take when they came, still being recorded (their keys stay held).",
	}, func() float64 { return float64(m.stats().Recording) })
	buffered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_proxy_buffered_body_bytes",
		Help: "Bytes of request and response bodies held in memory beyond each one's allowance (the memory budget's use).",
	}, func() float64 { return float64(m.stats().BufferedBytes) })
	if err := register(reg, "proxy", "Proxy", requests, upstreamLatency, upstreamErrors, inFlight, recording, buffered); err != nil {
		return nil, err
	}
	m.Hooks = proxy.Hooks{
		OnOutcome:       func(o httpidem.Outcome) { requests.WithLabelValues(string(o)).Inc() },
		OnUpstream:      func(d time.Duration) { upstreamLatency.Observe(d.Seconds()) },
		OnUpstreamError: func(kind string) { upstreamErrors.WithLabelValues(kind).Inc() },
	}
	return m, nil
}

// Middleware registers idem_http_requests_total{outcome} on reg and returns
// the function for httpidem.Config.OnOutcome that feeds it.
func Middleware(reg prometheus.Registerer) (func(*http.Request, httpidem.Outcome), error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_http_requests_total",
		Help: "Requests that took part in idempotency (participating method, principal, key), by the middleware's outcome: executed, replayed, in_flight, conflict, unavailable, ...",
	}, []string{"outcome"})
	if err := register(reg, "httpidem", "Middleware", requests); err != nil {
		return nil, err
	}
	return func(_ *http.Request, o httpidem.Outcome) { requests.WithLabelValues(string(o)).Inc() }, nil
}
