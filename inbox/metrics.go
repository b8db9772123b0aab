package inbox

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/internal/promreg"
)

// metrics are the processor's Prometheus metrics. They always exist (so the
// code never checks for nil) and are registered only when
// Config.Registerer is set.
type metrics struct {
	events       *prometheus.CounterVec
	gaps         *prometheus.CounterVec
	compensated  prometheus.Counter
	deadLetters  prometheus.Counter
	retries      prometheus.Counter
	backpressure prometheus.Counter
	unavailable  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_inbox_events_total",
			Help: "Events whose transaction committed, by outcome: processed, duplicate, stale, superseded, parked, dead_lettered.",
		}, []string{"outcome"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_inbox_gaps_total",
			Help: "Gaps recorded in streams, by mode: snapshot (skipped, the snapshot holds the facts) or delta (held until filled or compensated).",
		}, []string{"mode"}),
		compensated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_inbox_gaps_compensated_total",
			Help: "Delta gaps closed by the compensation hook after their deadline.",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_inbox_dead_letters_total",
			Help: "Dead letters written (the event's own, or a released parked event's).",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_inbox_apply_retries_total",
			Help: "Transactions rolled back and tried again after a transient apply failure.",
		}),
		backpressure: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_inbox_backpressure_total",
			Help: "Events refused (not acknowledged) because their stream had MaxParked events parked.",
		}),
		unavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idem_inbox_store_unavailable_total",
			Help: "Events not acknowledged because the store could not answer or the commit's outcome was unknown.",
		}),
	}
	for _, o := range []Outcome{OutcomeProcessed, OutcomeDuplicate, OutcomeStale, OutcomeSuperseded, OutcomeParked, OutcomeDeadLettered} {
		m.events.WithLabelValues(o.String())
	}
	m.gaps.WithLabelValues("snapshot")
	m.gaps.WithLabelValues("delta")
	if err := promreg.Register(reg, "inbox", "Processor", m.events, m.gaps, m.compensated, m.deadLetters, m.retries, m.backpressure, m.unavailable); err != nil {
		return nil, err
	}
	return m, nil
}

// observe counts a committed result.
func (m *metrics) observe(r Result) {
	if r.Outcome != 0 && !r.housekp {
		m.events.WithLabelValues(r.Outcome.String()).Inc()
	}
	if r.opened > 0 {
		m.gaps.WithLabelValues(r.mode.String()).Add(float64(r.opened))
	}
	m.deadLetters.Add(float64(len(r.DeadLetters)))
}
