package httpidem_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/internal/testutil/fault"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// docs/http.md, "first execution" then "completed earlier, same fingerprint".
func TestFirstExecutionThenReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	h := mux(b.mw, c)

	first := serve(h, req("POST", "/charges", "k1", `{"amount":100}`))
	if first.Code != http.StatusCreated || first.Body.String() != `{"call":1,"body_len":14}` {
		t.Fatalf("first: %d %q", first.Code, first.Body)
	}
	rec := record(t, b.store, scope("k1"))
	if rec.State != store.StateDone {
		t.Fatalf("record %v, want DONE", rec.State)
	}
	for range 3 {
		wantReplayOf(t, first, serve(h, req("POST", "/charges", "k1", `{"amount":100}`)))
	}
	wantCalls(t, c, 1)
	if got, want := b.outcomes.all(), []httpidem.Outcome{"executed", "replayed", "replayed", "replayed"}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// G2 (docs/guarantees.md): a replay has the first response's status, body
// and kept headers byte for byte; Set-Cookie, hop-by-hop headers, headers
// named by Connection, and headers not on the allow-list are not replayed.
func TestReplayFidelity(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{ReplayHeaders: []string{"x-charge-id", "X-Hop"}})
	body := append([]byte("binary\x00\xff\xfe body with a NUL "), bytes.Repeat([]byte{0x80, 0x00}, 300)...)
	calls := 0
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		hd := w.Header()
		hd.Set("Content-Type", "application/octet-stream; x=1")
		hd.Set("Location", "/charges/ch_1")
		hd.Add("X-Charge-Id", "ch_1")
		hd.Add("X-Charge-Id", "second value")
		hd.Set("X-Hop", "named by Connection")
		hd.Set("Connection", "X-Hop")
		hd.Set("Set-Cookie", "session=abc")
		hd.Set("Keep-Alive", "timeout=5")
		hd.Set("X-Not-Listed", "dropped")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(body[:10])
		_, _ = w.Write(body[10:])
		hd.Set("X-After-WriteHeader", "ignored, as in net/http")
	}))
	first := serve(h, req("POST", "/charges", "k1", ""))
	again := serve(h, req("POST", "/charges", "k1", ""))
	if calls != 1 {
		t.Fatalf("handler ran %d times", calls)
	}
	if first.Code != http.StatusAccepted || !bytes.Equal(first.Body.Bytes(), body) {
		t.Fatalf("first response %d, %d bytes", first.Code, first.Body.Len())
	}
	// The first response is the handler's, whole.
	for _, name := range []string{"Set-Cookie", "X-Not-Listed", "Connection", "X-Hop"} {
		if first.Header().Get(name) == "" {
			t.Errorf("first response lacks %s", name)
		}
	}
	if first.Header().Get("X-After-WriteHeader") != "" {
		t.Errorf("a header set after WriteHeader was sent")
	}
	wantReplayOf(t, first, again)
	if !bytes.Equal(again.Body.Bytes(), body) {
		t.Fatalf("replayed body differs")
	}
	for _, name := range []string{"Content-Type", "Location", "X-Charge-Id"} {
		if !slices.Equal(again.Header()[name], first.Header()[name]) {
			t.Errorf("%s: replay %q, first %q", name, again.Header()[name], first.Header()[name])
		}
	}
	for _, name := range []string{"Set-Cookie", "Keep-Alive", "Connection", "X-Hop", "X-Not-Listed"} {
		if v := again.Header().Values(name); len(v) != 0 {
			t.Errorf("%s replayed: %q", name, v)
		}
	}
	if again.Header().Get("Content-Length") != itoa(len(body)) {
		t.Errorf("replay Content-Length %q", again.Header().Get("Content-Length"))
	}
}

