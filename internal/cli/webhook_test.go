package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/signature"
)

const (
	idemSecret  = "cli-test-secret-0123456789"
	idemOther   = "cli-other-secret-abcdefghij"
	stdSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the shared vector's
	stdOther    = "whsec_c3RhbmRhcmQtb3RoZXIta2V5LTAxMjM0NTY3"
	webhookBody = `{"id":"evt_1","sequence":7,"status":"PAID"}`
)

type webhookResult struct {
	stdout, stderr string
	err            error
	code           int
}

// runWebhook runs `idem webhook args...` in-process with stdin, as Main
// does, keeping the error the exit code comes from.
func runWebhook(t *testing.T, stdin string, args ...string) webhookResult {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := execute(context.Background(), append([]string{"webhook"}, args...), strings.NewReader(stdin), &out, &errb)
	return webhookResult{out.String(), errb.String(), err, code}
}

// webhookHeaderFlags turns sign's output into verify's --header flags.
func webhookHeaderFlags(signOut string) []string {
	var args []string
	for line := range strings.Lines(signOut) {
		args = append(args, "--header", strings.TrimSuffix(line, "\n"))
	}
	return args
}

func webhookSecrets(scheme string) (string, string) {
	if scheme == "idem" {
		return idemSecret, idemOther
	}
	return stdSecret, stdOther
}

func TestWebhookRoundTrip(t *testing.T) {
	t.Parallel()
	for _, scheme := range []string{"idem", "standard"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			secret, other := webhookSecrets(scheme)

			t.Run("Now", func(t *testing.T) {
				t.Parallel()
				s := runWebhook(t, webhookBody, "sign", "--scheme", scheme, "--secret", secret)
				if s.code != 0 {
					t.Fatalf("sign: %d %s", s.code, s.stderr)
				}
				v := runWebhook(t, webhookBody, append([]string{"verify", "--scheme", scheme, "--secret", secret}, webhookHeaderFlags(s.stdout)...)...)
				if v.code != 0 || v.stdout != "ok\n" {
					t.Fatalf("verify: %d %q %s", v.code, v.stdout, v.stderr)
				}
			})

			t.Run("FixedTimeRotation", func(t *testing.T) {
				t.Parallel()
				s := runWebhook(t, webhookBody, "sign", "--scheme", scheme, "--secret", other, "--timestamp", "1700000000")
				if s.code != 0 {
					t.Fatalf("sign: %d %s", s.code, s.stderr)
				}
				v := runWebhook(t, webhookBody, append([]string{"verify", "--scheme", scheme, "--secret", secret, "--secret", other, "--now", "1700000100"}, webhookHeaderFlags(s.stdout)...)...)
				if v.code != 0 {
					t.Fatalf("verify: %d %s", v.code, v.stderr)
				}
			})

			t.Run("SignWithTwoSecrets", func(t *testing.T) {
				t.Parallel()
				s := runWebhook(t, webhookBody, "sign", "--scheme", scheme, "--secret", other, "--secret", secret)
				if s.code != 0 {
					t.Fatalf("sign: %d %s", s.code, s.stderr)
				}
				for _, sec := range []string{secret, other} {
					v := runWebhook(t, webhookBody, append([]string{"verify", "--scheme", scheme, "--secret", sec}, webhookHeaderFlags(s.stdout)...)...)
					if v.code != 0 {
						t.Fatalf("verify with one of two: %d %s", v.code, v.stderr)
					}
				}
			})
		})
	}
}

func TestWebhookSignOutput(t *testing.T) {
	t.Parallel()
	s := runWebhook(t, `{"test": 2432232314}`, "sign", "--scheme", "standard", "--secret", stdSecret,
		"--id", "msg_p5jXN8AQM9LWM0D4loKWxJek", "--timestamp", "1614265330")
	want := "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek\n" +
		"webhook-timestamp: 1614265330\n" +
		"webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=\n"
	if s.code != 0 || s.stdout != want {
		t.Fatalf("sign = %d %q %s, want %q", s.code, s.stdout, s.stderr, want)
	}
	i := runWebhook(t, "", "sign", "--scheme", "idem", "--secret", idemSecret, "--timestamp", "1700000000")
	if i.code != 0 || !strings.HasPrefix(i.stdout, "Idem-Signature: t=1700000000,v1=") || strings.Count(i.stdout, "\n") != 1 {
		t.Fatalf("sign idem = %d %q %s", i.code, i.stdout, i.stderr)
	}
}

