// Package prom counts what idem's components do in Prometheus metrics.
//
// The components themselves know no metrics library: each takes Hooks in
// its Config (inbox.Config.Hooks, outbox.Config.Hooks,
// webhook.Config.Hooks, proxy.Config.Hooks, httpidem.Config.OnOutcome)
// and calls them as it works. This package is the one place that turns
// those calls into Prometheus metrics, so a program that uses another
// metrics system imports no Prometheus at all, and one that uses
// Prometheus writes a line per component:
//
//	reg := prometheus.NewRegistry()
//	hooks, err := prom.Inbox(reg) // idem_inbox_*
//	...
//	p, err := inbox.New(st, apply, &inbox.Config{Hooks: hooks})
//
// Each function registers its metrics on the registry it is given and
// returns the hooks that feed them. A registry holds one component of each
// kind: a second one is refused with ErrAlreadyRegistered (use a registry
// per component, or prometheus.WrapRegistererWith to tell them apart by a
// label).
//
// The metrics, by component:
//
//	inbox     idem_inbox_events_total{outcome}, idem_inbox_gaps_total{mode},
//	          idem_inbox_gaps_compensated_total, idem_inbox_dead_letters_total,
//	          idem_inbox_apply_retries_total, idem_inbox_backpressure_total,
//	          idem_inbox_store_unavailable_total, idem_inbox_batches_total{result},
//	          idem_inbox_batch_events_total{result}
//	outbox    idem_outbox_deliveries_total{target,result},
//	          idem_outbox_attempt_duration_seconds, idem_outbox_fenced_total,
//	          idem_outbox_unknown_outcomes_total
//	webhook   idem_webhook_requests_total{result},
//	          idem_webhook_request_duration_seconds
//	proxy     idem_proxy_requests_total{outcome},
//	          idem_proxy_upstream_duration_seconds,
//	          idem_proxy_upstream_errors_total{kind},
//	          idem_proxy_in_flight_requests, idem_proxy_recording_answers,
//	          idem_proxy_buffered_body_bytes
//	httpidem  idem_http_requests_total{outcome}
package prom
