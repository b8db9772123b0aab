package signature

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Signer signs outgoing webhook bodies with one or more secrets. It is safe
// for concurrent use.
type Signer struct {
	scheme Scheme
	keys   [][]byte
	now    func() time.Time
}

// SignOpts are per-call options of Signer.Sign; nil means defaults.
type SignOpts struct {
	// ID is the webhook-id of SchemeStandard; it must be 1 to 256 bytes
	// without control characters. Setting it with SchemeIdem is an error
	// (the idem scheme signs no id). Defaults to "msg_" and 26 random
	// base32 characters.
	ID string
	// Timestamp is the signing time, sent in whole seconds. Defaults to
	// Config.Now().
	Timestamp time.Time
}

// NewSigner returns a Signer for scheme. Each secret adds one signature to
// the headers, so receivers holding either the old or the new secret verify
// during a rotation. Secrets are decoded as for NewVerifier; an empty list,
// or an empty or short secret, is ErrSecret. cfg may be nil; only Now is used.
func NewSigner(scheme Scheme, secrets []string, cfg *Config) (*Signer, error) {
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
	return &Signer{scheme: scheme, keys: keys, now: c.Now}, nil
}

// Scheme returns the scheme the Signer signs with.
func (s *Signer) Scheme() Scheme { return s.scheme }

// Sign returns the headers to send with body: Idem-Signature for
// SchemeIdem; webhook-id, webhook-timestamp and webhook-signature for
// SchemeStandard. body must be sent byte for byte as signed.
func (s *Signer) Sign(body []byte, opts *SignOpts) (http.Header, error) {
	var o SignOpts
	if opts != nil {
		o = *opts
	}
	ts := o.Timestamp
	if ts.IsZero() {
		ts = s.now()
	}
	unix := ts.Unix()
	if unix < 0 || unix >= maxUnix {
		return nil, fmt.Errorf("signature: timestamp %d is outside [0, %d) unix seconds", unix, int64(maxUnix))
	}
	tsStr := strconv.FormatInt(unix, 10)
	h := make(http.Header)
	switch s.scheme {
	case SchemeIdem:
		if o.ID != "" {
			return nil, errors.New("signature: SignOpts.ID is for SchemeStandard; the idem scheme signs no id")
		}
		sigs := make([][]byte, len(s.keys))
		for i, k := range s.keys {
			sigs[i] = mac(k, body, tsStr, ".")
		}
		h.Set(HeaderIdemSignature, formatIdemHeader(unix, sigs))
	case SchemeStandard:
		id := o.ID
		if id == "" {
			id = "msg_" + rand.Text()
		}
		if err := checkID(id); err != nil {
			return nil, fmt.Errorf("signature: SignOpts.ID: %w", err)
		}
		sigs := make([][]byte, len(s.keys))
		for i, k := range s.keys {
			sigs[i] = mac(k, body, id, ".", tsStr, ".")
		}
		h.Set(HeaderWebhookID, id)
		h.Set(HeaderWebhookTimestamp, tsStr)
		h.Set(HeaderWebhookSignature, formatStandardSignatures(sigs))
	}
	return h, nil
}

// mac returns HMAC-SHA256(key, prefix... + body), writing the body as is,
// without copying it.
func mac(key, body []byte, prefix ...string) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range prefix {
		m.Write([]byte(p))
	}
	m.Write(body)
	return m.Sum(nil)
}