// TestWebhookSharedVector runs the Standard Webhooks shared vector through verify.
func TestWebhookSharedVector(t *testing.T) {
	t.Parallel()
	args := []string{"verify", "--scheme", "standard", "--secret", stdSecret, "--now", "1614265330",
		"--header", "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek",
		"--header", "webhook-timestamp: 1614265330",
		"--header", "webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
	if r := runWebhook(t, `{"test": 2432232314}`, args...); r.code != 0 {
		t.Fatalf("shared vector: %d %s", r.code, r.stderr)
	}
	if r := runWebhook(t, `{"test": 2432232315}`, args...); r.code != 1 || !errors.Is(r.err, signature.ErrBadSignature) {
		t.Fatalf("shared vector, body changed: %d %s", r.code, r.stderr)
	}
}

func TestWebhookVerifyFailures(t *testing.T) {
	t.Parallel()
	const at = 1_700_000_000
	for _, scheme := range []string{"idem", "standard"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			secret, other := webhookSecrets(scheme)
			signed := func(unix int64, sec string) []string {
				s := runWebhook(t, webhookBody, "sign", "--scheme", scheme, "--secret", sec, "--timestamp", strconv.FormatInt(unix, 10))
				if s.code != 0 {
					t.Fatalf("sign: %s", s.stderr)
				}
				return webhookHeaderFlags(s.stdout)
			}
			good := signed(at, secret)
			cases := []struct {
				name    string
				body    string
				args    []string
				want    error
				message string // on stderr
			}{
				{"Valid", webhookBody, good, nil, ""},
				{"NoHeaders", webhookBody, nil, signature.ErrMalformed, "malformed"},
				{"TimestampMilliseconds", webhookBody, webhookMilliseconds(scheme, good), signature.ErrMalformed, "milliseconds"},
				{"BodyChangedOneByte", strings.Replace(webhookBody, "7", "8", 1), good, signature.ErrBadSignature, "bad signature"},
				{"WrongSecret", webhookBody, signed(at, other), signature.ErrBadSignature, "bad signature"},
				{"JustInsidePast", webhookBody, signed(at-300, secret), nil, ""},
				{"JustOutsidePast", webhookBody, signed(at-301, secret), signature.ErrExpired, "expired"},
				{"JustInsideFuture", webhookBody, signed(at+300, secret), nil, ""},
				{"JustOutsideFuture", webhookBody, signed(at+301, secret), signature.ErrExpired, "expired"},
				{"ToleranceFlag", webhookBody, append(signed(at-301, secret), "--tolerance", "10m"), nil, ""},
				{"ShortToleranceFlag", webhookBody, append(signed(at-11, secret), "--tolerance", "10s"), signature.ErrExpired, "expired"},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					r := runWebhook(t, tc.body, append([]string{"verify", "--scheme", scheme, "--secret", secret, "--now", strconv.Itoa(at)}, tc.args...)...)
					if tc.want == nil {
						if r.code != 0 {
							t.Fatalf("exit %d: %s", r.code, r.stderr)
						}
						return
					}
					if r.code != 1 || !errors.Is(r.err, tc.want) || !strings.Contains(r.stderr, tc.message) {
						t.Fatalf("exit %d, stderr %q; want 1 with %q (%v)", r.code, r.stderr, tc.message, tc.want)
					}
					if strings.Contains(r.stderr, secret) || strings.Contains(r.stderr, other) {
						t.Fatalf("stderr %q reveals a secret", r.stderr)
					}
				})
			}
		})
	}
}

// webhookMilliseconds rewrites the timestamp of signed header flags into
// milliseconds (the signature no longer matters: it is malformed first).
func webhookMilliseconds(scheme string, flags []string) []string {
	out := append([]string(nil), flags...)
	for i, f := range out {
		if scheme == "idem" {
			out[i] = strings.Replace(f, "t=1700000000", "t=1700000000000", 1)
		} else if strings.HasPrefix(f, "webhook-timestamp:") {
			out[i] = "webhook-timestamp: 1700000000000"
		}
	}
	return out
}

