package httpidem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/memstore"
)

// A key stored under version 1 of the fingerprint (values of one query
// name sorted) replays to its retry under version 2, instead of becoming a
// conflict; and under version 2 the order of one name's values tells two
// requests apart.
func TestFingerprintVersionUpgrade(t *testing.T) {
	t.Parallel()
	g, err := key.New(memstore.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	principal := func(*http.Request) (string, bool) { return "alice", true }
	m, err := New(g, &Config{Principal: principal})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	send := func(target, k string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", target, strings.NewReader("body"))
		r.Header.Set(HeaderKey, k)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}

	// What an idem that wrote version 1 stored for this request.
	old := httptest.NewRequest("POST", "/charges?item=b&item=a", nil)
	v1, err := m.s.fingerprint(old, []byte("body"), key.FingerprintV1)
	if err != nil {
		t.Fatal(err)
	}
	stored := encodeResponse(http.StatusAccepted, http.Header{}, nil, []byte("first"))
	sc := key.Scope{Principal: "alice", Operation: "POST /charges", Key: "old"}
	if _, err := g.Do(context.Background(), key.Request{Scope: sc, Fingerprint: v1},
		func(context.Context) ([]byte, error) { return stored, nil }); err != nil {
		t.Fatal(err)
	}
	rec := send("/charges?item=b&item=a", "old")
	if rec.Code != http.StatusAccepted || rec.Body.String() != "first" || rec.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("retry of a version-1 key: %d %q, want the replay", rec.Code, rec.Body)
	}

	if rec := send("/charges?item=a&item=b", "new"); rec.Code != http.StatusCreated {
		t.Fatalf("first: %d", rec.Code)
	}
	if rec := send("/charges?item=b&item=a", "new"); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("values in another order: %d, want 422 (another request)", rec.Code)
	}
	if runs != 1 {
		t.Fatalf("ran %d times", runs)
	}
}
