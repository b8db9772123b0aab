package httpidem_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
)

// Bad keys (docs/http.md, section 2): each gets a clear 400, the handler does
// not run, and nothing is claimed or left in the store.
func TestBadKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 256)
	for _, tt := range []struct {
		name   string
		lines  []string // header lines; nil: no header
		slug   string
		detail string // in the problem's detail
	}{
		{"Missing", nil, httpidem.SlugKeyMissing, "requires an Idempotency-Key"},
		{"Empty", []string{""}, httpidem.SlugKeyMissing, "empty"},
		{"Blanks", []string{" \t "}, httpidem.SlugKeyMissing, "empty"},
		{"EmptyQuoted", []string{`""`}, httpidem.SlugKeyMissing, "empty"},
		{"256Bytes", []string{long}, httpidem.SlugKeyInvalid, "256 bytes"},
		{"256BytesQuoted", []string{`"` + long + `"`}, httpidem.SlugKeyInvalid, "longer than 255"},
		{"ControlChar", []string{"ab\x01c"}, httpidem.SlugKeyInvalid, "control byte 0x01"},
		{"Tab", []string{"ab\tc"}, httpidem.SlugKeyInvalid, "control byte 0x09"},
		{"DEL", []string{"ab\x7f"}, httpidem.SlugKeyInvalid, "control byte 0x7f"},
		{"NUL", []string{"ab\x00"}, httpidem.SlugKeyInvalid, "control byte 0x00"},
		{"ControlCharQuoted", []string{"\"ab\x1b\""}, httpidem.SlugKeyInvalid, "control byte 0x1b"},
		{"NonASCII", []string{"ключ"}, httpidem.SlugKeyInvalid, "non-ASCII"},
		{"NonASCIIQuoted", []string{`"clé"`}, httpidem.SlugKeyInvalid, "non-ASCII"},
		{"InvalidUTF8", []string{"k\xff"}, httpidem.SlugKeyInvalid, "non-ASCII byte 0xff"},
		{"TwoLines", []string{"a", "b"}, httpidem.SlugKeyInvalid, "repeated"},
		{"TwoIdenticalLines", []string{"a", "a"}, httpidem.SlugKeyInvalid, "repeated"},
		{"SpaceInBareKey", []string{"a b"}, httpidem.SlugKeyInvalid, "space"},
		{"UnterminatedQuote", []string{`"abc`}, httpidem.SlugKeyInvalid, "no closing quote"},
		{"Parameters", []string{`"abc";v=1`}, httpidem.SlugKeyInvalid, "parameters"},
		{"BadEscape", []string{`"a\bc"`}, httpidem.SlugKeyInvalid, "backslash"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &httpidem.Config{RequireKey: true})
			c := &counter{}
			r := req("POST", "/charges", "-", "body")
			r.Header[httpidem.HeaderKey] = tt.lines
			p := wantProblem(t, serve(mux(b.mw, c), r), http.StatusBadRequest, tt.slug)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail %q, want it to mention %q", p.Detail, tt.detail)
			}
			wantCalls(t, c, 0)
			wantNoClaim(t, b)
			for _, l := range tt.lines {
				if l != "" {
					wantNoRecord(t, b.store, scope(strings.TrimSpace(l)))
				}
			}
		})
	}
}

// An empty header is refused even when keys are optional (the client
// believes itself protected); a missing one passes through.
func TestOptionalKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	h := mux(b.mw, c)
	for range 2 {
		if rec := serve(h, req("POST", "/charges", "-", "x")); rec.Code != http.StatusCreated {
			t.Fatalf("no key: %d", rec.Code)
		}
	}
	wantCalls(t, c, 2)
	wantNoClaim(t, b)
	r := req("POST", "/charges", "-", "x")
	r.Header[httpidem.HeaderKey] = []string{""}
	wantProblem(t, serve(h, r), http.StatusBadRequest, httpidem.SlugKeyMissing)
	wantCalls(t, c, 2)
	wantNoClaim(t, b)
}

