// Package event reads and writes the CloudEvents that idem's signed
// callbacks carry, on the official Go SDK (github.com/cloudevents/sdk-go/v2):
// its event model, its HTTP binary and structured modes, and its Validate.
//
// # Tour
//
// The receiving side verifies the signature over the raw body first, then
// parses the event from those same bytes:
//
//	body, _ := io.ReadAll(r.Body)           // verified by package signature
//	ev, err := event.FromHTTP(r, body, &event.Config{
//		Owner: event.SourcePrefixes("https://shop.example/orders"),
//	})
//	switch {
//	case errors.Is(err, event.ErrMalformed), errors.Is(err, event.ErrBadSequence):
//		// 400: not a valid event; a retry cannot fix it
//	case errors.Is(err, event.ErrNotOwned):
//		// the event belongs to another application
//	}
//	// inbox key: (ev.Source, ev.ID); order key: ev.Stream(), ev.ExecutionID, ev.Sequence
//
// The sending side renders an [Event] with [ToHTTP] in [ModeBinary] or
// [ModeStructured] mode, signs the body, and posts it.
//
// An event at rest (the inbox's parked events and dead letters) is the body
// of structured mode: [Encode] writes it and [Decode] reads it back, with
// the same checks and no HTTP request.
//
// FromHTTP accepts specversion 1.0 only (0.3 and anything else are
// [ErrMalformed]), requires a non-empty id, source and type (the SDK's
// Validate), refuses batched mode, a repeated ce-* header, and in structured
// mode any member name that is not lower-case letters and digits, a repeated
// member, or a context attribute that is not a JSON string. The SDK alone is
// more lenient (it lower-cases names and maps JSON numbers to int32 through
// float64, so 1.5 would become 1); those checks close that gap, while the SDK
// still does the parsing.
//
// # The sequence extension
//
// sequence is a CloudEvents extension attribute holding the event's position
// in its stream: a decimal integer >= 1, with no sign, no leading zero, no
// space, no exponent or fraction, at most 9223372036854775807 (int64). See
// [ParseSequence]. On the wire:
//
//	binary mode:      ce-sequence: 8
//	structured mode:  "sequence": "8"   (a CloudEvents String; what ToHTTP sends)
//	                  "sequence": 8     (a CloudEvents Integer; accepted up to 2147483647,
//	                                     the spec's Integer range; larger values must be strings)
//
// 0, -1, 01, " 8", 1e3, 8.0, 9223372036854775808 and non-numeric values are
// [ErrBadSequence]; so is a missing sequence, unless
// [Config.AllowMissingSequence] is set (Event.Sequence is then 0).
//
// The optional executionid extension (binary: ce-executionid) names the
// execution that produced the event. Sequences restart at 1 in a new
// execution (a rerun), so the order package compares sequences within one
// execution and lets a projection follow one execution: events of a
// superseded execution never overwrite a rerun's.
//
// # Stream identity
//
// A stream is (source, subject): [Event.Stream]. Subject names the object
// the events are about (an order, a task); source names the producer. We
// include source because the CloudEvents spec scopes subject to its source,
// so two producers' "order-42" are different objects, and because it matches
// the inbox's (source, id) identity. We exclude type because events of
// different types about one object share one sequence (7 PAID, then 8
// SHIPPED). An event without subject belongs to the stream (source, "").
//
// # Ownership
//
// A valid signature proves which sender holds the secret, not that the
// event is addressed to this endpoint. [Config.Owner] decides that (for
// example with [SourcePrefixes], which matches at path boundaries so
// "https://shop.example/orders" does not admit
// "https://shop.example/orders-fake"); a refusal is [ErrNotOwned], checked
// only after the event is otherwise valid.
package event