// A handler that sets no Content-Type gets the sniffed one on the first
// response and on its replays alike.
func TestSniffedContentTypeIsStored(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<html><body>ok</body></html>")
	}))
	first := serve(h, req("POST", "/charges", "k", ""))
	again := serve(h, req("POST", "/charges", "k", ""))
	wantReplayOf(t, first, again)
	if ct := again.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" || first.Header().Get("Content-Type") != ct {
		t.Fatalf("Content-Type first %q, replay %q", first.Header().Get("Content-Type"), ct)
	}
}

// 2xx, 3xx and 4xx except 408, 409, 425, 429 are stored; every other
// status releases the claim at once, so the retry runs the handler again.
// A redirect after a POST (303 See Other) answers an effect that happened:
// its retry must replay the redirect, Location included, not charge again.
func TestWhichStatusesAreStored(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		status int
		stored bool
	}{
		{200, true}, {201, true}, {204, true}, {299, true},
		{400, true}, {404, true}, {422, true}, {499, true},
		{408, false}, {409, false}, {425, false}, {429, false},
		{500, false}, {502, false}, {503, false}, {504, false},
		{300, true}, {301, true}, {302, true}, {303, true}, {304, true}, {307, true}, {308, true},
	} {
		t.Run(http.StatusText(tt.status)+itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			calls := 0
			h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				w.Header().Set("Content-Type", "text/plain")
				w.Header().Set("Location", "/charges/"+itoa(calls))
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, "call "+itoa(calls))
			}))
			first := serve(h, req("POST", "/charges", "k", ""))
			if first.Code != tt.status {
				t.Fatalf("first: %d, want the handler's %d", first.Code, tt.status)
			}

			rec := record(t, b.store, scope("k"))
			again := serve(h, req("POST", "/charges", "k", ""))
			if tt.stored {
				if rec.State != store.StateDone {
					t.Fatalf("record %v, want DONE", rec.State)
				}
				wantReplayOf(t, first, again)
				if calls != 1 {
					t.Fatalf("handler ran %d times", calls)
				}
				if loc := again.Header().Get("Location"); loc != "/charges/1" {
					t.Fatalf("replayed Location %q, want the first one", loc)
				}
				return
			}
			if rec.State != store.StateReleased {
				t.Fatalf("record %v, want RELEASED", rec.State)
			}
			if calls != 2 || again.Header().Get(httpidem.HeaderReplayed) != "" {
				t.Fatalf("retry after %d: handler ran %d times, replayed=%q; want a second run", tt.status, calls,
					again.Header().Get(httpidem.HeaderReplayed))
			}
			if got := b.outcomes.all(); got[0] != httpidem.OutcomeReleased {
				t.Fatalf("outcome %v, want released", got[0])
			}
		})
	}
}

// A handler that writes nothing answers 200 with an empty body, stored.
func TestEmptyHandlerResponse(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := mux(b.mw, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	first := serve(h, req("POST", "/charges", "k", ""))
	again := serve(h, req("POST", "/charges", "k", ""))
	if first.Code != 200 || first.Body.Len() != 0 {
		t.Fatalf("first %d %q", first.Code, first.Body)
	}
	wantReplayOf(t, first, again)
}

// docs/http.md, "same scope and key, another fingerprint": 422, and the
// stored record is left as it was.
func TestKeyReusedWithOtherRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	h := mux(b.mw, c)
	serve(h, req("POST", "/charges", "k", `{"amount":100}`))
	before := record(t, b.store, scope("k"))

	p := wantProblem(t, serve(h, req("POST", "/charges", "k", `{"amount":999}`)), 422, httpidem.SlugKeyReused)
	if !strings.Contains(p.Detail, "different request") {
		t.Errorf("detail %q", p.Detail)
	}
	wantCalls(t, c, 1)
	after := record(t, b.store, scope("k"))
	if after.Epoch != before.Epoch || after.State != store.StateDone || !bytes.Equal(after.Fingerprint, before.Fingerprint) {
		t.Fatalf("record changed: %+v -> %+v", before, after)
	}
}

