package signature

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const now = 1_700_000_000 // the verifier's clock in these tests

var (
	idemSecret  = "idem-test-secret-0123456789"                                         // raw bytes, 27
	idemOld     = "idem-old-secret-abcdefghijkl"                                        // raw bytes, 28
	stdSecret   = "whsec_" + b64.EncodeToString([]byte("standard-test-key-0123456789")) // 28 bytes
	stdOld      = "whsec_" + b64.EncodeToString([]byte("standard-old-key-abcdefghijk"))
	testBody    = []byte(`{"id":"evt_1","type":"order.paid","amount":1250}`)
	defaultSecs = map[Scheme]string{SchemeIdem: idemSecret, SchemeStandard: stdSecret}
	oldSecs     = map[Scheme]string{SchemeIdem: idemOld, SchemeStandard: stdOld}
)

// sign returns headers for body signed at unix with secrets.
func sign(t *testing.T, scheme Scheme, unix int64, body []byte, secrets ...string) http.Header {
	t.Helper()
	s, err := NewSigner(scheme, secrets, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &SignOpts{Timestamp: time.Unix(unix, 0)}
	if scheme == SchemeStandard {
		opts.ID = "msg_test"
	}
	h, err := s.Sign(body, opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func verifier(t *testing.T, scheme Scheme, secrets ...string) *Verifier {
	t.Helper()
	v, err := NewVerifier(scheme, secrets, &Config{Now: fixedClock(now)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sigHeader is the header that carries the signatures in scheme.
func sigHeader(s Scheme) string {
	if s == SchemeIdem {
		return HeaderIdemSignature
	}
	return HeaderWebhookSignature
}

// withTimestamp re-signs body at a literal timestamp string, bypassing
// the Signer's own checks (for milliseconds, leading zeros...).
func withTimestamp(scheme Scheme, ts string, body []byte, secret string) http.Header {
	h := make(http.Header)
	switch scheme {
	case SchemeIdem:
		sig := mac([]byte(secret), body, ts, ".")
		h.Set(HeaderIdemSignature, "t="+ts+",v1="+hex.EncodeToString(sig))
	case SchemeStandard:
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		sig := mac(key, body, "msg_test", ".", ts, ".")
		h.Set(HeaderWebhookID, "msg_test")
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, "v1,"+b64.EncodeToString(sig))
	}
	return h
}

type verifyCase struct {
	name   string
	header func(s Scheme) http.Header // nil: signed at now
	body   []byte                     // nil: testBody
	want   error                      // nil: verifies
}

func TestVerify(t *testing.T) {
	t.Parallel()

	signedAt := func(unix int64) func(Scheme) http.Header {
		return func(s Scheme) http.Header { return sign(t, s, unix, testBody, defaultSecs[s]) }
	}
	edit := func(f func(s Scheme, h http.Header)) func(Scheme) http.Header {
		return func(s Scheme) http.Header {
			h := sign(t, s, now, testBody, defaultSecs[s])
			f(s, h)
			return h
		}
	}
	literalTS := func(ts string) func(Scheme) http.Header {
		return func(s Scheme) http.Header { return withTimestamp(s, ts, testBody, defaultSecs[s]) }
	}
	changed := func(i int) []byte {
		b := []byte(string(testBody))
		b[i] ^= 0x01
		return b
	}

	cases := []verifyCase{
		{name: "Valid"},
		{name: "MissingSignatureHeader", header: edit(func(s Scheme, h http.Header) { h.Del(sigHeader(s)) }), want: ErrMalformed},
		{name: "NoHeadersAtAll", header: func(Scheme) http.Header { return http.Header{} }, want: ErrMalformed},
		{name: "EmptySignatureHeader", header: edit(func(s Scheme, h http.Header) { h.Set(sigHeader(s), "") }), want: ErrMalformed},
		{name: "TwoSignatureHeaderLines", header: edit(func(s Scheme, h http.Header) { h.Add(sigHeader(s), h.Get(sigHeader(s))) }), want: ErrMalformed},
		{name: "TimestampNonNumeric", header: literalTS("abc"), want: ErrMalformed},
		{name: "TimestampNegative", header: literalTS("-1700000000"), want: ErrMalformed},
		{name: "TimestampPlusSign", header: literalTS("+1700000000"), want: ErrMalformed},
		{name: "TimestampLeadingZero", header: literalTS("01700000000"), want: ErrMalformed},
		{name: "TimestampFraction", header: literalTS("1700000000.5"), want: ErrMalformed},
		{name: "TimestampExponent", header: literalTS("17e8"), want: ErrMalformed},
		{name: "TimestampSpace", header: literalTS("1700 000000"), want: ErrMalformed},
		{name: "TimestampMilliseconds", header: literalTS("1700000000000"), want: ErrMalformed},
		{name: "TimestampHuge", header: literalTS("99999999999999999999999"), want: ErrMalformed},
		{name: "TimestampLiteralOK", header: literalTS(strconv.Itoa(now))},
		{name: "JustInsidePast", header: signedAt(now - 300)},
		{name: "JustOutsidePast", header: signedAt(now - 301), want: ErrExpired},
		{name: "JustInsideFuture", header: signedAt(now + 300)},
		{name: "JustOutsideFuture", header: signedAt(now + 301), want: ErrExpired},
		{name: "LongAgo", header: signedAt(0), want: ErrExpired},
		{name: "TwelveDigitsIsFarFuture", header: literalTS("999999999999"), want: ErrExpired},
		{name: "BodyChangedFirstByte", body: changed(0), want: ErrBadSignature},
		{name: "BodyChangedMiddleByte", body: changed(len(testBody) / 2), want: ErrBadSignature},
		{name: "BodyChangedLastByte", body: changed(len(testBody) - 1), want: ErrBadSignature},
		{name: "BodyOneByteLonger", body: append([]byte(string(testBody)), '\n'), want: ErrBadSignature},
		{name: "BodyOneByteShorter", body: testBody[:len(testBody)-1], want: ErrBadSignature},
		{name: "BodyEmpty", body: []byte{}, want: ErrBadSignature},
		{name: "WrongSecret", header: func(s Scheme) http.Header { return sign(t, s, now, testBody, oldSecs[s]) }, want: ErrBadSignature},
		{name: "BadSignatureAndExpiredIsBadSignature", header: func(s Scheme) http.Header { return sign(t, s, now-3600, testBody, oldSecs[s]) }, want: ErrBadSignature},
		{name: "SeveralSignaturesFirstGood", header: func(s Scheme) http.Header { return sign(t, s, now, testBody, defaultSecs[s], oldSecs[s]) }},
		{name: "SeveralSignaturesLastGood", header: func(s Scheme) http.Header { return sign(t, s, now, testBody, oldSecs[s], defaultSecs[s]) }},
		{name: "SeveralSignaturesNoneGood", header: func(s Scheme) http.Header { return sign(t, s, now, testBody, oldSecs[s], oldSecs[s]) }, want: ErrBadSignature},
		{name: "TooManySignatures", header: func(s Scheme) http.Header {
			secs := make([]string, MaxSignatures+1)
			for i := range secs {
				secs[i] = defaultSecs[s]
			}
			return sign(t, s, now, testBody, secs...)
		}, want: ErrMalformed},
		{name: "MaxSignatures", header: func(s Scheme) http.Header {
			secs := make([]string, MaxSignatures)
			for i := range secs {
				secs[i] = oldSecs[s]
			}
			secs[MaxSignatures-1] = defaultSecs[s]
			return sign(t, s, now, testBody, secs...)
		}},
	}
	for _, scheme := range []Scheme{SchemeIdem, SchemeStandard} {
		t.Run(string(scheme), func(t *testing.T) {
			t.Parallel()
			runVerifyCases(t, scheme, cases)
		})
	}
}

func runVerifyCases(t *testing.T, scheme Scheme, cases []verifyCase) {
	t.Helper()
	v := verifier(t, scheme, defaultSecs[scheme])
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h http.Header
			if tc.header != nil {
				h = tc.header(scheme)
			} else {
				h = sign(t, scheme, now, testBody, defaultSecs[scheme])
			}
			body := tc.body
			if body == nil {
				body = testBody
			}
			checkErr(t, v.Verify(h, body), tc.want)
		})
	}
}

func checkErr(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("Verify = %v, want nil", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("Verify = %v, want %v", err, want)
	}
	for _, other := range []error{ErrMalformed, ErrExpired, ErrBadSignature} {
		if other != want && errors.Is(err, other) {
			t.Fatalf("Verify = %v: matches both %v and %v", err, want, other)
		}
	}
	for _, s := range []string{idemSecret, idemOld, stdSecret, stdOld} {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("error %q reveals a secret", err)
		}
	}
}

// TestVerifyIdemHeader covers the Idem-Signature syntax.
func TestVerifyIdemHeader(t *testing.T) {
	t.Parallel()
	good := sign(t, SchemeIdem, now, testBody, idemSecret).Get(HeaderIdemSignature)
	ts, sig, _ := strings.Cut(good, ",")
	sig = strings.TrimPrefix(sig, "v1=")
	other := strings.Repeat("ab", 32)
	cases := []struct {
		name, header string
		want         error
	}{
		{"Valid", good, nil},
		{"UppercaseHex", ts + ",v1=" + strings.ToUpper(sig), nil},
		{"SpacesAroundItems", " " + ts + " , v1=" + sig + " ", nil},
		{"SignatureFirst", "v1=" + sig + "," + ts, nil},
		{"UnknownSchemeIgnored", ts + ",v0=zzz,v1=" + sig + ",v2=whatever", nil},
		{"SeveralOneGoodMiddle", ts + ",v1=" + other + ",v1=" + sig + ",v1=" + other, nil},
		{"OnlyUnknownScheme", ts + ",v0=" + sig, ErrMalformed},
		{"NoTimestamp", "v1=" + sig, ErrMalformed},
		{"TwoTimestamps", ts + "," + ts + ",v1=" + sig, ErrMalformed},
		{"ItemWithoutEquals", ts + ",v1=" + sig + ",junk", ErrMalformed},
		{"EmptyItem", ts + ",,v1=" + sig, ErrMalformed},
		{"TrailingComma", ts + ",v1=" + sig + ",", ErrMalformed},
		{"EmptyKey", ts + ",=x,v1=" + sig, ErrMalformed},
		{"BadHex", ts + ",v1=" + strings.Repeat("zz", 32), ErrMalformed},
		{"BadHexBesideGood", ts + ",v1=" + sig + ",v1=" + strings.Repeat("g", 64), ErrMalformed},
		{"HexTooShort", ts + ",v1=" + sig[:62], ErrMalformed},
		{"HexTooLong", ts + ",v1=" + sig + "00", ErrMalformed},
		{"HexOddLength", ts + ",v1=" + sig[:63], ErrMalformed},
		{"EmptySignature", ts + ",v1=", ErrMalformed},
		{"Base64InsteadOfHex", ts + ",v1=" + b64.EncodeToString(make([]byte, 32)), ErrMalformed},
		{"TimestampEdited", "t=" + strconv.Itoa(now+1) + ",v1=" + sig, ErrBadSignature},
		{"TooLong", ts + ",v1=" + sig + ",x=" + strings.Repeat("a", maxHeaderLen), ErrMalformed},
	}
	v := verifier(t, SchemeIdem, idemSecret)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			h.Set(HeaderIdemSignature, tc.header)
			checkErr(t, v.Verify(h, testBody), tc.want)
		})
	}
}

