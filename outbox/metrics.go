package outbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/promreg"
)

// metrics are the relay's Prometheus metrics; they always exist and are
// registered only when Config.Registerer is set.
type metrics struct {
	deliveries *prometheus.CounterVec
	duration   prometheus.Histogram
	fenced     prometheus.Counter
	unknown    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_outbox_deliveries_total",
			Help: "Delivery attempts by target and result: done, retry, dead, disable.",
		}, []string{"target", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_outbox_attempt_duration_seconds",
			Help:    "Time of one delivery attempt, from the claim to the recorded result.",
			Buckets: prometheus.DefBuckets,
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_outbox_fenced_total",
			Help: "Results not recorded because another relay had taken the intent over (this relay outlived its lease).",
		}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_outbox_unknown_outcomes_total",
			Help: "Attempts that got no answer (timeout, reset): the next attempt re-sends with the same key.",
		}),
	}
	if err := promreg.Register(reg, "outbox", "Relay", m.deliveries, m.duration, m.fenced, m.unknown); err != nil {
		return nil, err
	}
	return m, nil
}