// "first request still running": 409 request-in-flight with the lease's
// time left, rounded up. The duplicate goes through another middleware on
// the same store (another process), so the store's lease decides; a
// duplicate to the same process is answered from the process's own view.
func TestRequestInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	calls := 0
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		close(started)
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(h, req("POST", "/charges", "k", "x")) }()
	<-started

	b.clock.Advance(10*time.Second + 500*time.Millisecond) // 19.5 s left on the 30 s lease
	rec := serve(mux(b.other(t), &counter{}), req("POST", "/charges", "k", "x"))
	wantProblem(t, rec, http.StatusConflict, httpidem.SlugRequestInFlight)
	wantRetryAfter(t, rec, "20")

	close(release)
	if first := <-done; first.Code != http.StatusCreated {
		t.Fatalf("first: %d", first.Code)
	}
	if calls != 1 {
		t.Fatalf("handler ran %d times", calls)
	}
	if got := b.outcomes.all(); !slices.Equal(got, []httpidem.Outcome{"in_flight", "executed"}) {
		t.Fatalf("outcomes %v", got)
	}
}

// docs/http.md, "the first attempt's outcome is unknown": MarkUnknown
// keeps the claim; retries get 409 outcome-unknown with Retry-After until
// the lease ends; then the handler runs again.
func TestMarkUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	calls := 0
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			httpidem.MarkUnknown(r, errors.New("payment provider timed out"))
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, "upstream timeout")
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "charged")
	}))
	first := serve(h, req("POST", "/charges", "k", "x"))
	if first.Code != http.StatusGatewayTimeout || first.Body.String() != "upstream timeout" {
		t.Fatalf("first: %d %q, want the handler's own response", first.Code, first.Body)
	}
	rec := record(t, b.store, scope("k"))
	if rec.State != store.StateProcessing || !rec.Unknown {
		t.Fatalf("record %+v, want PROCESSING and unknown", rec)
	}

	r := serve(h, req("POST", "/charges", "k", "x"))
	wantProblem(t, r, http.StatusConflict, httpidem.SlugOutcomeUnknown)
	wantRetryAfter(t, r, "30")
	b.clock.Advance(29*time.Second + 100*time.Millisecond)
	r = serve(h, req("POST", "/charges", "k", "x"))
	wantProblem(t, r, http.StatusConflict, httpidem.SlugOutcomeUnknown)
	wantRetryAfter(t, r, "1")
	if calls != 1 {
		t.Fatalf("handler ran %d times during the lease", calls)
	}

	b.clock.Advance(time.Second) // the lease has ended
	r = serve(h, req("POST", "/charges", "k", "x"))
	if r.Code != http.StatusCreated || calls != 2 {
		t.Fatalf("after the lease: %d, %d calls; want the handler to run again", r.Code, calls)
	}
	wantReplayOf(t, r, serve(h, req("POST", "/charges", "k", "x")))
	want := []httpidem.Outcome{"marked_unknown", "unknown", "unknown", "executed", "replayed"}
	if got := b.outcomes.all(); !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// A handler that marks the outcome unknown and then panics (as
// httputil.ReverseProxy does with http.ErrAbortHandler when copying the
// upstream's answer fails) keeps the claim: the effect may have happened.
func TestMarkUnknownThenPanicKeepsClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	calls := 0
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.GetBody != nil {
			t.Error("the handler's request offers GetBody: a forwarding client could send it twice")
		}
		httpidem.MarkUnknown(r, errors.New("connection reset while copying the answer"))
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() {
			if got := recover(); got != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", got)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), req("POST", "/charges", "k", "x"))
	}()
	rec := record(t, b.store, scope("k"))
	if rec.State != store.StateProcessing || !rec.Unknown {
		t.Fatalf("record %+v, want PROCESSING and unknown", rec)
	}
	r := serve(h, req("POST", "/charges", "k", "x"))
	wantProblem(t, r, http.StatusConflict, httpidem.SlugOutcomeUnknown)
	if calls != 1 {
		t.Fatalf("handler ran %d times", calls)
	}
}

