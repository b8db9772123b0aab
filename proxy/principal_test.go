package proxy

import (
	"net/http"
	"testing"

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
				f.send(t, req{method: method, key: "r-1", body: "x", auth: "-", header: differ}).expect(t, http.StatusBadRequest, slugHeaderRepeated)
			}
			if n, recs := up.calls.Load(), st.(*memstore.Store).Len(); n != 1 || recs != 1 {
				t.Fatalf("%d upstream calls, %d records; want 1, 1", n, recs)
			}
		})
	}
}
