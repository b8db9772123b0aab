package httpidem_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"

	"github.com/idemhq/idem/httpidem"
)

// Method names are case-sensitive, but many servers take "post" for POST:
// a keyed "post" must not pass unguarded (it would run as often as it is
// sent), so it is refused.
func TestMethodInAnotherCase(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	h := b.mw.Wrap(c) // any handler: a mux would not route "post" at all
	for _, m := range []string{"post", "Post", "pAtCh"} {
		rec := serve(h, req(m, "/charges", "k", "x"))
		wantProblem(t, rec, http.StatusBadRequest, httpidem.SlugMethodInvalid)
	}
	wantCalls(t, c, 0)
	wantNoRecord(t, b.store, scope("k"))
	// Methods that do not take part, in any case, pass as before.
	if rec := serve(h, req("get", "/charges", "k", "")); rec.Code != http.StatusCreated {
		t.Fatalf("get: %d", rec.Code)
	}
}

// A stored gzip body is replayed as stored to a retry that accepts gzip
// (or says nothing), decoded to one that refuses it, and a coding that
// cannot be undone here is 406, never a re-run.
func TestReplayRespectsAcceptEncoding(t *testing.T) {
	t.Parallel()
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, `{"charge":"ch_1"}`)
	zw.Close()
	for _, tt := range []struct {
		name, coding string
		stored       []byte
		accept       []string // nil: no header
		status       int
		body         string
		encoded      bool
	}{
		{"GzipAccepted", "gzip", zipped.Bytes(), []string{"gzip, deflate"}, 201, zipped.String(), true},
		{"NoHeader", "gzip", zipped.Bytes(), nil, 201, zipped.String(), true},
		{"Identity", "gzip", zipped.Bytes(), []string{"identity"}, 201, `{"charge":"ch_1"}`, false},
		{"GzipQZero", "gzip", zipped.Bytes(), []string{"br, gzip;q=0"}, 201, `{"charge":"ch_1"}`, false},
		{"StarAccepts", "gzip", zipped.Bytes(), []string{"*"}, 201, zipped.String(), true},
		{"BrotliRefused", "br", []byte("\x0bopaque"), []string{"gzip"}, 406, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			calls := 0
			h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", tt.coding)
				w.WriteHeader(http.StatusCreated)
				w.Write(tt.stored)
			}))
			first := req("POST", "/charges", "k", "x")
			first.Header.Set("Accept-Encoding", tt.coding)
			if rec := serve(h, first); rec.Code != http.StatusCreated {
				t.Fatalf("first: %d", rec.Code)
			}
			retry := req("POST", "/charges", "k", "x")
			if tt.accept != nil {
				retry.Header["Accept-Encoding"] = tt.accept
			}
			rec := serve(h, retry)
			if tt.status == http.StatusNotAcceptable {
				wantProblem(t, rec, http.StatusNotAcceptable, httpidem.SlugEncodingNotAcceptable)
			} else if rec.Code != tt.status || rec.Body.String() != tt.body || rec.Header().Get(httpidem.HeaderReplayed) != "true" {
				t.Fatalf("replay: %d %q, want %d %q", rec.Code, rec.Body, tt.status, tt.body)
			}
			if got := rec.Header().Get("Content-Encoding") != ""; tt.status != 406 && got != tt.encoded {
				t.Fatalf("Content-Encoding %q, want encoded=%v", rec.Header().Get("Content-Encoding"), tt.encoded)
			}
			if calls != 1 {
				t.Fatalf("ran %d times", calls)
			}
		})
	}
}

// A handler that cannot vouch for its body (MarkNotStored) completes the
// key without it: the first client gets the response, a retry gets 409
// response-not-stored, and the handler never runs again.
func TestMarkNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	calls := 0
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		httpidem.MarkNotStored(r)
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "maybe cut")
	}))
	if rec := serve(h, req("POST", "/charges", "k", "x")); rec.Code != http.StatusOK || rec.Body.String() != "maybe cut" {
		t.Fatalf("first: %d %q", rec.Code, rec.Body)
	}
	wantProblem(t, serve(h, req("POST", "/charges", "k", "x")), http.StatusConflict, httpidem.SlugResponseNotStored)
	if calls != 1 {
		t.Fatalf("ran %d times", calls)
	}
}