// MarkUnknown outside the middleware does nothing.
func TestMarkUnknownOutsideMiddleware(t *testing.T) {
	t.Parallel()
	httpidem.MarkUnknown(httptest.NewRequest("POST", "/", nil), nil)
	if _, ok := httpidem.TxFrom[any](context.Background()); ok {
		t.Fatal("TxFrom outside the middleware")
	}
}

// docs/http.md, "the store did not confirm the claim": 503 + Retry-After,
// fail closed: the handler never runs without a confirmed claim (G5).
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	for _, mode := range []fault.Mode{fault.Before, fault.After} {
		t.Run([]string{"", "Before", "After"}[mode], func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			// After: the claim landed but its answer was lost, and the
			// read-back fails too.
			b.store.SetPlan(fault.Always(mode, fault.Claim, fault.Get))
			c := &counter{}
			rec := serve(mux(b.mw, c), req("POST", "/charges", "k", "x"))
			wantProblem(t, rec, http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
			wantRetryAfter(t, rec, "1")
			wantCalls(t, c, 0)
			if got := b.outcomes.all(); !slices.Equal(got, []httpidem.Outcome{"unavailable"}) {
				t.Fatalf("outcomes %v", got)
			}
		})
	}
}

// The handler ran but its completion failed: the client is not told the
// handler's answer (no replay could back it yet), but 503; the key stays
// held (409 to another process, 503 to this one) while the guard keeps
// trying, and once the store is back the retry gets the replay, never a
// second run. When the completion landed and only its answer was lost, the
// guard reads it back and the response is delivered.
func TestCompletionFails(t *testing.T) {
	t.Parallel()
	t.Run("NotRecorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.store.SetPlan(fault.Always(fault.Before, fault.Complete))
		c := &counter{}
		rec := serve(mux(b.mw, c), req("POST", "/charges", "k", "x"))
		wantProblem(t, rec, http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
		if rec.Header().Get("Location") != "" {
			t.Fatalf("the handler's headers leaked into the 503")
		}
		wantCalls(t, c, 1)
		if r := record(t, b.store, scope("k")); r.State != store.StateProcessing {
			t.Fatalf("record %v", r.State)
		}
		h := mux(b.mw, c)
		wantProblem(t, serve(h, req("POST", "/charges", "k", "x")), http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
		b.clock.Advance(time.Hour) // far past the lease: the process still holds the key
		wantProblem(t, serve(h, req("POST", "/charges", "k", "x")), http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
		b.store.SetPlan(nil) // the store recovers
		again := serve(h, req("POST", "/charges", "k", "x"))
		if again.Code != http.StatusCreated || again.Header().Get(httpidem.HeaderReplayed) != "true" {
			t.Fatalf("retry after recovery: %d %s, want the replayed 201", again.Code, again.Body)
		}
		if other := serve(mux(b.other(t), c), req("POST", "/charges", "k", "x")); other.Code != again.Code || other.Body.String() != again.Body.String() {
			t.Fatalf("another process: %d %s, want the same replay", other.Code, other.Body)
		}
		wantCalls(t, c, 1)
	})
	t.Run("RecordedAnswerLost", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.store.SetPlan(fault.Once(fault.After, fault.Complete))
		c := &counter{}
		h := mux(b.mw, c)
		first := serve(h, req("POST", "/charges", "k", "x"))
		if first.Code != http.StatusCreated {
			t.Fatalf("first %d %s", first.Code, first.Body)
		}
		wantReplayOf(t, first, serve(h, req("POST", "/charges", "k", "x")))
		wantCalls(t, c, 1)
	})
}

// docs/http.md, "a body that outgrows MaxResponse": delivered once, whole;
// the key is completed with the marker BEFORE its first byte is sent; a
// retry gets 409 response-not-stored and never runs the handler again.
func TestResponseTooLargeToStore(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{MaxResponse: 64})
	calls := 0
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 3) // 48 bytes
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		for range 10 {
			if _, err := w.Write(chunk); err != nil {
				t.Errorf("write: %v", err)
			}
		}
		http.NewResponseController(w).Flush()
	}))
	first := httptest.NewRecorder()
	h.ServeHTTP(&durableCheck{ResponseWriter: first, t: t, s: b.store, sc: scope("k")}, req("POST", "/charges", "k", "x"))
	if first.Code != 200 || first.Body.Len() != 480 || !bytes.Equal(first.Body.Bytes()[:48], chunk) {
		t.Fatalf("first: %d, %d bytes; want all 480", first.Code, first.Body.Len())
	}
	if !first.Flushed {
		t.Fatalf("Flush while streaming did not reach the client")
	}
	for range 2 {
		wantProblem(t, serve(h, req("POST", "/charges", "k", "x")), http.StatusConflict, httpidem.SlugResponseNotStored)
	}
	if calls != 1 {
		t.Fatalf("handler ran %d times", calls)
	}
	want := []httpidem.Outcome{"not_stored", "response_not_stored", "response_not_stored"}
	if got := b.outcomes.all(); !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// A response of exactly MaxResponse bytes is stored.
