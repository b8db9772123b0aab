package signature

import (
	"net/http"
	"testing"
	"time"
)

// The Standard Webhooks shared test vector (docs/guarantees.md, G9).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vectorHeader() http.Header {
	h := make(http.Header)
	h.Set(HeaderWebhookID, vectorID)
	h.Set(HeaderWebhookTimestamp, "1614265330")
	h.Set(HeaderWebhookSignature, vectorSignature)
	return h
}

func fixedClock(unix int64) func() time.Time {
	return func() time.Time { return time.Unix(unix, 0) }
}

func TestStandardVector(t *testing.T) {
	t.Parallel()

	t.Run("Verify", func(t *testing.T) {
		t.Parallel()
		v, err := NewVerifier(SchemeStandard, []string{vectorSecret}, &Config{Now: fixedClock(vectorTimestamp)})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(vectorHeader(), []byte(vectorBody)); err != nil {
			t.Fatalf("shared vector does not verify: %v", err)
		}
	})

	t.Run("VerifyWithoutPrefix", func(t *testing.T) {
		t.Parallel()
		v, err := NewVerifier(SchemeStandard, []string{vectorSecret[len(StandardSecretPrefix):]}, &Config{Now: fixedClock(vectorTimestamp)})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(vectorHeader(), []byte(vectorBody)); err != nil {
			t.Fatalf("shared vector does not verify: %v", err)
		}
	})

	t.Run("Sign", func(t *testing.T) {
		t.Parallel()
		s, err := NewSigner(SchemeStandard, []string{vectorSecret}, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.Sign([]byte(vectorBody), &SignOpts{ID: vectorID, Timestamp: time.Unix(vectorTimestamp, 0)})
		if err != nil {
			t.Fatal(err)
		}
		want := vectorHeader()
		for _, name := range []string{HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature} {
			if got := h.Get(name); got != want.Get(name) {
				t.Errorf("%s = %q, want %q", name, got, want.Get(name))
			}
		}
	})
}
