package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/store/memstore"
)

// Every malformed key and oversized body gets its status and problem type
// from the proxy, leaves no record behind, and is never forwarded upstream.
func TestBadInputNeverForwarded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		q      req
		status int
		slug   string
	}{
		{"KeyTooLong", req{key: strings.Repeat("k", 256), body: "x"}, http.StatusBadRequest, "idempotency-key-invalid"},
		{"KeyControlChar", req{header: http.Header{"Idempotency-Key": {"a\tb"}}, body: "x"}, http.StatusBadRequest, "idempotency-key-invalid"},
		{"KeyNonASCII", req{header: http.Header{"Idempotency-Key": {"clé"}}, body: "x"}, http.StatusBadRequest, "idempotency-key-invalid"},
		{"KeyTwoLines", req{header: http.Header{"Idempotency-Key": {"a", "b"}}, body: "x"}, http.StatusBadRequest, "idempotency-key-invalid"},
		{"KeyEmptyQuoted", req{header: http.Header{"Idempotency-Key": {`""`}}, body: "x"}, http.StatusBadRequest, "idempotency-key-missing"},
		{"KeyUnterminatedQuote", req{header: http.Header{"Idempotency-Key": {`"abc`}}, body: "x"}, http.StatusBadRequest, "idempotency-key-invalid"},
		{"BodyOverLimit", req{key: "k", body: strings.Repeat("x", 65)}, http.StatusRequestEntityTooLarge, "body-too-large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, up, st, _ := setup(t, "Memory", func(c *Config) { c.MaxBody = 64 })
			f.send(t, tt.q).expect(t, tt.status, tt.slug)
			if up.calls.Load() != 0 {
				t.Fatalf("forwarded upstream %d times", up.calls.Load())
			}
			if n := st.(*memstore.Store).Len(); n != 0 {
				t.Fatalf("%d records left behind", n)
			}
		})
	}

	t.Run("OtherBodyNeverForwarded", func(t *testing.T) {
		t.Parallel()
		f, up, st, _ := setup(t, "Memory", nil)
		f.send(t, req{key: "k", body: "first"}).expect(t, http.StatusCreated, "")
		f.send(t, req{key: "k", body: "second"}).expect(t, http.StatusUnprocessableEntity, "idempotency-key-reused")
		if up.calls.Load() != 1 || st.(*memstore.Store).Len() != 1 {
			t.Fatalf("upstream calls %d, records %d", up.calls.Load(), st.(*memstore.Store).Len())
		}
	})

	t.Run("QuotedAndBareNameOneKey", func(t *testing.T) {
		t.Parallel()
		f, up, _, _ := setup(t, "Memory", nil)
		f.send(t, req{key: "abc", body: "x"}).expect(t, http.StatusCreated, "")
		r := f.send(t, req{key: `"abc"`, body: "x"}).expect(t, http.StatusCreated, "")
		if r.header.Get("Idempotent-Replayed") != "true" || up.calls.Load() != 1 {
			t.Fatalf("quoted key not the same key: replayed %q, upstream calls %d", r.header.Get("Idempotent-Replayed"), up.calls.Load())
		}
	})
}
