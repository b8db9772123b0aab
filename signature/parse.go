package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// idemHeader is a parsed Idem-Signature value.
type idemHeader struct {
	ts   string   // the t= value, canonical decimal seconds
	unix int64    // ts parsed
	sigs [][]byte // v1= values decoded, each sha256.Size bytes
}

// parseIdemHeader parses "t=<unix>,v1=<hex>[,v1=<hex>...]". Items are
// separated by commas, optionally surrounded by spaces or tabs; each is
// key=value. Exactly one t= is required, at least one v1= (64 hex digits,
// either case), at most MaxSignatures; other keys (other schemes, say v0=)
// are ignored. Anything else is ErrMalformed.
func parseIdemHeader(v string) (idemHeader, error) {
	var h idemHeader
	if v == "" {
		return h, fmt.Errorf("%w: empty %s header", ErrMalformed, HeaderIdemSignature)
	}
	if len(v) > maxHeaderLen {
		return h, fmt.Errorf("%w: %s header is %d bytes, limit %d", ErrMalformed, HeaderIdemSignature, len(v), maxHeaderLen)
	}
	seenT := false
	for item := range strings.SplitSeq(v, ",") {
		item = strings.Trim(item, " \t")
		k, val, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return idemHeader{}, fmt.Errorf("%w: %s item %s is not key=value", ErrMalformed, HeaderIdemSignature, clip(item))
		}
		switch k {
		case "t":
			if seenT {
				return idemHeader{}, fmt.Errorf("%w: %s has two t= items", ErrMalformed, HeaderIdemSignature)
			}
			seenT = true
			unix, err := parseTimestamp(val)
			if err != nil {
				return idemHeader{}, err
			}
			h.ts, h.unix = val, unix
		case "v1":
			if len(h.sigs) == MaxSignatures {
				return idemHeader{}, fmt.Errorf("%w: more than %d v1 signatures", ErrMalformed, MaxSignatures)
			}
			if len(val) != hex.EncodedLen(sha256.Size) {
				return idemHeader{}, fmt.Errorf("%w: v1 signature has %d characters, want %d hex digits", ErrMalformed, len(val), hex.EncodedLen(sha256.Size))
			}
			sig, err := hex.DecodeString(val)
			if err != nil {
				return idemHeader{}, fmt.Errorf("%w: v1 signature is not hex", ErrMalformed)
			}
			h.sigs = append(h.sigs, sig)
		default:
			// Another scheme: ignored, so senders can add one during a migration.
		}
	}
	if !seenT {
		return idemHeader{}, fmt.Errorf("%w: %s has no t= timestamp", ErrMalformed, HeaderIdemSignature)
	}
	if len(h.sigs) == 0 {
		return idemHeader{}, fmt.Errorf("%w: %s has no v1= signature", ErrMalformed, HeaderIdemSignature)
	}
	return h, nil
}

// formatIdemHeader is the inverse of parseIdemHeader.
func formatIdemHeader(unix int64, sigs [][]byte) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(unix, 10))
	for _, s := range sigs {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(s))
	}
	return b.String()
}

// b64 decodes signatures strictly, so each signature has exactly one
// accepted spelling, as with the reference library's string comparison.
var b64 = base64.StdEncoding.Strict()

// parseStandardSignatures parses a webhook-signature value: entries
// separated by spaces (extra spaces tolerated), each "<version>,<base64>".
// v1 entries must decode to 32 bytes; other versions (v1a, the asymmetric
// scheme) are ignored; at least one and at most MaxSignatures v1 entries.
// Anything else is ErrMalformed.
func parseStandardSignatures(v string) ([][]byte, error) {
	if v == "" {
		return nil, fmt.Errorf("%w: empty %s header", ErrMalformed, HeaderWebhookSignature)
	}
	if len(v) > maxHeaderLen {
		return nil, fmt.Errorf("%w: %s header is %d bytes, limit %d", ErrMalformed, HeaderWebhookSignature, len(v), maxHeaderLen)
	}
	var sigs [][]byte
	for item := range strings.SplitSeq(v, " ") {
		if item == "" {
			continue
		}
		ver, val, ok := strings.Cut(item, ",")
		if !ok || ver == "" {
			return nil, fmt.Errorf("%w: %s entry %s is not <version>,<signature>", ErrMalformed, HeaderWebhookSignature, clip(item))
		}
		if ver != "v1" {
			continue
		}
		if len(sigs) == MaxSignatures {
			return nil, fmt.Errorf("%w: more than %d v1 signatures", ErrMalformed, MaxSignatures)
		}
		if len(val) != b64.EncodedLen(sha256.Size) {
			return nil, fmt.Errorf("%w: v1 signature has %d characters, want %d (base64 of %d bytes)", ErrMalformed, len(val), b64.EncodedLen(sha256.Size), sha256.Size)
		}
		sig, err := b64.DecodeString(val)
		if err != nil || len(sig) != sha256.Size {
			return nil, fmt.Errorf("%w: v1 signature is not standard base64", ErrMalformed)
		}
		sigs = append(sigs, sig)
	}
	if len(sigs) == 0 {
		return nil, fmt.Errorf("%w: %s has no v1 signature", ErrMalformed, HeaderWebhookSignature)
	}
	return sigs, nil
}

// formatStandardSignatures is the inverse of parseStandardSignatures.
func formatStandardSignatures(sigs [][]byte) string {
	parts := make([]string, len(sigs))
	for i, s := range sigs {
		parts[i] = "v1," + b64.EncodeToString(s)
	}
	return strings.Join(parts, " ")
}