// Quoted and bare name the same key; the longest key is accepted whole;
// keys are case-sensitive.
func TestKeyForms(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	h := mux(b.mw, c)
	first := serve(h, req("POST", "/charges", "abc", "x"))
	wantReplayOf(t, first, serve(h, req("POST", "/charges", `"abc"`, "x")))
	wantReplayOf(t, first, serve(h, req("POST", "/charges", "  \"abc\"\t", "x")))
	wantReplayOf(t, first, serve(h, req("POST", "/charges", " abc ", "x")))
	wantCalls(t, c, 1)

	serve(h, req("POST", "/charges", "ABC", "x")) // another key
	wantCalls(t, c, 2)

	quoted := serve(h, req("POST", "/charges", `"a \"b\" \\c"`, "x")) // spaces and escapes inside quotes
	if quoted.Code != http.StatusCreated {
		t.Fatalf("quoted key with escapes: %d %s", quoted.Code, quoted.Body)
	}
	record(t, b.store, scope(`a "b" \c`))
	wantReplayOf(t, serve(h, req("POST", "/charges", `a"b"`, "y")), serve(h, req("POST", "/charges", `"a\"b\""`, "y")))

	k255 := strings.Repeat("~", 255)
	serve(h, req("POST", "/charges", k255, "x"))
	if rec := record(t, b.store, scope(k255)); rec.State != store.StateDone {
		t.Fatalf("255-byte key: %v", rec.State)
	}
}

// Bodies over the limit: 413 before any claim, whether the
// length is declared or not, and the handler never runs.
func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		body     func() io.Reader
		declared int64
	}{
		{"Declared", func() io.Reader { return strings.NewReader(strings.Repeat("x", 1025)) }, 1025},
		{"DeclaredLie", func() io.Reader { return strings.NewReader("x") }, 1 << 40},
		{"Chunked", func() io.Reader { return strings.NewReader(strings.Repeat("x", 1025)) }, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &httpidem.Config{MaxBody: 1024})
			c := &counter{}
			r := req("POST", "/charges", "k", "")
			r.Body = io.NopCloser(tt.body())
			r.ContentLength = tt.declared
			p := wantProblem(t, serve(mux(b.mw, c), r), http.StatusRequestEntityTooLarge, httpidem.SlugBodyTooLarge)
			if !strings.Contains(p.Detail, "1024 bytes") {
				t.Errorf("detail %q", p.Detail)
			}
			wantCalls(t, c, 0)
			wantNoClaim(t, b)
			wantNoRecord(t, b.store, scope("k"))
		})
	}
	t.Run("AtTheLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &httpidem.Config{MaxBody: 1024})
		c := &counter{}
		r := req("POST", "/charges", "k", strings.Repeat("x", 1024))
		r.ContentLength = -1
		if rec := serve(mux(b.mw, c), r); rec.Code != http.StatusCreated {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	})
}

// endless is a body that never ends; it counts what was read from it.
type endless struct{ read atomic.Int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.read.Add(int64(len(p)))
	return len(p), nil
}

// A never-ending chunked body: 413 at once, having read at most
// MaxBody+1 bytes.
func TestEndlessBody(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{MaxBody: 4096})
	c := &counter{}
	body := &endless{}
	r := req("POST", "/charges", "k", "")
	r.Body = io.NopCloser(body)
	r.ContentLength = -1
	r.TransferEncoding = []string{"chunked"}
	wantProblem(t, serve(mux(b.mw, c), r), http.StatusRequestEntityTooLarge, httpidem.SlugBodyTooLarge)
	if n := body.read.Load(); n > 4097 {
		t.Fatalf("read %d bytes of the body, want at most MaxBody+1", n)
	}
	wantCalls(t, c, 0)
	wantNoRecord(t, b.store, scope("k"))
}

// The same over a real connection: the client streams chunks forever; the
// server answers 413 and closes the connection, and nothing hangs.
func TestEndlessBodyOverRealServer(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{MaxBody: 64 << 10})
	c := &counter{}
	srv := httptest.NewServer(mux(b.mw, c))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/charges", io.NopCloser(&endless{}))
	r.Header.Set(principalHeader, "alice")
	r.Header.Set(httpidem.HeaderKey, "k")
	resp, err := srv.Client().Do(r)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Fatalf("status %d, close %v; want 413 and the connection closed", resp.StatusCode, resp.Close)
	}
	wantCalls(t, c, 0)
	wantNoRecord(t, b.store, scope("k"))
}

func gzipped(t *testing.T, data []byte, level int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write(data)
	_ = zw.Close()
	return buf.Bytes()
}

// Gzip bombs: a compressed body is hashed and handed over as
// sent, never decoded, so it cannot expand past the limit; two encodings
// of the same content are two different requests.
func TestGzipBodyNotDecoded(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{MaxBody: 64 << 10})
	bomb := gzipped(t, make([]byte, 16<<20), gzip.BestCompression) // 16 MiB of zeros
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb is %d bytes", len(bomb))
	}
	var seen []byte
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(body []byte) *httptest.ResponseRecorder {
		r := req("POST", "/charges", "k", string(body))
		r.Header.Set("Content-Encoding", "gzip")
		return serve(h, r)
	}
	first := send(bomb)
	if first.Code != http.StatusCreated || !bytes.Equal(seen, bomb) {
		t.Fatalf("first %d; handler saw %d bytes, want the %d compressed bytes", first.Code, len(seen), len(bomb))
	}
	wantReplayOf(t, first, send(bomb))
	// Same content, other compression: other bytes, other fingerprint.
	wantProblem(t, send(gzipped(t, make([]byte, 16<<20), gzip.BestSpeed)), 422, httpidem.SlugKeyReused)
}

