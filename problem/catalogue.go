package problem

// The catalogue: every problem type idem answers, by slug.
const (
	// The Idempotency-Key contract: the httpidem middleware, and the proxy
	// in front of an upstream.

	SlugKeyMissing               = "idempotency-key-missing"
	SlugKeyInvalid               = "idempotency-key-invalid"
	SlugBodyInvalidJSON          = "body-invalid-json"
	SlugBodyTimeout              = "body-timeout"
	SlugMethodInvalid            = "method-invalid"
	SlugEncodingNotAcceptable    = "encoding-not-acceptable"
	SlugServerBusy               = "server-busy"
	SlugKeyReused                = "idempotency-key-reused"
	SlugRequestInFlight          = "request-in-flight"
	SlugOutcomeUnknown           = "outcome-unknown"
	SlugResponseNotStored        = "response-not-stored"
	SlugStoredResponseUnreadable = "stored-response-unreadable"

	// Every surface: the middleware, the proxy, the webhook receiver (and,
	// for store-unavailable, its admin API).

	SlugBodyTooLarge     = "body-too-large"
	SlugBodyUnreadable   = "body-unreadable"
	SlugStoreUnavailable = "store-unavailable"

	// The proxy, before the middleware or when the upstream fails.

	// SlugFramingAmbiguous: the request had both Content-Length and
	// Transfer-Encoding, or came on a connection whose framing could not be
	// followed; the connection is closed.
	SlugFramingAmbiguous = "request-framing-ambiguous"
	// SlugProxyClosed: the proxy is shutting down.
	SlugProxyClosed = "proxy-closed"
	// SlugPathInvalid: the path has a "." or ".." segment.
	SlugPathInvalid = "path-invalid"
	// SlugHeaderRepeated: the caller's header came twice with different
	// values.
	SlugHeaderRepeated = "header-repeated"
	// SlugUpstreamUnreachable: the request never reached the upstream;
	// nothing happened there.
	SlugUpstreamUnreachable = "upstream-unreachable"
	// SlugUpstreamOutcomeUnknown: the request reached the upstream and its
	// answer was lost.
	SlugUpstreamOutcomeUnknown = "upstream-outcome-unknown"

	// The webhook receiver and its admin API.

	SlugMethodNotAllowed   = "method-not-allowed"
	SlugSignatureMalformed = "signature-malformed"
	SlugSignatureInvalid   = "signature-invalid"
	SlugSignatureExpired   = "signature-expired"
	SlugEventMalformed     = "event-malformed"
	SlugEventBadSequence   = "event-bad-sequence"
	SlugEventNotOwned      = "event-not-owned"
	SlugStreamBacklogFull  = "stream-backlog-full"
	SlugInternal           = "internal-error"
	SlugBadParameter       = "bad-parameter"
	SlugDeadLetterNotFound = "dead-letter-not-found"

	// idem serve: tasks, executions and workers.

	SlugUnauthorized        = "unauthorized"
	SlugApplicationDisabled = "application-disabled"
	SlugNotFound            = "not-found"
	SlugUnknownTaskType     = "unknown-task-type"
	SlugIllegalTransition   = "illegal-transition"
	SlugFenced              = "fenced"
	SlugCursorInvalid       = "cursor-invalid"
	SlugRequestInvalid      = "request-invalid"

	// idem serve: workflows.

	SlugDefinitionInvalid = "definition-invalid"
	// SlugForceNewExecutionNotAllowed: a production trigger asked for
	// forceNewExecution, which only a test run has.
	SlugForceNewExecutionNotAllowed = "force-new-execution-not-allowed"
	// SlugTriggerInvalid: a trigger whose payload the workflow cannot
	// run: an idempotency field missing, a clientIdempotencyId out of
	// form, no edge from the ENTRY_POINT that holds, a key that cannot be
	// computed.
	SlugTriggerInvalid = "trigger-invalid"
)

// titles holds every catalogued slug's title.
var titles = map[string]string{
	SlugKeyMissing:               "Idempotency-Key header missing",
	SlugKeyInvalid:               "Idempotency-Key header invalid",
	SlugBodyInvalidJSON:          "Request body cannot be fingerprinted as JSON",
	SlugBodyTimeout:              "Request body not received in time",
	SlugMethodInvalid:            "Method name in the wrong case",
	SlugEncodingNotAcceptable:    "The stored response's encoding is not acceptable",
	SlugServerBusy:               "Too many request bodies in memory",
	SlugKeyReused:                "Idempotency-Key reused with a different request",
	SlugRequestInFlight:          "A request with this Idempotency-Key is in progress",
	SlugOutcomeUnknown:           "The outcome of the first request is unknown",
	SlugResponseNotStored:        "The response to this request was not stored",
	SlugStoredResponseUnreadable: "The stored response cannot be read",

	SlugBodyTooLarge:     "Request body too large",
	SlugBodyUnreadable:   "Request body unreadable",
	SlugStoreUnavailable: "Idempotency store unavailable",

	SlugFramingAmbiguous:       "Request framing ambiguous",
	SlugProxyClosed:            "Proxy closed",
	SlugPathInvalid:            "Request path invalid",
	SlugHeaderRepeated:         "Header repeated",
	SlugUpstreamUnreachable:    "Upstream unreachable",
	SlugUpstreamOutcomeUnknown: "Upstream outcome unknown",

	SlugMethodNotAllowed:   "Only POST is accepted",
	SlugSignatureMalformed: "The signature headers are malformed",
	SlugSignatureInvalid:   "No signature matches",
	SlugSignatureExpired:   "The signature's timestamp is outside the window",
	SlugEventMalformed:     "The body is not a valid CloudEvent",
	SlugEventBadSequence:   "The event's sequence is missing or invalid",
	SlugEventNotOwned:      "The event does not belong to this endpoint",
	SlugStreamBacklogFull:  "Too many events wait behind a gap in this stream; retry later",
	SlugInternal:           "Internal error",
	SlugBadParameter:       "Bad Request",
	SlugDeadLetterNotFound: "Not Found",

	SlugUnauthorized:        "Missing or unknown token",
	SlugApplicationDisabled: "The application is disabled",
	SlugNotFound:            "No such resource",
	SlugUnknownTaskType:     "Unknown task type",
	SlugIllegalTransition:   "The change does not apply in the current state",
	SlugFenced:              "The claim is no longer held",
	SlugCursorInvalid:       "Invalid cursor",
	SlugRequestInvalid:      "Invalid request",

	SlugDefinitionInvalid:           "The definition is invalid",
	SlugForceNewExecutionNotAllowed: "forceNewExecution is for test runs only",
	SlugTriggerInvalid:              "The workflow cannot run this trigger",
}

// Title returns the title of a catalogued slug, and "" for any other.
func Title(slug string) string { return titles[slug] }
