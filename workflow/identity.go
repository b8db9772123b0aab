package workflow

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemhq/idem/internal/canonjson"
)

// Sources of a trigger's identity, strongest first.
const (
	SourceClient  = "client"  // the caller's clientIdempotencyId
	SourceFields  = "fields"  // the ENTRY_POINT's idempotencyFields
	SourcePayload = "payload" // the whole payload
)

// ErrBadTrigger is wrapped by the errors of a trigger whose identity cannot
// be computed: a payload that is not I-JSON, an idempotency field missing
// from it, a clientIdempotencyId out of form.
var ErrBadTrigger = errors.New("workflow: bad trigger")

// Identity is what makes two triggers of a workflow one execution.
type Identity struct {
	// Key is a SHA-256 over the application, the workflow, its
	// ENTRY_POINT and the identity's material: the clientIdempotencyId
	// when given, else the values of the idempotencyFields when the
	// ENTRY_POINT names some, else the whole payload, in canonical form.
	Key [32]byte
	// Source names the material: SourceClient, SourceFields or
	// SourcePayload.
	Source string
	// Fingerprint is a SHA-256 of the canonical payload. One Key with
	// another Fingerprint is another request under an identity already
	// taken: it is refused, never merged into the other's run.
	Fingerprint [32]byte
}

// maxClientID bounds a clientIdempotencyId, as an Idempotency-Key is.
const maxClientID = 255

// Identity computes the identity of a trigger of the application's
// workflow name (as stored) with payload (JSON; empty is no payload) and
// the caller's clientIdempotencyId ("" for none). Two payloads that differ
// only in spacing, key order or number spelling are one payload (RFC 8785).
func (w *Workflow) Identity(app, name string, payload []byte, clientID string) (Identity, error) {
	canon, err := canonjson.Canonical(payload)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: the payload: %w", ErrBadTrigger, err)
	}
	id := Identity{Fingerprint: sha256.Sum256(canon)}
	parts := []string{"idem-trigger-v1", app, name, w.entry}
	entry := w.steps[w.entry]
	switch {
	case clientID != "":
		if len(clientID) > maxClientID || strings.IndexFunc(clientID, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
			return Identity{}, fmt.Errorf("%w: clientIdempotencyId: 1 to %d printable ASCII characters, no spaces", ErrBadTrigger, maxClientID)
		}
		id.Source = SourceClient
		parts = append(parts, SourceClient, clientID)
	case len(entry.fields) > 0:
		vals, err := canonjson.Fields(payload, entry.fields)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: the payload: %w", ErrBadTrigger, err)
		}
		for i := 1; i < len(vals); i += 2 {
			if len(vals[i]) == 0 {
				return Identity{}, fmt.Errorf("%w: the payload has no %s, one of the idempotencyFields that name this run", ErrBadTrigger, vals[i-1])
			}
		}
		id.Source = SourceFields
		parts = append(parts, SourceFields)
		for _, v := range vals {
			parts = append(parts, string(v))
		}
	default:
		id.Source = SourcePayload
		parts = append(parts, SourcePayload, string(canon))
	}
	h := sha256.New()
	for _, p := range parts {
		// Length-prefixed: no two lists of parts give the same bytes.
		h.Write([]byte(strconv.Itoa(len(p)) + ":" + p + ","))
	}
	h.Sum(id.Key[:0])
	return id, nil
}
