// Package httpidem is net/http middleware that gives unsafe requests
// idempotency keys, as the IETF draft "The Idempotency-Key HTTP Header
// Field" describes and idem's HTTP contract (docs/http.md) fixes: a
// request retried with the same Idempotency-Key runs its handler at most
// once, and every retry gets the first response back, marked
// Idempotent-Replayed: true.
//
//	g, _ := key.New(store, nil)                          // or key.NewTx for TxFrom
//	m, _ := httpidem.New(g, &httpidem.Config{Principal: userOf})
//	mux.Handle("POST /charges", m.Wrap(chargeHandler))  // works with any net/http router
//
// # What a request goes through
//
//  1. Only Config.Methods take part (POST and PATCH by default). Other
//     methods, GET, HEAD and OPTIONS above all, pass through, their header
//     ignored. A participating method in another case ("post") is refused:
//     many servers would run it as POST.
//  2. Config.Principal names the caller. An unauthenticated request passes
//     through and never reaches the store.
//  3. The Idempotency-Key header: bare (abc) or an RFC 9651 sf-string
//     ("abc"), both naming the same key; surrounding spaces and tabs
//     trimmed; 1 to 255 bytes of printable ASCII (0x21-0x7E, and spaces
//     inside quotes); case-sensitive; never truncated. Parameters after a
//     quoted key, or the header sent on two lines, are refused. Without the
//     header the request passes through unless Config.RequireKey; an empty
//     header is always refused (a client that sends one believes itself
//     protected).
//  4. The body is read, at most Config.MaxBody bytes (1 MiB): a longer one
//     is refused before any claim, without reading past MaxBody+1 bytes,
//     and the server then closes the connection. A compressed body is never
//     decompressed, so no compression bomb can expand. Reading it must end
//     within Config.BodyTimeout (30 s), and buffered bodies share
//     Config.MemoryBudget (32 MiB, beyond 16 KiB each): a body that does not
//     fit is refused (503 server-busy) by its declared length before a byte
//     is read, or as it grows. A client that stalls its body therefore holds
//     neither memory beyond the budget nor its connection for ever.
//  5. The scope is (principal, operation, key); the operation defaults to
//     the method and the route pattern (r.Pattern, or the pattern a wrapped
//     *http.ServeMux routes to, or else the path). The fingerprint is
//     SHA-256 (key.FingerprintOf, versioned) over the method, the path
//     (percent-encoding normalised), the query (pairs decoded and sorted by
//     name, the values of one name in the order sent: version 2; a key
//     stored under version 1, which sorted values too, is compared with the
//     retry's version-1 fingerprint), Config.SignificantHeaders, and the body: its raw
//     bytes, its RFC 8785 canonical JSON (FingerprintJSON), or chosen
//     members (FingerprintFields). A different query string under the same
//     key is therefore a different request (422), not a different key.
//  6. The guard (key.Guard.Do, or key.TxGuard.DoTx for NewTx) claims the
//     scope, and the handler runs against a buffering ResponseWriter. Only
//     once the store has settled the key is anything sent to the client:
//     acknowledgement follows durability.
//
// # Responses
//
// Errors are RFC 9457 application/problem+json bodies with type
// (Config.ProblemBase + slug, "https://idem.dev/problems/" by default),
// title, status and detail. The slugs:
//
//	slug                         status        when
//	idempotency-key-missing      400           RequireKey and no header; or an empty header
//	idempotency-key-invalid      400           malformed, too long, non-ASCII or control bytes, repeated header
//	body-too-large               413           body over MaxBody (checked before any claim)
//	body-unreadable              400           the body could not be read (client gone, bad chunking)
//	body-timeout                 408           the body did not arrive within BodyTimeout (connection closed)
//	server-busy                  503 + R-A 1   the body does not fit in MemoryBudget now (nothing claimed)
//	method-invalid               400           a participating method in another case ("post")
//	body-invalid-json            400           FingerprintJSON/Fields: not I-JSON (syntax, duplicate member
//	                                           names, unpaired surrogates, numbers a double cannot hold exactly)
//	idempotency-key-reused       422           same scope and key, other fingerprint
//	request-in-flight            409 + R-A     same scope and key, the first request still running
//	outcome-unknown              409 + R-A     the first attempt called MarkUnknown; its lease has not ended
//	store-unavailable            503 + R-A 1   the store did not confirm the claim (the handler did not run),
//	                                           or could not record the handler's outcome (see below)
//	response-not-stored          409           completed earlier, but the response was too large to keep
//	                                           (or its handler called MarkNotStored)
//	encoding-not-acceptable      406           the stored Content-Encoding is refused by the retry's
//	                                           Accept-Encoding and is not gzip or deflate (which are undone)
//	stored-response-unreadable   500           the stored response is corrupt or from a newer encoding
//
// Retry-After (R-A) is in whole seconds, rounded up, at least 1: for 409s
// the time left on the holder's lease (a duplicate that reaches the
// holder's own process is answered from its view of the lease, without the
// store). A request answered with a problem
// never creates or changes a record (the 503 after a handler ran is the
// one exception to "nothing was claimed"; see below).
//
// # What is stored, when
//
//   - 2xx, 3xx (a redirect after a POST answers an effect that happened),
//     and 4xx except 408, 409, 425 and 429: the status, the headers
//     Content-Type, Content-Encoding (a body means nothing without it),
//     Location and Config.ReplayHeaders, and the body. Never hop-by-hop
//     headers (nor any the response's Connection header names), never
//     Set-Cookie. A replay writes them back with Idempotent-Replayed: true
//     and Content-Length. When the handler set no Content-Type, the one
//     net/http would sniff is set on the first response and stored, so the
//     replay matches it byte for byte.
//   - Any other status (5xx, 408, 409, 425, 429, 101): nothing; the
//     claim is released at once (a transaction rolled back) and the
//     handler's response delivered; a retry runs the handler again.
//   - A handler that panics: nothing; the claim is released, then the
//     panic goes on as it would without the middleware (net/http logs it,
//     http.ErrAbortHandler silently, and drops the connection).
//   - A handler that called MarkUnknown: nothing; the claim is kept for
//     key.Config.UnknownHold (the lease by default) from that moment,
//     retries meanwhile get 409 outcome-unknown, and the first one after
//     runs the handler again. The handler's own response is delivered.
//   - A handler that called MarkNotStored (it cannot vouch that its body is
//     whole): a stored status completes the key with the "not stored"
//     marker, as for a body too large.
//   - A body that outgrows Config.MaxResponse (1 MiB): the moment it does,
//     the key is completed with a "not stored" marker; only then is the
//     buffered part sent and the rest streamed. A retry gets 409
//     response-not-stored, never a second execution. In a transaction the
//     commit happens at that moment: a handler must not use the
//     transaction after writing a body that may be that large.
//   - The handler ran but the store could not record its outcome (it
//     failed, or the lease was taken over): the handler's response is NOT
//     sent, because acknowledging it would promise a replay that may not
//     come; the client gets 503 store-unavailable and retries. When the
//     store failed, the guard keeps the key held and keeps trying to record
//     the response (key.Config.RecordTimeout), so the retry after the store
//     recovers gets the replay, never a second run. In a transaction the
//     handler's writes were rolled back, and nothing needs recording.
//
// A replay follows the retry's Accept-Encoding: a stored gzip or deflate
// body is decoded for a retry that refuses that coding.
//
// Stored responses live for key.Config.Retention (24 hours by default);
// after it the key is new again. The encoding is a small versioned binary
// (see stored.go), refused rather than misread by a decoder of another
// version.
//
// # Transactions
//
// NewTx runs each handler inside the store's transaction (sqlitestore:
// *sql.Tx, pgstore: pgx.Tx), which the handler takes with TxFrom. Its
// writes and the stored response commit together, so its local effect
// happens exactly once per key whatever crashes; a status that is not
// stored, a panic, or a lost claim rolls them back.
//
// # The handler's view
//
// The handler gets the body re-supplied from memory (r.Body, and
// r.GetBody), the Idempotency-Key header untouched (a proxy forwards it),
// and a ResponseWriter that buffers: Flush does nothing until the response
// streams, Hijack is not offered, informational 1xx responses are dropped,
// and header changes after WriteHeader are ignored (as in net/http),
// trailers excepted. Its context ends with key.ErrFenced as the cause if
// the claim's lease is lost while it runs.
package httpidem
