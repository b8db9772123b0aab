// Package signature signs and verifies webhook bodies with HMAC-SHA256, in
// two header formats:
//
//   - SchemeIdem, idem's own (as Stripe's):
//     Idem-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>
//     The secret's bytes are the key, exactly as configured, with no decoding.
//   - SchemeStandard, Standard Webhooks v1.0.0: webhook-id, webhook-timestamp
//     and webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<t>." + body)>,
//     where the key is the base64 after "whsec_" in the secret.
//
// # Tour
//
// A sender builds a Signer and sends the headers it returns with the body,
// byte for byte:
//
//	s, err := signature.NewSigner(signature.SchemeStandard, []string{secret}, nil)
//	h, err := s.Sign(body, nil) // webhook-id, webhook-timestamp, webhook-signature
//
// A receiver builds one Verifier at start and calls Verify with the raw body,
// before parsing it:
//
//	v, err := signature.NewVerifier(signature.SchemeStandard, []string{newSecret, oldSecret}, nil)
//	switch err := v.Verify(r.Header, body); {
//	case errors.Is(err, signature.ErrMalformed): // 400
//	case err != nil: // ErrBadSignature or ErrExpired: 401
//	}
//
// # Rules
//
//   - Rotation: a Verifier accepts any of its secrets; a Signer signs with each
//     of its secrets, so a header carries several v1 signatures. Unknown
//     schemes or versions in a header (v0=, v1a,) are ignored; at most
//     MaxSignatures v1 signatures per header.
//   - Secrets: empty, undecodable or shorter than MinSecretLen (16) bytes
//     after decoding are refused by the constructors with ErrSecret.
//   - Timestamps are canonical decimal Unix seconds: digits only, no sign, no
//     leading zero. One of 13 digits or more is a sender sending milliseconds
//     and is ErrMalformed (a bug to fix, reported as such), not ErrExpired.
//   - The window: |Config.Now() - t| <= Config.Tolerance (default 5 minutes),
//     in both directions, bounds included. The clock is injectable.
//   - Order of checks: headers (ErrMalformed), then signature
//     (ErrBadSignature), then window (ErrExpired), so "expired" is only said
//     of a genuine but stale or early message.
//   - Comparison is constant time (hmac.Equal), every signature against every
//     secret with no early exit; errors never tell which secret matched.
//   - Each header must appear once: two lines of the same header are
//     ErrMalformed. Look-ups go through http.Header, so names are
//     case-insensitive as long as the header was filled with Set or Add.
package signature
