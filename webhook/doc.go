// Package webhook is the receiving endpoint of signed CloudEvents: one
// http.Handler that composes package signature (origin), package event
// (CloudEvents 1.0 through the official SDK, the sequence extension,
// ownership) and package inbox (dedup, order, apply, dead letters) in this
// order:
//
//	POST only → body ≤ MaxBody → signature over the raw body → CloudEvent →
//	ownership → inbox + order + apply in one transaction → commit → answer
//
// Nothing is acknowledged before its commit: every 200 is written after the
// transaction that recorded the event committed, and any answer other than
// 200 means "not recorded, retry" (5xx) or "never acceptable" (4xx).
//
// # Answers
//
//	| case                                             | status | problem type slug      |
//	|--------------------------------------------------|--------|------------------------|
//	| processed, parked, duplicate, stale, superseded  | 200    | (JSON Response)        |
//	| dead-lettered (invalid, or out of retries)       | 200    | (Response with reason) |
//	| not POST                                         | 405    | method-not-allowed     |
//	| body over MaxBody (before the signature)         | 413    | body-too-large         |
//	| the body could not be read                       | 400    | body-unreadable        |
//	| signature headers missing, repeated, unparsable  | 400    | signature-malformed    |
//	| no signature matches any secret                  | 401    | signature-invalid      |
//	| a matching signature outside the time window     | 401    | signature-expired      |
//	| not a CloudEvent 1.0 (or batch mode)             | 400    | event-malformed        |
//	| sequence missing or not a decimal integer ≥ 1    | 400    | event-bad-sequence     |
//	| the event's source is not this endpoint's        | 403    | event-not-owned        |
//	| store down or commit outcome unknown             | 503 + Retry-After | store-unavailable |
//	| MaxParked events already wait behind a gap       | 503 + Retry-After | stream-backlog-full |
//	| the store's tables are inconsistent              | 500    | internal-error         |
//
// Problems are RFC 9457 application/problem+json, type
// "https://idem.dev/problems/<slug>" (Config.ProblemBase); docs/http.md
// lists them with the admin API's. A dead letter is answered 200 so that
// the sender stops retrying something no retry fixes; it is kept (reason,
// event, attempts) and can be requeued through Admin.
// A malformed event is 400 and not stored: it has no trustworthy identity to
// dedup or requeue by.
//
// The signature proves origin; the inbox stops replays. New refuses an
// inbox Retention shorter than twice the signature tolerance, so that a
// message replayed anywhere inside its signature window is a duplicate.
//
// # Metrics
//
// Config.Hooks are told of every request's result (an outcome or a slug)
// and duration; prom.Webhook turns them into
// idem_webhook_requests_total{result} and
// idem_webhook_request_duration_seconds, and prom.Inbox the inbox's own
// (outcomes, gaps by mode, compensations, dead letters, retries).
package webhook