// TestVerifyStandardHeaders covers the Standard Webhooks syntax.
func TestVerifyStandardHeaders(t *testing.T) {
	t.Parallel()
	good := sign(t, SchemeStandard, now, testBody, stdSecret)
	sig := good.Get(HeaderWebhookSignature)
	other := "v1," + b64.EncodeToString(make([]byte, 32))
	raw := strings.TrimPrefix(sig, "v1,")
	set := func(name, value string) http.Header {
		h := good.Clone()
		h.Set(name, value)
		return h
	}
	del := func(name string) http.Header {
		h := good.Clone()
		h.Del(name)
		return h
	}
	cases := []struct {
		name   string
		header http.Header
		want   error
	}{
		{"Valid", good, nil},
		{"MissingID", del(HeaderWebhookID), ErrMalformed},
		{"MissingTimestamp", del(HeaderWebhookTimestamp), ErrMalformed},
		{"MissingSignature", del(HeaderWebhookSignature), ErrMalformed},
		{"EmptyID", set(HeaderWebhookID, ""), ErrMalformed},
		{"IDControlCharacter", set(HeaderWebhookID, "msg_\x01"), ErrMalformed},
		{"IDTooLong", set(HeaderWebhookID, strings.Repeat("m", maxIDLen+1)), ErrMalformed},
		{"IDChanged", set(HeaderWebhookID, "msg_other"), ErrBadSignature},
		{"TimestampChanged", set(HeaderWebhookTimestamp, strconv.Itoa(now+1)), ErrBadSignature},
		{"SeveralOneGoodFirst", set(HeaderWebhookSignature, sig+" "+other), nil},
		{"SeveralOneGoodLast", set(HeaderWebhookSignature, other+" "+other+" "+sig), nil},
		{"ExtraSpaces", set(HeaderWebhookSignature, "  "+other+"   "+sig+" "), nil},
		{"UnknownVersionIgnored", set(HeaderWebhookSignature, "v1a,bm90LWFuLWVkMjU1MTktc2lnbmF0dXJl "+sig), nil},
		{"OnlyUnknownVersion", set(HeaderWebhookSignature, "v1a,"+raw), ErrMalformed},
		{"NoVersion", set(HeaderWebhookSignature, raw), ErrMalformed},
		{"EmptyVersion", set(HeaderWebhookSignature, ","+raw), ErrMalformed},
		{"CommaNotSpace", set(HeaderWebhookSignature, sig+","+other), ErrMalformed},
		{"BadBase64", set(HeaderWebhookSignature, "v1,"+strings.Repeat("!", 44)), ErrMalformed},
		{"BadBase64BesideGood", set(HeaderWebhookSignature, sig+" v1,"+strings.Repeat("*", 44)), ErrMalformed},
		{"URLBase64", set(HeaderWebhookSignature, "v1,"+base64.URLEncoding.EncodeToString(mustDecode(raw))), wantURL(raw)},
		{"MissingPadding", set(HeaderWebhookSignature, "v1,"+strings.TrimRight(raw, "=")), ErrMalformed},
		{"NonCanonicalPadding", set(HeaderWebhookSignature, "v1,"+raw[:42]+nextB64(raw[42])+"="), ErrMalformed},
		{"WrongLengthShort", set(HeaderWebhookSignature, "v1,"+b64.EncodeToString(make([]byte, 31))), ErrMalformed},
		{"WrongLengthLong", set(HeaderWebhookSignature, "v1,"+b64.EncodeToString(make([]byte, 33))), ErrMalformed},
		{"HexInsteadOfBase64", set(HeaderWebhookSignature, "v1,"+hex.EncodeToString(mustDecode(raw))), ErrMalformed},
		{"EmptySignature", set(HeaderWebhookSignature, "v1,"), ErrMalformed},
		{"TwoIDLines", func() http.Header { h := good.Clone(); h.Add(HeaderWebhookID, "msg_x"); return h }(), ErrMalformed},
	}
	v := verifier(t, SchemeStandard, stdSecret)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkErr(t, v.Verify(tc.header, testBody), tc.want)
		})
	}
}

