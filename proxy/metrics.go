package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/promreg"
)

// Upstream error kinds, the values of the "kind" label of
// idem_proxy_upstream_errors_total.
const (
	// kindUnreachable: the request never reached the upstream (dial
	// refused, DNS failure, TLS handshake, timeout before it was written).
	kindUnreachable = "unreachable"
	// kindUnknown: the request was written and its answer was lost
	// (timeout, connection reset, malformed or truncated response).
	kindUnknown = "unknown"
)

// metrics are the proxy's Prometheus metrics. They always exist (so the
// code never checks for nil) and are registered only when
// Config.Registerer is set.
type metrics struct {
	requests        *prometheus.CounterVec
	upstreamLatency prometheus.Histogram
	upstreamErrors  *prometheus.CounterVec
	inFlight        prometheus.Gauge
	// recording and buffered read the guard and the middleware; New sets
	// them before the proxy serves.
	recording func() int
	buffered  func() int64
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		recording: func() int { return 0 },
		buffered:  func() int64 { return 0 },
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_proxy_requests_total",
			Help: "Requests that took part in idempotency (unsafe method, principal, key), by outcome: executed, replayed, in_flight, unknown, conflict, unavailable, ...; passed-through requests count as passthrough.",
		}, []string{"outcome"}),
		upstreamLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_proxy_upstream_duration_seconds",
			Help:    "Time from sending a request upstream to its response headers (or error).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_proxy_upstream_errors_total",
			Help: "Upstream calls that got no response, by kind: unreachable (never sent; claim released) or unknown (sent, answer lost; key held until its lease ends).",
		}, []string{"kind"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_proxy_in_flight_requests",
			Help: "Requests being served by the proxy right now.",
		}),
	}
	// Both kinds exist from the start, so that rate() sees a zero first.
	m.upstreamErrors.WithLabelValues(kindUnreachable)
	m.upstreamErrors.WithLabelValues(kindUnknown)
	recording := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_proxy_recording_answers",
		Help: "Upstream answers the store did not take when they came, still being recorded (their keys stay held).",
	}, func() float64 { return float64(m.recording()) })
	buffered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_proxy_buffered_body_bytes",
		Help: "Bytes of request and response bodies held in memory beyond each one's allowance (the memory budget's use).",
	}, func() float64 { return float64(m.buffered()) })
	if err := promreg.Register(reg, "proxy", "Proxy", m.requests, m.upstreamLatency, m.upstreamErrors, m.inFlight, recording, buffered); err != nil {
		return nil, err
	}
	return m, nil
}