func TestResponseAtTheLimitIsStored(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{MaxResponse: 64})
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 64))
	}))
	first := serve(h, req("POST", "/charges", "k", ""))
	wantReplayOf(t, first, serve(h, req("POST", "/charges", "k", "")))
}

// A too-large 5xx is streamed and released, not marked.
func TestResponseTooLargeAndNotStorable(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{MaxResponse: 8})
	calls := 0
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "a long upstream error page")
	}))
	first := serve(h, req("POST", "/charges", "k", ""))
	if first.Code != 502 || first.Body.String() != "a long upstream error page" {
		t.Fatalf("first %d %q", first.Code, first.Body)
	}
	if r := record(t, b.store, scope("k")); r.State != store.StateReleased {
		t.Fatalf("record %v", r.State)
	}
	serve(h, req("POST", "/charges", "k", ""))
	if calls != 2 {
		t.Fatalf("calls %d", calls)
	}
}

// durableCheck fails the test if anything reaches the client before the
// key is settled in the store (acknowledge after durable).
type durableCheck struct {
	http.ResponseWriter
	t     *testing.T
	s     store.Store
	sc    key.Scope
	state store.State
}

func (d *durableCheck) WriteHeader(code int) {
	rec, err := d.s.Get(context.Background(), d.sc.StoreKey())
	if err != nil || rec.State != store.StateDone {
		d.t.Errorf("status %d sent while the record is %v (%v), want DONE", code, rec.State, err)
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *durableCheck) Flush() { http.NewResponseController(d.ResponseWriter).Flush() }

func TestAcknowledgeAfterDurable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := mux(b.mw, &counter{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(&durableCheck{ResponseWriter: rec, t: t, s: b.store, sc: scope("k")}, req("POST", "/charges", "k", ""))
	if rec.Code != http.StatusCreated {
		t.Fatalf("%d", rec.Code)
	}
}

// A panicking handler releases the claim; the panic goes on with its own
// value (http.ErrAbortHandler included), and the retry runs again.
func TestPanicReleases(t *testing.T) {
	t.Parallel()
	for _, val := range []any{"boom", http.ErrAbortHandler} {
		t.Run(func() string {
			if val == http.ErrAbortHandler {
				return "ErrAbortHandler"
			}
			return "String"
		}(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			calls := 0
			h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				if calls == 1 {
					w.WriteHeader(http.StatusCreated) // buffered, never sent
					panic(val)
				}
				w.WriteHeader(http.StatusCreated)
			}))
			first := httptest.NewRecorder()
			func() {
				defer func() {
					if got := recover(); got != val {
						t.Fatalf("recovered %v, want %v", got, val)
					}
				}()
				h.ServeHTTP(first, req("POST", "/charges", "k", ""))
			}()
			if first.Code != 200 || first.Body.Len() != 0 || len(first.Header()) != 0 {
				t.Fatalf("something was sent before the panic: %d %v", first.Code, first.Header())
			}
			if r := record(t, b.store, scope("k")); r.State != store.StateReleased {
				t.Fatalf("record %v, want RELEASED", r.State)
			}
			if again := serve(h, req("POST", "/charges", "k", "")); again.Code != http.StatusCreated || calls != 2 {
				t.Fatalf("retry: %d, %d calls", again.Code, calls)
			}
			if got := b.outcomes.all(); !slices.Equal(got, []httpidem.Outcome{"released", "executed"}) {
				t.Fatalf("outcomes %v", got)
			}
		})
	}
}

