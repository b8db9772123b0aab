package outbox

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
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
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.duration, m.fenced, m.unknown} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("outbox: Config.Registerer already holds the outbox's metrics: give each Relay its own registry")
			}
			return nil, err
		}
	}
	return m, nil
}