func mustDecode(s string) []byte {
	b, err := b64.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// wantURL: the URL alphabet differs from the standard one only when the
// signature has '+' or '/'; otherwise the same string verifies.
func wantURL(raw string) error {
	if strings.ContainsAny(raw, "+/") {
		return ErrMalformed
	}
	return nil
}

// nextB64 returns the base64 character after c, which changes only the
// padding bits of the last character of a 32-byte encoding.
func nextB64(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.IndexByte(alphabet, c)
	return string(alphabet[(i+1)%64])
}

func TestRotation(t *testing.T) {
	t.Parallel()
	for _, s := range []Scheme{SchemeIdem, SchemeStandard} {
		t.Run(string(s), func(t *testing.T) {
			t.Parallel()
			v := verifier(t, s, defaultSecs[s], oldSecs[s])
			for _, secret := range []string{defaultSecs[s], oldSecs[s]} {
				if err := v.Verify(sign(t, s, now, testBody, secret), testBody); err != nil {
					t.Errorf("signed with one of two secrets: %v", err)
				}
			}
		})
	}
}

func TestSecretsRefused(t *testing.T) {
	t.Parallel()
	b := func(n int) string { return strings.Repeat("k", n) }
	std := func(n int) string { return "whsec_" + b64.EncodeToString([]byte(b(n))) }
	cases := []struct {
		name    string
		scheme  Scheme
		secrets []string
		ok      bool
	}{
		{"IdemNone", SchemeIdem, nil, false},
		{"IdemEmpty", SchemeIdem, []string{""}, false},
		{"IdemShort", SchemeIdem, []string{b(MinSecretLen - 1)}, false},
		{"IdemMinimum", SchemeIdem, []string{b(MinSecretLen)}, true},
		{"IdemOneOfTwoShort", SchemeIdem, []string{b(32), b(3)}, false},
		{"IdemWhsecUsedAsBytes", SchemeIdem, []string{"whsec_abcdefghij"}, true},
		{"StandardNone", SchemeStandard, []string{}, false},
		{"StandardEmpty", SchemeStandard, []string{""}, false},
		{"StandardPrefixOnly", SchemeStandard, []string{"whsec_"}, false},
		{"StandardBadBase64", SchemeStandard, []string{"whsec_!!!!notbase64!!!!!!!!!!!!!!"}, false},
		{"StandardShort", SchemeStandard, []string{std(MinSecretLen - 1)}, false},
		{"StandardMinimum", SchemeStandard, []string{std(MinSecretLen)}, true},
		{"StandardRawBytesTooShortDecoded", SchemeStandard, []string{"whsec_abcdefghijklmnop"}, false}, // 16 chars: 12 bytes
		{"StandardOneOfTwoShort", SchemeStandard, []string{std(32), std(2)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, verr := NewVerifier(tc.scheme, tc.secrets, nil)
			_, serr := NewSigner(tc.scheme, tc.secrets, nil)
			for _, err := range []error{verr, serr} {
				if tc.ok {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					continue
				}
				if !errors.Is(err, ErrSecret) {
					t.Fatalf("err = %v, want ErrSecret", err)
				}
				for _, s := range tc.secrets {
					if len(s) > 6 && strings.Contains(err.Error(), s) {
						t.Fatalf("error %q reveals the secret", err)
					}
				}
			}
		})
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		scheme Scheme
		cfg    *Config
		field  string // in the error; "" means valid
	}{
		{"Nil", SchemeIdem, nil, ""},
		{"Zero", SchemeIdem, &Config{}, ""},
		{"Minimum", SchemeIdem, &Config{Tolerance: MinTolerance}, ""},
		{"Maximum", SchemeIdem, &Config{Tolerance: MaxTolerance}, ""},
		{"Negative", SchemeIdem, &Config{Tolerance: -time.Second}, "Config.Tolerance"},
		{"TooSmall", SchemeIdem, &Config{Tolerance: 500 * time.Millisecond}, "Config.Tolerance"},
		{"TooLarge", SchemeIdem, &Config{Tolerance: MaxTolerance + time.Second}, "Config.Tolerance"},
		{"UnknownScheme", Scheme("stripe"), nil, "scheme"},
		{"EmptyScheme", Scheme(""), nil, "scheme"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewVerifier(tc.scheme, []string{idemSecret}, tc.cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

func TestTolerance(t *testing.T) {
	t.Parallel()
	for _, s := range []Scheme{SchemeIdem, SchemeStandard} {
		t.Run(string(s), func(t *testing.T) {
			t.Parallel()
			v, err := NewVerifier(s, []string{defaultSecs[s]}, &Config{Tolerance: 10 * time.Second, Now: fixedClock(now)})
			if err != nil {
				t.Fatal(err)
			}
			for off, want := range map[int64]error{-11: ErrExpired, -10: nil, 0: nil, 10: nil, 11: ErrExpired} {
				checkErr(t, v.Verify(sign(t, s, now+off, testBody, defaultSecs[s]), testBody), want)
			}
			// Sub-second clock: 10.5 s old is outside a 10 s window.
			v.now = func() time.Time { return time.Unix(now, 500_000_000) }
			checkErr(t, v.Verify(sign(t, s, now-10, testBody, defaultSecs[s]), testBody), ErrExpired)
		})
	}
}

func TestSign(t *testing.T) {
	t.Parallel()
	t.Run("DefaultsToClock", func(t *testing.T) {
		t.Parallel()
		s, err := NewSigner(SchemeIdem, []string{idemSecret}, &Config{Now: fixedClock(now)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.Sign(testBody, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := "t=1700000000,v1=" + hex.EncodeToString(mac([]byte(idemSecret), testBody, "1700000000."))
		if got := h.Get(HeaderIdemSignature); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
	t.Run("RandomID", func(t *testing.T) {
		t.Parallel()
		s, err := NewSigner(SchemeStandard, []string{stdSecret}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := s.Sign(testBody, nil)
		b, _ := s.Sign(testBody, nil)
		ida, idb := a.Get(HeaderWebhookID), b.Get(HeaderWebhookID)
		if !strings.HasPrefix(ida, "msg_") || len(ida) != 30 || ida == idb {
			t.Fatalf("ids %q, %q: want two distinct msg_ + 26 characters", ida, idb)
		}
		v, _ := NewVerifier(SchemeStandard, []string{stdSecret}, nil)
		if err := v.Verify(a, testBody); err != nil {
			t.Fatal(err)
		}
	})
	bad := []struct {
		name   string
		scheme Scheme
		opts   SignOpts
	}{
		{"IDWithIdemScheme", SchemeIdem, SignOpts{ID: "msg_1"}},
		{"IDControlCharacter", SchemeStandard, SignOpts{ID: "msg\n1"}},
		{"IDTooLong", SchemeStandard, SignOpts{ID: strings.Repeat("x", maxIDLen+1)}},
		{"NegativeTimestamp", SchemeIdem, SignOpts{Timestamp: time.Unix(-1, 0)}},
		{"MillisecondTimestamp", SchemeStandard, SignOpts{Timestamp: time.Unix(1_700_000_000_000, 0)}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := NewSigner(tc.scheme, []string{defaultSecs[tc.scheme]}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if h, err := s.Sign(testBody, &tc.opts); err == nil {
				t.Fatalf("Sign = %v, want an error", h)
			}
		})
	}
}
