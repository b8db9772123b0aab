package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"

	"github.com/idemhq/idem/problem"
	"github.com/idemhq/idem/store/memstore"
)

// TestRepeatedPrincipalHeader: a principal header sent twice with the same
// value names the caller of one line; with different values the request is
// refused 400 header-repeated, forwarded nowhere, stored nowhere.
func TestRepeatedPrincipalHeader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, header, value, other string
		cfg                        func(*Config)
	}{
		{"Authorization", "Authorization", "Bearer alice", "Bearer bob", nil},
		{"PrincipalHeader", "X-User", "alice", "bob", func(c *Config) { c.PrincipalHeader = "X-User" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, up, st, _ := setup(t, "Memory", tt.cfg)
			once := http.Header{tt.header: {tt.value}}
			first := f.send(t, req{key: "r-1", body: "x", auth: "-", header: once}).expect(t, http.StatusCreated, "")
			twice := http.Header{tt.header: {tt.value, tt.value}}
			if r := f.send(t, req{key: "r-1", body: "x", auth: "-", header: twice}); !r.replayed() || !sameReply(first, r) {
				t.Fatalf("the same value twice: %d %q, want a replay of %q", r.status, r.body, first.body)
			}
			for _, method := range []string{http.MethodPost, http.MethodGet} {
				differ := http.Header{tt.header: {tt.value, tt.other}}
				f.send(t, req{method: method, key: "r-1", body: "x", auth: "-", header: differ}).expect(t, http.StatusBadRequest, problem.SlugHeaderRepeated)
			}
			if n, recs := up.calls.Load(), st.(*memstore.Store).Len(); n != 1 || recs != 1 {
				t.Fatalf("%d upstream calls, %d records; want 1, 1", n, recs)
			}
		})
	}
}

// TestAuthorizationScheme: the auth-scheme is case-insensitive and the
// spaces after it are one separator, so "bearer  x" and "Bearer x" are one
// caller; the credentials are compared as sent.
func TestAuthorizationScheme(t *testing.T) {
	t.Parallel()
	f, up, _, _ := setup(t, "Memory", nil)
	first := f.send(t, req{key: "s-1", body: "x", auth: "Bearer alice"}).expect(t, http.StatusCreated, "")
	for _, auth := range []string{"bearer alice", "BEARER   alice", "beaRer \t alice"} {
		if r := f.send(t, req{key: "s-1", body: "x", auth: auth}); !r.replayed() || !sameReply(first, r) {
			t.Fatalf("%q: %d %q, want a replay of %q", auth, r.status, r.body, first.body)
		}
	}
	if r := f.send(t, req{key: "s-1", body: "x", auth: "Bearer ALICE"}).expect(t, http.StatusCreated, ""); r.replayed() {
		t.Fatal("credentials that differ in case named the same caller")
	}
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("upstream called %d times, want 2", n)
	}
	// The common spelling hashes as principals always were (a netstring
	// of the value): keys stored before stay with their callers.
	sum := sha256.Sum256([]byte("12:Bearer alice,"))
	want := "authorization-sha256:" + hex.EncodeToString(sum[:])
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", "bearer   alice")
	if got, ok := authorizationHeader().get(r); !ok || got != want {
		t.Fatalf("principal %q, want %q", got, want)
	}
}

// TestAuthorizationWithoutCredentials: an Authorization with a scheme and
// nothing after it names no caller (callers would share one principal): the
// request passes through unguarded and nothing is stored, as without
// Authorization.
func TestAuthorizationWithoutCredentials(t *testing.T) {
	t.Parallel()
	f, up, st, _ := setup(t, "Memory", nil)
	for _, auth := range []string{"Bearer ", "Bearer", "basic  "} {
		for range 2 {
			if r := f.send(t, req{key: "n-1", body: "x", auth: auth}).expect(t, http.StatusCreated, ""); r.replayed() {
				t.Fatalf("%q: replayed", auth)
			}
		}
	}
	if n, recs := up.calls.Load(), st.(*memstore.Store).Len(); n != 6 || recs != 0 {
		t.Fatalf("%d upstream calls, %d records; want 6, 0", n, recs)
	}
	// A lone word that is no scheme is a credential sent bare (a raw API
	// key): it names its caller, and its retry replays.
	first := f.send(t, req{key: "raw-1", body: "x", auth: "sk_live_4eC39HqLyjWDarjtT1zdp7dc"}).expect(t, http.StatusCreated, "")
	again := f.send(t, req{key: "raw-1", body: "x", auth: "sk_live_4eC39HqLyjWDarjtT1zdp7dc"}).expect(t, http.StatusCreated, "")
	if !again.replayed() || !sameReply(first, again) || up.calls.Load() != 7 {
		t.Fatalf("raw API key: replayed=%v, %d upstream calls; want the replay and 7", again.replayed(), up.calls.Load())
	}
}
