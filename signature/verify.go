package signature

import (
	"crypto/hmac"
	"fmt"
	"net/http"
	"time"
)

// Verifier checks the signature headers of incoming webhooks against one or
// more secrets. It is safe for concurrent use.
type Verifier struct {
	scheme    Scheme
	keys      [][]byte
	tolerance time.Duration
	now       func() time.Time
}

// NewVerifier returns a Verifier for scheme that accepts a signature made
// with any of secrets (several during a rotation). SchemeIdem uses each
// secret's bytes exactly as given; SchemeStandard decodes "whsec_<base64>"
// (the prefix is optional). An empty list, or a secret that is empty,
// undecodable or shorter than MinSecretLen bytes once decoded, is
// ErrSecret; a bad Config is an error naming the field. cfg may be nil.
func NewVerifier(scheme Scheme, secrets []string, cfg *Config) (*Verifier, error) {
	if err := checkScheme(scheme); err != nil {
		return nil, err
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	keys, err := decodeSecrets(scheme, secrets)
	if err != nil {
		return nil, err
	}
	return &Verifier{scheme: scheme, keys: keys, tolerance: c.Tolerance, now: c.Now}, nil
}

// Tolerance returns how far a timestamp may be from the clock, either way:
// a receiver's dedup window must be at least twice it, so that a replay
// inside the window is always caught by the inbox.
func (v *Verifier) Tolerance() time.Duration { return v.tolerance }

// Scheme returns the scheme the Verifier checks.
func (v *Verifier) Scheme() Scheme { return v.scheme }

// Verify checks header against the raw body, exactly as received and before
// any parsing or decoding of it. It returns nil when one signature matches
// under one secret and the timestamp is within the tolerance of the clock
// (bounds included). Otherwise the error wraps ErrMalformed (headers missing,
// repeated or unparsable), ErrBadSignature (no signature matches) or
// ErrExpired (a matching signature, but the timestamp is out of the window),
// checked in that order, so ErrExpired is only ever said of a genuine
// message. Signatures are compared in constant time, every signature
// against every secret, and no error says which secret was involved.
func (v *Verifier) Verify(header http.Header, body []byte) error {
	var (
		unix   int64
		sigs   [][]byte
		prefix []string
	)
	switch v.scheme {
	case SchemeIdem:
		raw, err := single(header, HeaderIdemSignature)
		if err != nil {
			return err
		}
		h, err := parseIdemHeader(raw)
		if err != nil {
			return err
		}
		unix, sigs, prefix = h.unix, h.sigs, []string{h.ts, "."}
	case SchemeStandard:
		id, err := single(header, HeaderWebhookID)
		if err != nil {
			return err
		}
		if err := checkID(id); err != nil {
			return err
		}
		ts, err := single(header, HeaderWebhookTimestamp)
		if err != nil {
			return err
		}
		if unix, err = parseTimestamp(ts); err != nil {
			return err
		}
		raw, err := single(header, HeaderWebhookSignature)
		if err != nil {
			return err
		}
		if sigs, err = parseStandardSignatures(raw); err != nil {
			return err
		}
		prefix = []string{id, ".", ts, "."}
	}

	matched := false
	for _, k := range v.keys {
		want := mac(k, body, prefix...)
		for _, got := range sigs {
			// hmac.Equal first, so it runs for every pair: no early exit.
			matched = hmac.Equal(want, got) || matched
		}
	}
	if !matched {
		return fmt.Errorf("%w: no v1 signature matches the body", ErrBadSignature)
	}

	age := v.now().Sub(time.Unix(unix, 0))
	switch {
	case age > v.tolerance:
		return fmt.Errorf("%w: timestamp %d is %s old, tolerance %s", ErrExpired, unix, age.Truncate(time.Second), v.tolerance)
	case age < -v.tolerance:
		return fmt.Errorf("%w: timestamp %d is %s in the future, tolerance %s", ErrExpired, unix, (-age).Truncate(time.Second), v.tolerance)
	}
	return nil
}
