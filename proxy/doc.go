// Package proxy puts the Idempotency-Key contract of package httpidem in
// front of any HTTP API: it is what `idem proxy --upstream URL` serves.
//
// A Proxy is an http.Handler: the httpidem middleware over a key.Guard on
// the configured store, in front of an httputil.ReverseProxy to the
// upstream. A POST or PATCH with an Idempotency-Key from an authenticated
// caller reaches the upstream at most once per (caller, method and path,
// key) while its key is retained; retries get the first response again
// with Idempotent-Replayed: true. Everything else passes through untouched
// and is never stored: other methods, requests without a key (unless
// RequireKey), and requests without a caller.
//
// # Callers
//
// Keys belong to a caller, the principal. By default it is a hash
// (SHA-256) of the Authorization value, its scheme's case folded and the
// spaces after the scheme taken as one ("bearer  x" and "Bearer x" are one
// caller), its credentials as sent. A caller is therefore a credential,
// not an identity: a retry sent after an OAuth token refresh carries new
// credentials, so it is a new caller and its key starts afresh (the
// upstream runs it again). To avoid that, have a trusted gateway in front
// set a stable caller id (a user or tenant) in a header, and name that
// header in Config.PrincipalHeader (`idem proxy --principal-header`). A
// request without credentials (no Authorization, or a scheme with nothing
// after it, such as a bare "Bearer") has no caller: it passes through
// unguarded, and nothing is stored. A lone word that is no known scheme is
// a credential sent bare (a raw API key) and names its caller.
//
// The caller's header is a singleton: sent twice with one value it counts
// once; with different values the request is refused (400
// header-repeated), whatever its method.
//
// # Forwarding
//
// The client's Idempotency-Key goes to the upstream unchanged, so an
// idempotent upstream dedups too. Hop-by-hop headers are removed both ways
// (Connection, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding,
// Upgrade, and the headers Connection lists), X-Forwarded-For, -Host and
// -Proto are set, redirects are passed to the client, never followed. The
// path is joined to the upstream's base path as the client sent it; a path
// with a "." or ".." segment (literal or percent-encoded, with "/", "\",
// %2F or %5C around it) could lead outside the base path, so it is refused
// (400 path-invalid), never normalised.
//
// A request to switch protocols (Connection: Upgrade, as WebSocket sends)
// on a method that does not take part keeps its offer; the upstream's 101
// Switching Protocols makes the connection a tunnel between client and
// upstream, which Config.UpstreamTimeout does not cut (it bounds the wait
// for the 101): it lasts until either side closes it, or Close. A request
// that holds a claim goes without the offer: a tunnel can be neither
// stored nor replayed.
//
// # Serving
//
// Serve the Proxy on a Listener, with ConnContext as the http.Server's
// ConnContext, as `idem proxy` does. net/http reads a request that has both
// Content-Length and Transfer-Encoding by its Transfer-Encoding and hides
// the Content-Length from handlers; a hop in front of the proxy that reads
// it by its Content-Length would see other requests than the proxy does
// (request smuggling). The Listener's connections see the header blocks
// as they are read: such a request gets 400 request-framing-ambiguous, and
// its connection is closed, so that what its body hides is never read as a
// request.
//
// # When the upstream fails
//
// The proxy tells apart, from net/http/httptrace, a request that never
// reached the upstream from one whose answer was lost:
//
//   - Never sent (connection refused, DNS failure, TLS handshake, a timeout
//     before the request was written, an idle connection the upstream
//     closed as the request went out): 502 upstream-unreachable. Nothing
//     happened upstream; the claim is released and a retry is forwarded at
//     once.
//   - Sent, answer lost (timeout after the request was written, connection
//     reset, a response cut before its end): 504 (timeout) or 502
//     upstream-outcome-unknown. The upstream may have acted, and may still
//     be working on it after the proxy gave up, so the key is marked unknown
//     and held for Config.UnknownHold (10 min by default, never shorter than
//     UpstreamTimeout): retries get 409 outcome-unknown with Retry-After
//     until it ends, and the first retry after it is forwarded again with
//     the same key. What is promised, exactly: a keyed request reaches the
//     upstream at most once per key as long as the upstream finishes (or
//     abandons) every request within UnknownHold of receiving it; an
//     upstream slower than that may meet the retry while it still works.
//   - The upstream answered, but the store failed meanwhile and could not
//     record the answer: the client gets 503 store-unavailable, not the
//     answer (no replay could back it yet). The proxy keeps the key held
//     (retries to it get 503, to other proxies 409 while the lease lasts)
//     and keeps recording the answer, backing off up to a second, for
//     Config.RecordTimeout; the first write the recovered store takes is the
//     completion, and every retry then gets the replay. An outage longer
//     than the lease can let another proxy's retry reach the recovered store
//     first; a proxy that dies holding an unrecorded answer loses it. In both
//     cases only a downstream key (the forwarded Idempotency-Key) stops the
//     second effect.
//   - The upstream answered with a status the middleware does not store
//     (5xx, 408, 409, 425, 429): its answer is delivered, not stored, and
//     the claim released, so a retry is forwarded again.
//
// Three details keep these promises:
//
//   - http.Transport silently re-sends a request that carries an
//     Idempotency-Key when a reused connection breaks after the request was
//     written, if it can rewind the body. The proxy forbids it (no GetBody;
//     an empty body is sent chunked), so that the upstream never runs one
//     request twice without the proxy knowing.
//   - For a request that holds a claim, the response body is read (up to
//     Config.MaxResponse and one byte) before the status is passed on: a body
//     cut short is a lost answer, never a stored or delivered truncated
//     response. A longer body is not stored (the key completes with a
//     "not stored" marker, retries get 409 response-not-stored) and streams
//     through.
//   - The upstream call of a request that holds a claim does not end when
//     its client goes away: its answer is stored and the client's retry
//     replays it, instead of meeting 409 until the lease ends. It ends at
//     Config.UpstreamTimeout, or at Close.
//   - An HTTP/1 response without Content-Length or chunked encoding ends
//     where the upstream closes the connection, and reads the same whole or
//     cut: it is delivered, and its key completed with the "not stored"
//     marker (retries get 409 response-not-stored), never replayed.
//
// # Hostile clients
//
// A keyed request's body must arrive within Config.BodyTimeout (30 s;
// then 408 body-timeout and the connection closed), and the bodies held in
// memory at once share Config.MemoryBudget (32 MiB, beyond 16 KiB each; a
// body that does not fit gets 503 server-busy + Retry-After before anything
// is claimed or forwarded). 300 clients that declare 1 MiB bodies and stall
// before the last byte leave the proxy under 128 MiB resident
// (internal/hostile). A participating method in another case ("post") is
// refused, as many upstreams would run it as POST.
//
// # Sharing
//
// Nothing but the memory store is process-local: proxies that share one
// PostgreSQL schema, SQLite file or Redis prefix share their keys, and a
// request reaches the upstream once whichever proxy it goes through. The
// operation is method and path, without the upstream: proxies in front of
// different upstreams should not share a store (or a Redis prefix).
//
// # Closing
//
// Close (after http.Server.Shutdown let in-flight requests finish) aborts
// the upstream calls still running, whose keys then stay unknown for
// UnknownHold, ends the tunnels, and answers later requests 503
// proxy-closed. Drain then waits for answers still being recorded; call it
// before closing the store.
//
// # Problems
//
// Besides the httpidem middleware's problems, the proxy answers these
// (application/problem+json; type is Config.ProblemBase and the slug;
// docs/http.md lists every problem of the project):
//
//	slug                       status    when
//	request-framing-ambiguous  400       both Content-Length and Transfer-Encoding on the connection, or
//	                                     framing a Listener cannot follow; the connection is closed
//	path-invalid               400       a "." or ".." path segment
//	header-repeated            400       the caller's header sent twice with different values
//	proxy-closed               503       Close was called
//	upstream-unreachable       502       the request never reached the upstream
//	upstream-outcome-unknown   502, 504  the request reached the upstream and its answer was lost
//
// # Metrics
//
// Config.Hooks are told of every participating request's outcome, of
// upstream latencies and failures, and Proxy.Stats says what the proxy
// holds now. prom.Proxy turns both into idem_proxy_requests_total{outcome}
// (one per participating request, the httpidem outcome),
// idem_proxy_upstream_duration_seconds (time to the response headers),
// idem_proxy_upstream_errors_total{kind} (unreachable, unknown),
// idem_proxy_in_flight_requests, idem_proxy_recording_answers (answers the
// store did not take yet) and idem_proxy_buffered_body_bytes (the memory
// budget's use).
package proxy