// Over a real server: the panic reaches net/http, which drops the
// connection; the claim is released all the same.
func TestPanicOverRealServer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader("x"))
	r.Header.Set(principalHeader, "alice")
	r.Header.Set(httpidem.HeaderKey, "k")
	if resp, err := srv.Client().Do(r); err == nil {
		resp.Body.Close()
		t.Fatalf("got %d, want the connection dropped", resp.StatusCode)
	}
	if rec := record(t, b.store, scope("k")); rec.State != store.StateReleased {
		t.Fatalf("record %v", rec.State)
	}
}

// docs/http.md: GET, HEAD, OPTIONS ignore the header and store nothing.
func TestSafeMethodsPassThrough(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	h := b.mw.Wrap(c)
	for _, m := range []string{"GET", "HEAD", "OPTIONS", "PUT", "DELETE"} {
		for range 2 {
			if rec := serve(h, req(m, "/charges", "k", "")); rec.Code != http.StatusCreated {
				t.Fatalf("%s: %d", m, rec.Code)
			}
		}
	}
	wantCalls(t, c, 10)
	wantNoClaim(t, b)
	if got := b.outcomes.all(); len(got) != 0 {
		t.Fatalf("OnOutcome called for requests that do not take part: %v", got)
	}
}

// Config.Methods replaces the default set.
func TestConfiguredMethods(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{Methods: []string{"PUT"}})
	c := &counter{}
	h := b.mw.Wrap(c)
	first := serve(h, req("PUT", "/charges", "k", ""))
	wantReplayOf(t, first, serve(h, req("PUT", "/charges", "k", "")))
	serve(h, req("POST", "/charges", "k", ""))
	serve(h, req("POST", "/charges", "k", ""))
	wantCalls(t, c, 3)
}

// No principal: the request passes through and the store is never called.
func TestNoPrincipalNeverTouchesStore(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := &counter{}
	h := mux(b.mw, c)
	for range 2 {
		r := req("POST", "/charges", "k", "x")
		r.Header.Del(principalHeader)
		if rec := serve(h, r); rec.Code != http.StatusCreated {
			t.Fatalf("%d", rec.Code)
		}
	}
	wantCalls(t, c, 2)
	for _, op := range []fault.Op{fault.Claim, fault.Get, fault.Complete, fault.Release} {
		if n := b.store.Calls(op); n != 0 {
			t.Fatalf("%d %s calls", n, op)
		}
	}
	if got := b.outcomes.all(); !slices.Equal(got, []httpidem.Outcome{"passthrough", "passthrough"}) {
		t.Fatalf("outcomes %v", got)
	}
}

// The handler gets the body back, the Idempotency-Key header untouched
// (a proxy forwards it), and no GetBody (so that a forwarding client never
// resends it on its own).
func TestHandlerSeesRequestAsSent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) != "payload" || r.GetBody != nil {
			t.Errorf("body %q, GetBody set: %v", body, r.GetBody != nil)
		}
		if k := r.Header.Get(httpidem.HeaderKey); k != `"quoted key"` {
			t.Errorf("key header %q", k)
		}
		if r.Pattern != route {
			t.Errorf("pattern %q", r.Pattern)
		}
	}))
	serve(h, req("POST", "/charges", `"quoted key"`, "payload"))
}