// JSON with duplicate member names: refused in the JSON modes
// (parsers disagree on which member wins), before any claim.
func TestJSONDuplicateMembers(t *testing.T) {
	t.Parallel()
	for _, mode := range []httpidem.FingerprintMode{httpidem.FingerprintJSON, httpidem.FingerprintFields("amount")} {
		for _, body := range []string{
			`{"amount":1,"amount":2}`,
			`{"amount":1,"\u0061mount":2}`,
			`{"x":{"a":1,"b":2,"a":3}}`,
			`[{"k":1},{"k":2,"k":2}]`,
		} {
			t.Run(string(mode)+body, func(t *testing.T) {
				t.Parallel()
				b := setup(t, &httpidem.Config{Fingerprint: mode})
				c := &counter{}
				p := wantProblem(t, serve(mux(b.mw, c), req("POST", "/charges", "k", body)), http.StatusBadRequest, httpidem.SlugBodyInvalidJSON)
				if !strings.Contains(p.Detail, "two members named") {
					t.Errorf("detail %q", p.Detail)
				}
				wantCalls(t, c, 0)
				wantNoClaim(t, b)
				wantNoRecord(t, b.store, scope("k"))
			})
		}
	}
}

// Other bodies the JSON modes refuse.
func TestJSONRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ body, detail string }{
		{`{"a":`, "not valid JSON"},
		{`[1 2]`, "not valid JSON"},
		{`{"a":1}{"b":2}`, "not valid JSON"},
		{`{"a":"\ud800"}`, "unpaired surrogate"},
		{`{"a":"\udc00\ud800"}`, "unpaired surrogate"},
		{`{"a":"\ud800\u0041"}`, "unpaired surrogate"},
		{"{\"a\":\"\xff\"}", "UTF-8"},
		{`{"id":9007199254740993}`, "more precision"},
		{`{"id":12345678901234567890}`, "more precision"},
		{`{"x":1e400}`, "out of the IEEE 754 double range"},
		{`plain text`, "not valid JSON"},
	} {
		t.Run(tt.body, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &httpidem.Config{Fingerprint: httpidem.FingerprintJSON})
			c := &counter{}
			p := wantProblem(t, serve(mux(b.mw, c), req("POST", "/charges", "k", tt.body)), http.StatusBadRequest, httpidem.SlugBodyInvalidJSON)
			if !strings.Contains(p.Detail, tt.detail) {
				t.Errorf("detail %q, want %q", p.Detail, tt.detail)
			}
			wantCalls(t, c, 0)
			wantNoClaim(t, b)
		})
	}
}

// The same key from another principal, another route, another method:
// independent scopes, each executed once, never a 409 or 422 (G6,
// docs/guarantees.md). Another query string on the same route is the same
// scope with another fingerprint (docs/http.md: the query is hashed): 422,
// nothing changed; the same query in another order or encoding is the same
// request.
func TestSameKeyElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	mx := http.NewServeMux()
	mx.Handle("POST /charges", b.mw.Wrap(c))
	mx.Handle("PATCH /charges", b.mw.Wrap(c))
	mx.Handle("POST /refunds", b.mw.Wrap(c))

	first := serve(mx, req("POST", "/charges?a=1&b=2", "k", "x"))
	bob := req("POST", "/charges?a=1&b=2", "k", "x")
	bob.Header.Set(principalHeader, "bob")
	for i, r := range []*http.Request{bob, req("POST", "/refunds?a=1&b=2", "k", "x"), req("PATCH", "/charges?a=1&b=2", "k", "x")} {
		rec := serve(mx, r)
		if rec.Code != http.StatusCreated || rec.Header().Get(httpidem.HeaderReplayed) != "" {
			t.Fatalf("request %d: %d replayed=%q; want its own execution", i, rec.Code, rec.Header().Get(httpidem.HeaderReplayed))
		}
	}
	wantCalls(t, c, 4)
	for _, sc := range []key.Scope{
		scope("k"),
		{Principal: "bob", Operation: route, Key: "k"},
		{Principal: "alice", Operation: "POST /refunds", Key: "k"},
		{Principal: "alice", Operation: "PATCH /charges", Key: "k"},
	} {
		if rec := record(t, b.store, sc); rec.State != store.StateDone || rec.Epoch != 1 {
			t.Fatalf("%+v: %v epoch %d", sc, rec.State, rec.Epoch)
		}
	}

	before := record(t, b.store, scope("k"))
	wantProblem(t, serve(mx, req("POST", "/charges?a=1&b=3", "k", "x")), 422, httpidem.SlugKeyReused)
	wantProblem(t, serve(mx, req("POST", "/charges?a=1", "k", "x")), 422, httpidem.SlugKeyReused)
	if after := record(t, b.store, scope("k")); after.Epoch != before.Epoch || after.State != store.StateDone {
		t.Fatalf("record changed: %+v", after)
	}
	wantReplayOf(t, first, serve(mx, req("POST", "/charges?b=2&a=%31", "k", "x")))
	wantCalls(t, c, 4)
}