func TestWebhookUsage(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
	}{
		{"SignNoScheme", []string{"sign", "--secret", idemSecret}},
		{"SignUnknownScheme", []string{"sign", "--scheme", "stripe", "--secret", idemSecret}},
		{"SignNoSecret", []string{"sign", "--scheme", "idem"}},
		{"SignEmptySecret", []string{"sign", "--scheme", "idem", "--secret", ""}},
		{"SignShortSecret", []string{"sign", "--scheme", "idem", "--secret", "short"}},
		{"SignShortStandardSecret", []string{"sign", "--scheme", "standard", "--secret", "whsec_c2hvcnQ="}},
		{"SignBadBase64Secret", []string{"sign", "--scheme", "standard", "--secret", "whsec_%%%%%%%%%%%%%%%%%%%%%%%%"}},
		{"SignIDWithIdem", []string{"sign", "--scheme", "idem", "--secret", idemSecret, "--id", "msg_1"}},
		{"SignBadID", []string{"sign", "--scheme", "standard", "--secret", stdSecret, "--id", "msg\x01"}},
		{"SignNegativeTimestamp", []string{"sign", "--scheme", "idem", "--secret", idemSecret, "--timestamp", "-1"}},
		{"SignMillisecondTimestamp", []string{"sign", "--scheme", "idem", "--secret", idemSecret, "--timestamp", "1700000000000"}},
		{"SignNonNumericTimestamp", []string{"sign", "--scheme", "idem", "--secret", idemSecret, "--timestamp", "now"}},
		{"SignUnknownFlag", []string{"sign", "--scheme", "idem", "--secret", idemSecret, "--bogus"}},
		{"SignArgument", []string{"sign", "--scheme", "idem", "--secret", idemSecret, "extra"}},
		{"VerifyNoSecret", []string{"verify", "--scheme", "idem"}},
		{"VerifyShortSecret", []string{"verify", "--scheme", "standard", "--secret", "whsec_c2hvcnQ="}},
		{"VerifyBadHeader", []string{"verify", "--scheme", "idem", "--secret", idemSecret, "--header", "no colon"}},
		{"VerifyEmptyHeaderName", []string{"verify", "--scheme", "idem", "--secret", idemSecret, "--header", ": v"}},
		{"VerifyZeroTolerance", []string{"verify", "--scheme", "idem", "--secret", idemSecret, "--tolerance", "0s"}},
		{"VerifyHugeTolerance", []string{"verify", "--scheme", "idem", "--secret", idemSecret, "--tolerance", "48h"}},
		{"VerifyBadTolerance", []string{"verify", "--scheme", "idem", "--secret", idemSecret, "--tolerance", "soon"}},
		{"VerifyBadNow", []string{"verify", "--scheme", "idem", "--secret", idemSecret, "--now", "x"}},
		{"WebhookArgument", []string{"bogus"}},
		{"WebhookNoSubcommand", []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runWebhook(t, webhookBody, tc.args...)
			var ue usageError
			if r.code != 2 || !errors.As(r.err, &ue) || !strings.HasPrefix(r.stderr, "idem: usage: ") {
				t.Fatalf("exit %d, err %v; want 2 with a usage error", r.code, r.err)
			}
			if strings.Contains(r.stderr, idemSecret) {
				t.Fatalf("stderr %q reveals the secret", r.stderr)
			}
		})
	}
}

// TestExitCode: the one mapping from a command's error to the exit code.
func TestExitCode(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]int{
		nil:                0,
		usagef("x"):        2,
		webhookUsagef("x"): 2,
		fmt.Errorf("run: %w", usageError{errors.New("x")}): 2,
		signature.ErrMalformed:                             1,
		signature.ErrExpired:                               1,
		signature.ErrBadSignature:                          1,
		errors.New("stdin closed"):                         1,
	} {
		if got := exitCode(err); got != want {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, want)
		}
	}
}
