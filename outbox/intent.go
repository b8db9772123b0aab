package outbox

import "time"

// Intent is an outbound effect to enqueue with EnqueueTx: what to send,
// where, and in which stream. The store keeps it as a row with its delivery
// state (store.Intent: id, sequence, attempts, lease), which the relay and
// `idem outbox list` read; that state is never the caller's to set.
type Intent struct {
	// Target names a configured Target (base URL, key template, policy).
	Target string
	// Method and Path of the request; Path, if set, starts with "/" and is
	// appended to the target's URL.
	Method string
	Path   string
	// Body is sent as is; key templates read it as JSON ("payload").
	Body []byte
	// Headers are sent with every attempt (Content-Type among them). The
	// target's key header is set by the relay.
	Headers map[string]string
	// Metadata is business data for the key template ("metadata"), not
	// sent.
	Metadata map[string]string
	// Stream, when not empty, orders delivery: one intent of a stream at a
	// time, in enqueue order, each after the previous one ended. Signed
	// callbacks send the intent's position in it as the CloudEvents
	// sequence.
	Stream string
	// NotBefore delays the first attempt until then. Zero means at once.
	NotBefore time.Time
}