// Significant headers are part of the request; others are not.
func TestSignificantHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{SignificantHeaders: []string{"x-account"}})
	c := &counter{}
	h := mux(b.mw, c)
	send := func(vals ...string) *httptest.ResponseRecorder {
		r := req("POST", "/charges", "k", "x")
		r.Header["X-Account"] = vals
		r.Header.Set("X-Trace", time.Now().String()) // not significant
		return serve(h, r)
	}
	first := send("acct_1")
	wantReplayOf(t, first, send("acct_1"))
	wantProblem(t, send("acct_2"), 422, httpidem.SlugKeyReused)
	wantProblem(t, send(), 422, httpidem.SlugKeyReused)
	wantProblem(t, send("acct_1", "acct_1"), 422, httpidem.SlugKeyReused)
	wantCalls(t, c, 1)
}

// FingerprintJSON: member order and whitespace do not matter; values do.
// FingerprintFields: only the chosen members matter, and a missing member
// is not a null one.
func TestJSONFingerprints(t *testing.T) {
	t.Parallel()
	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &httpidem.Config{Fingerprint: httpidem.FingerprintJSON})
		c := &counter{}
		h := mux(b.mw, c)
		first := serve(h, req("POST", "/charges", "k", `{"amount":100,"currency":"EUR","meta":{"b":1,"a":[1.0,2]}}`))
		wantReplayOf(t, first, serve(h, req("POST", "/charges", "k", "\n{ \"meta\" : {\"a\":[1,2e0],\"b\":1}, \"currency\":\"\\u0045UR\",\"amount\":1e2 }\t")))
		wantProblem(t, serve(h, req("POST", "/charges", "k", `{"amount":100,"currency":"EUR","meta":{"b":1,"a":[2,1]}}`)), 422, httpidem.SlugKeyReused)
		wantCalls(t, c, 1)
		// An empty body is not refused: it is its own request.
		empty := serve(h, req("POST", "/charges", "k2", ""))
		wantReplayOf(t, empty, serve(h, req("POST", "/charges", "k2", " \n")))
	})
	t.Run("Fields", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &httpidem.Config{Fingerprint: httpidem.FingerprintFields("amount", "customer.id", "items.0.sku")})
		c := &counter{}
		h := mux(b.mw, c)
		first := serve(h, req("POST", "/charges", "k", `{"amount":100,"customer":{"id":"c1","name":"A"},"items":[{"sku":"s1"}],"note":"x"}`))
		wantReplayOf(t, first, serve(h, req("POST", "/charges", "k", `{"note":"other","items":[{"sku":"s1","qty":9}],"customer":{"name":"B","id":"c1"},"amount":1.00e2}`)))
		wantProblem(t, serve(h, req("POST", "/charges", "k", `{"amount":100,"customer":{"id":"c2"},"items":[{"sku":"s1"}]}`)), 422, httpidem.SlugKeyReused)
		wantProblem(t, serve(h, req("POST", "/charges", "k", `{"amount":100,"customer":{"id":"c1"},"items":[{"sku":"s2"}]}`)), 422, httpidem.SlugKeyReused)
		wantCalls(t, c, 1)

		missing := serve(h, req("POST", "/charges", "k2", `{"customer":{"id":"c1"},"items":[{"sku":"s1"}]}`))
		wantReplayOf(t, missing, serve(h, req("POST", "/charges", "k2", `{"customer":{"id":"c1"},"items":[{"sku":"s1"}],"other":null}`)))
		wantProblem(t, serve(h, req("POST", "/charges", "k2", `{"amount":null,"customer":{"id":"c1"},"items":[{"sku":"s1"}]}`)), 422, httpidem.SlugKeyReused)
	})
}
