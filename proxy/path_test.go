package proxy

import (
	"net/http"
	"testing"

	"github.com/idemhq/idem/problem"
)

// TestDotSegments: a path with a "." or ".." segment, literal or
// percent-encoded, is refused 400 path-invalid, whatever the method:
// nothing reaches the upstream outside its base path.
func TestDotSegments(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	base := *up.url
	base.Path = "/public/v1"
	f := newFront(t, Config{Upstream: &base, Store: openStores(t, "Memory", 1, nil)[0]})
	for _, path := range []string{
		"/../../admin",
		"/%2e%2e/%2E%2e/admin",
		"/.%2E/admin",
		"/charges/./x",
		"/charges/..",
		"/..%2fadmin",
		"/..%5cadmin",
		"/..\\admin",
	} {
		for _, method := range []string{"GET", "POST"} {
			c := f.dial(t)
			c.exchange(t, method+" "+path+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\nIdempotency-Key: d-1\r\nContent-Length: 1\r\n\r\nx").
				expect(t, http.StatusBadRequest, problem.SlugPathInvalid)
		}
	}
	if n := up.calls.Load(); n != 0 {
		t.Fatalf("the upstream saw %d requests, the last to %s", n, up.last().path)
	}
	// Dots that are not a whole segment are a name like any other.
	for _, path := range []string{"/charges/..x", "/charges/x..", "/charges/.well"} {
		f.send(t, req{method: http.MethodGet, path: path}).expect(t, http.StatusCreated, "")
		if got := up.last().path; got != "/public/v1"+path {
			t.Fatalf("%s reached the upstream as %s", path, got)
		}
	}
}