// The operation is the route pattern: for a route's handler, for a whole
// wrapped ServeMux, and (without a pattern) the path; Config.Operation
// overrides it.
func TestOperation(t *testing.T) {
	t.Parallel()
	wantOp := func(t *testing.T, b *bundle, op, k string) {
		t.Helper()
		sc := key.Scope{Principal: "alice", Operation: op, Key: k}
		if rec := record(t, b.store, sc); rec.State != store.StateDone {
			t.Fatalf("record under %q: %v", op, rec.State)
		}
	}
	t.Run("RoutePattern", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		mx := http.NewServeMux()
		mx.Handle("POST /charges/{id}/refunds", b.mw.Wrap(&counter{}))
		serve(mx, req("POST", "/charges/ch_1/refunds", "k", ""))
		serve(mx, req("POST", "/charges/ch_2/refunds", "k", "")) // other path: 422, same operation
		wantOp(t, b, "POST /charges/{id}/refunds", "k")
	})
	t.Run("WrappedMux", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		mx := http.NewServeMux()
		mx.Handle("/charges/{id}", &counter{})
		serve(b.mw.Wrap(mx), req("PATCH", "/charges/ch_1", "k", ""))
		wantOp(t, b, "PATCH /charges/{id}", "k")
	})
	t.Run("Path", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		serve(b.mw.Wrap(&counter{}), req("POST", "/charges/ch_1", "k", ""))
		wantOp(t, b, "POST /charges/ch_1", "k")
	})
	t.Run("Configured", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &httpidem.Config{Operation: func(r *http.Request) string { return "charge" }})
		serve(b.mw.Wrap(&counter{}), req("POST", "/anything", "k", ""))
		wantOp(t, b, "charge", "k")
	})
}

