package webhookcmd

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
	idemSecret = "cli-test-secret-0123456789"
	idemOther  = "cli-other-secret-abcdefghij"
	stdSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the shared vector's
	stdOther   = "whsec_c3RhbmRhcmQtb3RoZXIta2V5LTAxMjM0NTY3"
	body       = `{"id":"evt_1","sequence":7,"status":"PAID"}`
)

type result struct {
	stdout, stderr string
	err            error
	code           int
}

// run executes the command in-process as cli.Main does: the error goes to
// stderr and becomes the exit code.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := Command()
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		fmt.Fprintln(&errb, "idem:", err)
	}
	return result{out.String(), errb.String(), err, ExitCode(err)}
}

// headerFlags turns sign's output into verify's --header flags.
func headerFlags(signOut string) []string {
	var args []string
	for line := range strings.Lines(signOut) {
		args = append(args, "--header", strings.TrimSuffix(line, "\n"))
	}
	return args
}

func secretFor(scheme string) (string, string) {
	if scheme == "idem" {
		return idemSecret, idemOther
	}
	return stdSecret, stdOther
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, scheme := range []string{"idem", "standard"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			secret, other := secretFor(scheme)

			t.Run("Now", func(t *testing.T) {
				t.Parallel()
				s := run(t, body, "sign", "--scheme", scheme, "--secret", secret)
				if s.code != 0 {
					t.Fatalf("sign: %d %s", s.code, s.stderr)
				}
				v := run(t, body, append([]string{"verify", "--scheme", scheme, "--secret", secret}, headerFlags(s.stdout)...)...)
				if v.code != 0 || v.stdout != "ok\n" {
					t.Fatalf("verify: %d %q %s", v.code, v.stdout, v.stderr)
				}
			})

			t.Run("FixedTimeRotation", func(t *testing.T) {
				t.Parallel()
				s := run(t, body, "sign", "--scheme", scheme, "--secret", other, "--timestamp", "1700000000")
				if s.code != 0 {
					t.Fatalf("sign: %d %s", s.code, s.stderr)
				}
				v := run(t, body, append([]string{"verify", "--scheme", scheme, "--secret", secret, "--secret", other, "--now", "1700000100"}, headerFlags(s.stdout)...)...)
				if v.code != 0 {
					t.Fatalf("verify: %d %s", v.code, v.stderr)
				}
			})

			t.Run("SignWithTwoSecrets", func(t *testing.T) {
				t.Parallel()
				s := run(t, body, "sign", "--scheme", scheme, "--secret", other, "--secret", secret)
				if s.code != 0 {
					t.Fatalf("sign: %d %s", s.code, s.stderr)
				}
				for _, sec := range []string{secret, other} {
					v := run(t, body, append([]string{"verify", "--scheme", scheme, "--secret", sec}, headerFlags(s.stdout)...)...)
					if v.code != 0 {
						t.Fatalf("verify with one of two: %d %s", v.code, v.stderr)
					}
				}
			})
		})
	}
}

func TestSignOutput(t *testing.T) {
	t.Parallel()
	s := run(t, `{"test": 2432232314}`, "sign", "--scheme", "standard", "--secret", stdSecret,
		"--id", "msg_p5jXN8AQM9LWM0D4loKWxJek", "--timestamp", "1614265330")
	want := "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek\n" +
		"webhook-timestamp: 1614265330\n" +
		"webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=\n"
	if s.code != 0 || s.stdout != want {
		t.Fatalf("sign = %d %q %s, want %q", s.code, s.stdout, s.stderr, want)
	}
	i := run(t, "", "sign", "--scheme", "idem", "--secret", idemSecret, "--timestamp", "1700000000")
	if i.code != 0 || !strings.HasPrefix(i.stdout, "Idem-Signature: t=1700000000,v1=") || strings.Count(i.stdout, "\n") != 1 {
		t.Fatalf("sign idem = %d %q %s", i.code, i.stdout, i.stderr)
	}
}

// TestSharedVector runs the Standard Webhooks shared vector through verify.
func TestSharedVector(t *testing.T) {
	t.Parallel()
	args := []string{"verify", "--scheme", "standard", "--secret", stdSecret, "--now", "1614265330",
		"--header", "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek",
		"--header", "webhook-timestamp: 1614265330",
		"--header", "webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
	if r := run(t, `{"test": 2432232314}`, args...); r.code != 0 {
		t.Fatalf("shared vector: %d %s", r.code, r.stderr)
	}
	if r := run(t, `{"test": 2432232315}`, args...); r.code != 1 || !errors.Is(r.err, signature.ErrBadSignature) {
		t.Fatalf("shared vector, body changed: %d %s", r.code, r.stderr)
	}
}

func TestVerifyFailures(t *testing.T) {
	t.Parallel()
	const at = 1_700_000_000
	for _, scheme := range []string{"idem", "standard"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			secret, other := secretFor(scheme)
			signed := func(unix int64, sec string) []string {
				s := run(t, body, "sign", "--scheme", scheme, "--secret", sec, "--timestamp", strconv.FormatInt(unix, 10))
				if s.code != 0 {
					t.Fatalf("sign: %s", s.stderr)
				}
				return headerFlags(s.stdout)
			}
			good := signed(at, secret)
			cases := []struct {
				name    string
				body    string
				args    []string
				want    error
				message string // on stderr
			}{
				{"Valid", body, good, nil, ""},
				{"NoHeaders", body, nil, signature.ErrMalformed, "malformed"},
				{"TimestampMilliseconds", body, milliseconds(scheme, good), signature.ErrMalformed, "milliseconds"},
				{"BodyChangedOneByte", strings.Replace(body, "7", "8", 1), good, signature.ErrBadSignature, "bad signature"},
				{"WrongSecret", body, signed(at, other), signature.ErrBadSignature, "bad signature"},
				{"JustInsidePast", body, signed(at-300, secret), nil, ""},
				{"JustOutsidePast", body, signed(at-301, secret), signature.ErrExpired, "expired"},
				{"JustInsideFuture", body, signed(at+300, secret), nil, ""},
				{"JustOutsideFuture", body, signed(at+301, secret), signature.ErrExpired, "expired"},
				{"ToleranceFlag", body, append(signed(at-301, secret), "--tolerance", "10m"), nil, ""},
				{"ShortToleranceFlag", body, append(signed(at-11, secret), "--tolerance", "10s"), signature.ErrExpired, "expired"},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					r := run(t, tc.body, append([]string{"verify", "--scheme", scheme, "--secret", secret, "--now", strconv.Itoa(at)}, tc.args...)...)
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

// milliseconds rewrites the timestamp of signed header flags into
// milliseconds (the signature no longer matters: it is malformed first).
func milliseconds(scheme string, flags []string) []string {
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

func TestUsage(t *testing.T) {
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
			r := run(t, body, tc.args...)
			if r.code != 2 || !errors.Is(r.err, ErrUsage) || r.stderr == "" {
				t.Fatalf("exit %d, err %v; want 2 with a usage error", r.code, r.err)
			}
			if strings.Contains(r.stderr, idemSecret) {
				t.Fatalf("stderr %q reveals the secret", r.stderr)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]int{
		nil:                        0,
		usagef("x"):                2,
		signature.ErrMalformed:     1,
		signature.ErrExpired:       1,
		signature.ErrBadSignature:  1,
		errors.New("stdin closed"): 1,
	} {
		if got := ExitCode(err); got != want {
			t.Errorf("ExitCode(%v) = %d, want %d", err, got, want)
		}
	}
}
