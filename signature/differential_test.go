package signature

// The reference Go library (github.com/standard-webhooks/standard-webhooks/
// libraries) could not be added: its go.mod declares another module path, so
// the module proxy serves no package under the import path. In its place,
// refImpl below is an independent re-implementation written from the two
// specifications, sharing no code with the package (no mac, no parsers, no
// base64 settings): it formats with fmt.Sprintf and compares encoded strings,
// as the reference library does.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

type refImpl struct{}

func (refImpl) key(scheme Scheme, secret string) []byte {
	if scheme == SchemeIdem {
		return []byte(secret)
	}
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return k
}

func (r refImpl) sign(scheme Scheme, secret, id string, ts int64, body []byte) string {
	h := hmac.New(sha256.New, r.key(scheme, secret))
	if scheme == SchemeIdem {
		h.Write([]byte(fmt.Sprintf("%d.%s", ts, body)))
		return hex.EncodeToString(h.Sum(nil))
	}
	h.Write([]byte(fmt.Sprintf("%s.%d.%s", id, ts, body)))
	return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// headers signs with every secret, the way a sender would.
func (r refImpl) headers(scheme Scheme, secrets []string, id string, ts int64, body []byte) http.Header {
	h := http.Header{}
	var sigs []string
	for _, s := range secrets {
		sigs = append(sigs, r.sign(scheme, s, id, ts, body))
	}
	if scheme == SchemeIdem {
		h.Set("Idem-Signature", "t="+strconv.FormatInt(ts, 10)+",v1="+strings.Join(sigs, ",v1="))
		return h
	}
	h.Set("Webhook-Id", id)
	h.Set("Webhook-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("Webhook-Signature", strings.Join(sigs, " "))
	return h
}

// verify reports whether h signs body under secret at clock now.
func (r refImpl) verify(scheme Scheme, secret string, h http.Header, body []byte, now time.Time) error {
	var tsStr, id string
	var passed []string
	if scheme == SchemeIdem {
		for _, item := range strings.Split(h.Get("Idem-Signature"), ",") {
			if v, ok := strings.CutPrefix(item, "t="); ok {
				tsStr = v
			} else if v, ok := strings.CutPrefix(item, "v1="); ok {
				passed = append(passed, v)
			}
		}
	} else {
		id, tsStr = h.Get("Webhook-Id"), h.Get("Webhook-Timestamp")
		passed = strings.Split(h.Get("Webhook-Signature"), " ")
	}
	ts, err := strconv.ParseInt(tsStr, 10, 64)
	if err != nil || (scheme == SchemeStandard && id == "") {
		return errors.New("ref: invalid headers")
	}
	if d := now.Unix() - ts; d > 300 || d < -300 {
		return errors.New("ref: timestamp out of tolerance")
	}
	want := r.sign(scheme, secret, id, ts, body)
	for _, p := range passed {
		if hmac.Equal([]byte(p), []byte(want)) {
			return nil
		}
	}
	return errors.New("ref: no matching signature")
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// randSecret returns a secret in the scheme's format, 16 to 64 key bytes.
func randSecret(rng *rand.Rand, scheme Scheme) string {
	key := randBytes(rng, MinSecretLen+rng.IntN(49))
	if scheme == SchemeIdem {
		return string(key) // any bytes, used as they are
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// randID returns a printable webhook-id of 1 to 64 bytes, dots included.
func randID(rng *rand.Rand) string {
	b := make([]byte, 1+rng.IntN(64))
	for i := range b {
		b[i] = byte(0x20 + rng.IntN(0x7f-0x20))
	}
	return string(b)
}

func randBody(rng *rand.Rand) []byte {
	if rng.IntN(10) == 0 {
		return []byte{}
	}
	return randBytes(rng, rng.IntN(2048))
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	const rounds = 1000 // per scheme
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var ref refImpl
	total := 0
	for _, scheme := range []Scheme{SchemeIdem, SchemeStandard} {
		rng := rand.New(rand.NewPCG(seed, uint64(len(scheme))))
		checks := 0
		for i := range rounds {
			clock := time.Unix(1_500_000_000+rng.Int64N(500_000_000), 0)
			ts := clock.Unix() - 300 + rng.Int64N(601) // inside the window
			secrets := make([]string, 1+rng.IntN(3))
			for j := range secrets {
				secrets[j] = randSecret(rng, scheme)
			}
			body := randBody(rng)
			id := ""
			if scheme == SchemeStandard {
				id = randID(rng)
			}
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("%s round %d (seed %d): "+format, append([]any{scheme, i, seed}, args...)...)
			}

			// We sign, they verify, with each secret.
			s, err := NewSigner(scheme, secrets, nil)
			if err != nil {
				fail("NewSigner: %v", err)
			}
			ours, err := s.Sign(body, &SignOpts{ID: id, Timestamp: time.Unix(ts, 0)})
			if err != nil {
				fail("Sign: %v", err)
			}
			for _, sec := range secrets {
				if err := ref.verify(scheme, sec, ours, body, clock); err != nil {
					fail("we sign, they verify: %v", err)
				}
				checks++
			}

			// They sign, we verify, with every secret or with one of them.
			theirs := ref.headers(scheme, secrets, id, ts, body)
			for _, name := range []string{HeaderIdemSignature, HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature} {
				if ours.Get(name) != theirs.Get(name) {
					fail("%s: ours %q, theirs %q", name, ours.Get(name), theirs.Get(name))
				}
			}
			checks++
			one := secrets[rng.IntN(len(secrets))]
			v, err := NewVerifier(scheme, []string{randSecret(rng, scheme), one}, &Config{Now: func() time.Time { return clock }})
			if err != nil {
				fail("NewVerifier: %v", err)
			}
			if err := v.Verify(theirs, body); err != nil {
				fail("they sign, we verify: %v", err)
			}
			checks++

			// A one-byte change to the body: both refuse.
			if len(body) > 0 {
				bad := append([]byte(nil), body...)
				bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
				if err := v.Verify(theirs, bad); !errors.Is(err, ErrBadSignature) {
					fail("changed body, we say %v", err)
				}
				if ref.verify(scheme, one, ours, bad, clock) == nil {
					fail("changed body, they accept")
				}
				checks += 2
			}

			// Outside the window: both refuse; we say expired.
			late := clock.Unix() + 301 + rng.Int64N(10_000)
			if rng.IntN(2) == 0 {
				late = clock.Unix() - 301 - rng.Int64N(10_000)
			}
			old := ref.headers(scheme, []string{one}, id, late, body)
			if err := v.Verify(old, body); !errors.Is(err, ErrExpired) {
				fail("outside the window, we say %v", err)
			}
			if ref.verify(scheme, one, old, body, clock) == nil {
				fail("outside the window, they accept")
			}
			checks += 2
		}
		t.Logf("%s: %d rounds, %d checks", scheme, rounds, checks)
		total += checks
	}
	t.Logf("differential: %d checks in all", total)
}
