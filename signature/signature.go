package signature

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Scheme names a signature header format.
type Scheme string

const (
	// SchemeIdem is idem's own format: one Idem-Signature header,
	// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>".
	SchemeIdem Scheme = "idem"
	// SchemeStandard is Standard Webhooks v1.0.0: webhook-id,
	// webhook-timestamp and webhook-signature ("v1,<base64>", space
	// separated), HMAC-SHA256 over "<id>.<timestamp>.<body>".
	SchemeStandard Scheme = "standard"
)

// Header names. Go's http.Header canonicalizes them on Set and Get
// ("Webhook-Id"); the constants keep the spellings of the specifications.
const (
	HeaderIdemSignature    = "Idem-Signature"
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

const (
	// DefaultTolerance is how far a timestamp may be from the verifier's
	// clock, in either direction, when Config.Tolerance is zero.
	DefaultTolerance = 5 * time.Minute
	// MinTolerance and MaxTolerance bound Config.Tolerance.
	MinTolerance = time.Second
	MaxTolerance = time.Hour

	// MinSecretLen is the shortest secret accepted, in bytes: the raw bytes
	// for SchemeIdem, the base64-decoded key for SchemeStandard. 16 bytes
	// (128 bits) is the floor of NIST SP 800-107 for HMAC keys; Standard
	// Webhooks recommends 24 to 64, and its shared test secret has 24.
	MinSecretLen = 16

	// StandardSecretPrefix starts Standard Webhooks secrets. It is optional
	// on input, as in the reference libraries.
	StandardSecretPrefix = "whsec_"

	// MaxSignatures is the most v1 signatures accepted in one header; more
	// is malformed, which bounds the work an unsigned request can cause.
	MaxSignatures = 32

	maxHeaderLen = 8 << 10 // longest signature header value accepted
	maxIDLen     = 256     // longest webhook-id accepted
	maxUnix      = 1e12    // 13 digits and more is milliseconds, not seconds
)

// Errors returned by Verifier.Verify, always wrapped with details, matched
// with errors.Is. None of them says which secret was tried or matched.
var (
	// ErrMalformed is returned when the signature headers are missing,
	// repeated or unparsable: no t= or v1= entry, a timestamp that is not a
	// canonical decimal count of seconds (milliseconds included, see
	// package doc), bad hex or base64, a signature of the wrong length.
	// HTTP handlers answer 400.
	ErrMalformed = errors.New("signature: malformed")
	// ErrExpired is returned when a signature is valid but its timestamp
	// is further than the tolerance from the verifier's clock, in either
	// direction. HTTP handlers answer 401.
	ErrExpired = errors.New("signature: expired")
	// ErrBadSignature is returned when the headers are well formed but no
	// signature matches the body under any configured secret. HTTP
	// handlers answer 401.
	ErrBadSignature = errors.New("signature: bad signature")
	// ErrSecret is returned by NewSigner and NewVerifier for a missing,
	// empty, short or undecodable secret.
	ErrSecret = errors.New("signature: unusable secret")
)

// Config configures a Signer or a Verifier. A nil *Config means defaults.
type Config struct {
	// Tolerance is how far, in either direction, a timestamp may be from
	// Now and still verify; the bound is inclusive. Used by Verifier only.
	// Must be between MinTolerance and MaxTolerance. Defaults to
	// DefaultTolerance (5 minutes).
	Tolerance time.Duration
	// Now is the clock: the timestamp a Signer puts in headers and the
	// time a Verifier checks them against. Defaults to time.Now.
	Now func() time.Time
}

// withDefaults returns a copy of cfg (nil allowed) with defaults filled in,
// after validate.
func (cfg *Config) withDefaults() (Config, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultTolerance
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// ErrBadConfig is wrapped by the error New returns when a Config field is
// missing or out of range; the message names the field.
var ErrBadConfig = errors.New("signature: bad config")

func (c *Config) validate() error {
	if c.Tolerance != 0 && (c.Tolerance < MinTolerance || c.Tolerance > MaxTolerance) {
		return fmt.Errorf("%w: Config.Tolerance %s is outside [%s, %s]", ErrBadConfig, c.Tolerance, MinTolerance, MaxTolerance)
	}
	return nil
}

func checkScheme(s Scheme) error {
	switch s {
	case SchemeIdem, SchemeStandard:
		return nil
	}
	return fmt.Errorf("signature: unknown scheme %q (want %q or %q)", string(s), SchemeIdem, SchemeStandard)
}

// decodeSecrets turns configured secrets into HMAC keys. SchemeIdem uses
// the secret's bytes exactly as given; SchemeStandard decodes
// "whsec_<base64>" (prefix optional). Errors never include the secret.
func decodeSecrets(scheme Scheme, secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: no secret configured", ErrSecret)
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		key, err := decodeSecret(scheme, s)
		if err != nil {
			return nil, fmt.Errorf("secret %d of %d: %w", i+1, len(secrets), err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

func decodeSecret(scheme Scheme, s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty", ErrSecret)
	}
	var key []byte
	switch scheme {
	case SchemeStandard:
		raw := strings.TrimPrefix(s, StandardSecretPrefix)
		var err error
		key, err = base64.StdEncoding.DecodeString(raw)
		if err != nil {
			// CorruptInputError carries only an offset, never the secret.
			return nil, fmt.Errorf("%w: want %s followed by standard base64: %v", ErrSecret, StandardSecretPrefix, err)
		}
	default:
		key = []byte(s)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrSecret)
	}
	if len(key) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrSecret, len(key), MinSecretLen)
	}
	return key, nil
}

// single returns the only value of header name, or ErrMalformed when it is
// missing, empty or repeated (two lines are ambiguous: which one was signed?).
func single(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch {
	case len(vs) == 0:
		return "", fmt.Errorf("%w: missing %s header", ErrMalformed, name)
	case len(vs) > 1:
		return "", fmt.Errorf("%w: %d %s headers, want one", ErrMalformed, len(vs), name)
	case vs[0] == "":
		return "", fmt.Errorf("%w: empty %s header", ErrMalformed, name)
	case len(vs[0]) > maxHeaderLen:
		return "", fmt.Errorf("%w: %s header is %d bytes, limit %d", ErrMalformed, name, len(vs[0]), maxHeaderLen)
	}
	return vs[0], nil
}

// parseTimestamp parses a timestamp header: a canonical decimal count of
// seconds since the Unix epoch (digits only, no sign, no leading zero).
// 13 digits or more is taken for milliseconds and is malformed.
func parseTimestamp(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty timestamp", ErrMalformed)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: timestamp %s is not decimal unix seconds", ErrMalformed, clip(s))
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%w: timestamp %s has a leading zero", ErrMalformed, clip(s))
	}
	if len(s) >= 13 {
		return 0, fmt.Errorf("%w: timestamp %s has %d digits: milliseconds? want unix seconds", ErrMalformed, clip(s), len(s))
	}
	var v int64
	for i := 0; i < len(s); i++ {
		v = v*10 + int64(s[i]-'0')
	}
	return v, nil
}

// checkID validates a webhook-id: 1 to 256 bytes, no control characters.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty %s", ErrMalformed, HeaderWebhookID)
	}
	if len(id) > maxIDLen {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrMalformed, HeaderWebhookID, len(id), maxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] == 0x7f {
			return fmt.Errorf("%w: %s has a control character", ErrMalformed, HeaderWebhookID)
		}
	}
	return nil
}

// clip quotes s for an error message, cut to 40 bytes: header values are
// attacker-controlled and end up in logs.
func clip(s string) string {
	const n = 40
	if len(s) > n {
		return fmt.Sprintf("%q...", s[:n])
	}
	return fmt.Sprintf("%q", s)
}
