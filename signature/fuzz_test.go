package signature

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/; the f.Add calls below
// repeat the shapes that matter so `go test` alone exercises them.

func FuzzIdemHeader(f *testing.F) {
	good := withTimestamp(SchemeIdem, "1700000000", testBody, idemSecret).Get(HeaderIdemSignature)
	for _, s := range []string{good, "", "t=1,v1=", "t=1700000000000,v1=00", "v1=ab,t=1", "t=1,,v1=x", " t = 1 "} {
		f.Add(s)
	}
	v, err := NewVerifier(SchemeIdem, []string{idemSecret}, &Config{Now: fixedClock(now)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseIdemHeader(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("parse error %v is not ErrMalformed", err)
			}
		} else {
			if len(h.sigs) == 0 || len(h.sigs) > MaxSignatures || h.unix < 0 || h.unix >= maxUnix {
				t.Fatalf("parsed %+v out of bounds", h)
			}
			for _, sig := range h.sigs {
				if len(sig) != 32 {
					t.Fatalf("signature of %d bytes", len(sig))
				}
			}
			// Round trip: format then parse gives the same values.
			again, err := parseIdemHeader(formatIdemHeader(h.unix, h.sigs))
			if err != nil || again.ts != h.ts || again.unix != h.unix || len(again.sigs) != len(h.sigs) {
				t.Fatalf("round trip of %q: %+v, %v", s, again, err)
			}
			for i := range h.sigs {
				if !bytes.Equal(again.sigs[i], h.sigs[i]) {
					t.Fatalf("round trip of %q changed signature %d", s, i)
				}
			}
		}
		hdr := http.Header{}
		hdr.Set(HeaderIdemSignature, s)
		checkVerifyErr(t, v.Verify(hdr, testBody), err)
	})
}

func FuzzStandardHeaders(f *testing.F) {
	good := withTimestamp(SchemeStandard, "1700000000", testBody, stdSecret)
	f.Add(good.Get(HeaderWebhookID), good.Get(HeaderWebhookTimestamp), good.Get(HeaderWebhookSignature))
	f.Add(vectorID, "1614265330", vectorSignature)
	f.Add("msg_1", "1700000000000", "v1,AAAA")
	f.Add("", "", "")
	f.Add("m", "-1", "v1a,xyz v1,!!!")
	v, err := NewVerifier(SchemeStandard, []string{stdSecret}, &Config{Now: fixedClock(now)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, ts, sig string) {
		sigs, err := parseStandardSignatures(sig)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("parse error %v is not ErrMalformed", err)
			}
		} else {
			if len(sigs) == 0 || len(sigs) > MaxSignatures {
				t.Fatalf("%d signatures", len(sigs))
			}
			again, err := parseStandardSignatures(formatStandardSignatures(sigs))
			if err != nil || len(again) != len(sigs) {
				t.Fatalf("round trip of %q: %d, %v", sig, len(again), err)
			}
			for i := range sigs {
				if len(sigs[i]) != 32 || !bytes.Equal(again[i], sigs[i]) {
					t.Fatalf("round trip of %q changed signature %d", sig, i)
				}
			}
		}
		hdr := http.Header{}
		hdr.Set(HeaderWebhookID, id)
		hdr.Set(HeaderWebhookTimestamp, ts)
		hdr.Set(HeaderWebhookSignature, sig)
		// Whatever the id and timestamp, a malformed signature header can
		// only give ErrMalformed.
		checkVerifyErr(t, v.Verify(hdr, testBody), err)

		// A well-formed id and timestamp, signed for real, must verify.
		if checkID(id) == nil {
			if unix, err := parseTimestamp(ts); err == nil {
				s, _ := NewSigner(SchemeStandard, []string{stdSecret}, nil)
				h, err := s.Sign(testBody, &SignOpts{ID: id, Timestamp: time.Unix(unix, 0)})
				if err != nil {
					t.Fatalf("Sign(%q, %q): %v", id, ts, err)
				}
				vv, _ := NewVerifier(SchemeStandard, []string{stdSecret}, &Config{Now: fixedClock(unix)})
				if err := vv.Verify(h, testBody); err != nil {
					t.Fatalf("round trip of id %q ts %q: %v", id, ts, err)
				}
			}
		}
	})
}

// checkVerifyErr: Verify returns nil or exactly one sentinel, and
// ErrMalformed whenever the parser refused.
func checkVerifyErr(t *testing.T, err, parseErr error) {
	t.Helper()
	if parseErr != nil && !errors.Is(err, ErrMalformed) {
		t.Fatalf("parser refused (%v) but Verify = %v", parseErr, err)
	}
	if err == nil {
		return
	}
	n := 0
	for _, s := range []error{ErrMalformed, ErrExpired, ErrBadSignature} {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("Verify = %v: matches %d sentinels, want 1", err, n)
	}
}