// When the heartbeat finds the claim taken over, the handler's context
// ends with key.ErrFenced, and its response is not acknowledged.
func TestLostClaimCancelsHandler(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	g, err := key.New(s, &key.Config{Lease: time.Hour, Heartbeat: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m := newMiddleware(t, g, nil, nil)
	started := make(chan struct{})
	var cause error
	h := mux(m, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		cause = context.Cause(r.Context())
		w.WriteHeader(http.StatusCreated)
	}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve(h, req("POST", "/charges", "k", "")) }()
	<-started
	// Another owner takes the key: release the record under the holder's
	// feet and claim it afresh (the next heartbeat is then fenced).
	sk := scope("k").StoreKey()
	rec, err := s.Get(context.Background(), sk)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(context.Background(), store.Fence{Key: sk, Epoch: rec.Epoch, Owner: rec.Owner}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(context.Background(), store.ClaimParams{Key: sk, Fingerprint: []byte("other"), Owner: "thief", Lease: time.Hour, Retention: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if !errors.Is(cause, key.ErrFenced) {
		t.Fatalf("handler context cause %v, want ErrFenced", cause)
	}
	wantProblem(t, got, http.StatusServiceUnavailable, httpidem.SlugStoreUnavailable)
}

func TestOnOutcomeForEveryAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{RequireKey: true, MaxBody: 4, Fingerprint: httpidem.FingerprintJSON})
	h := mux(b.mw, &counter{})
	serve(h, req("POST", "/charges", "-", ""))
	serve(h, req("POST", "/charges", "a b", ""))
	serve(h, req("POST", "/charges", "k", "12345"))
	serve(h, req("POST", "/charges", "k", "[1,"))
	serve(h, req("POST", "/charges", "k", "1"))
	serve(h, req("POST", "/charges", "k", "2"))
	want := []httpidem.Outcome{"missing_key", "invalid_key", "body_too_large", "invalid_body", "executed", "conflict"}
	if got := b.outcomes.all(); !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	g, err := key.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := principalFromHeader
	for _, tt := range []struct {
		name string
		cfg  *httpidem.Config
		want string // in the error; "" for success
	}{
		{"Nil", nil, "Config is required"},
		{"NoPrincipal", &httpidem.Config{}, "Config.Principal"},
		{"Defaults", &httpidem.Config{Principal: p}, ""},
		{"NegativeMaxBody", &httpidem.Config{Principal: p, MaxBody: -1}, "Config.MaxBody"},
		{"HugeMaxBody", &httpidem.Config{Principal: p, MaxBody: 2 << 30}, "Config.MaxBody"},
		{"NegativeMaxResponse", &httpidem.Config{Principal: p, MaxResponse: -1}, "Config.MaxResponse"},
		{"SafeMethod", &httpidem.Config{Principal: p, Methods: []string{"POST", "GET"}}, "GET is a safe method"},
		{"BadMethod", &httpidem.Config{Principal: p, Methods: []string{"PO ST"}}, "Config.Methods"},
		{"ReplaySetCookie", &httpidem.Config{Principal: p, ReplayHeaders: []string{"set-cookie"}}, "Set-Cookie is never replayed"},
		{"ReplayHopByHop", &httpidem.Config{Principal: p, ReplayHeaders: []string{"Transfer-Encoding"}}, "Config.ReplayHeaders"},
		{"ReplayContentLength", &httpidem.Config{Principal: p, ReplayHeaders: []string{"Content-Length"}}, "Config.ReplayHeaders"},
		{"BadSignificantHeader", &httpidem.Config{Principal: p, SignificantHeaders: []string{"a:b"}}, "Config.SignificantHeaders"},
		{"UnknownMode", &httpidem.Config{Principal: p, Fingerprint: "xml"}, "Config.Fingerprint"},
		{"NoFields", &httpidem.Config{Principal: p, Fingerprint: httpidem.FingerprintFields()}, "at least one path"},
		{"EmptySegment", &httpidem.Config{Principal: p, Fingerprint: httpidem.FingerprintFields("a..b")}, "empty segment"},
		{"DuplicateField", &httpidem.Config{Principal: p, Fingerprint: httpidem.FingerprintFields("a", "a")}, "named twice"},
		{"Fields", &httpidem.Config{Principal: p, Fingerprint: httpidem.FingerprintFields("a.b", "c")}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := httpidem.New(g, tt.cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("New: %v, want an error naming %q", err, tt.want)
			}
		})
	}
	if _, err := httpidem.New(nil, &httpidem.Config{Principal: p}); err == nil {
		t.Fatal("New(nil guard) accepted")
	}
}

// ProblemBase changes every type URI.
func TestProblemBase(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpidem.Config{RequireKey: true, ProblemBase: "https://example.com/errors#"})
	rec := serve(mux(b.mw, &counter{}), req("POST", "/charges", "-", ""))
	if !strings.Contains(rec.Body.String(), `"type":"https://example.com/errors#idempotency-key-missing"`) {
		t.Fatalf("body %s", rec.Body)
	}
}

// Retry-After rounds up to whole seconds, at least 1.
func TestRetryAfterRounding(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	started, release := make(chan struct{}), make(chan struct{})
	h := mux(b.mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	}))
	done := make(chan struct{})
	go func() { serve(h, req("POST", "/charges", "k", "")); close(done) }()
	<-started
	other := b.other(t) // another process: the store's lease decides
	for _, tt := range []struct {
		advance time.Duration
		want    string
	}{
		{0, "30"}, {time.Millisecond, "30"}, {999 * time.Millisecond, "29"}, {28 * time.Second, "1"}, {999*time.Millisecond - time.Nanosecond, "1"},
	} {
		b.clock.Advance(tt.advance)
		wantRetryAfter(t, serve(mux(other, &counter{}), req("POST", "/charges", "k", "")), tt.want)
	}
	close(release)
	<-done
}
