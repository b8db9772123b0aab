package outbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// TestRouteChoosesURLAndSigner sends two intents of one target to the
// destinations their data names, each signed with its own secret; a Route
// error retries the intent later, with nothing sent.
func TestRouteChoosesURLAndSigner(t *testing.T) {
	ctx := context.Background()
	type hit struct{ path, sig string }
	var mu sync.Mutex
	hits := map[string][]hit{}
	dest := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name] = append(hits[name], hit{r.URL.Path, r.Header.Get("Idem-Signature")})
			mu.Unlock()
			w.WriteHeader(204)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := dest("a"), dest("b")
	signers := map[string]*signature.Signer{}
	for _, app := range []string{"a", "b"} {
		s, err := signature.NewSigner(signature.SchemeIdem, []string{"secret-of-" + app + "-0123456789"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		signers[app] = s
	}
	urls := map[string]string{"a": a.URL, "b": b.URL}
	down := true
	f := newFixture()
	r := f.relay(t, []outbox.Target{{Name: "callbacks", Key: orderKey("cb-"),
		Route: func(_ context.Context, in store.Intent) (string, *signature.Signer, error) {
			app := in.Metadata["app"]
			if app == "b" && down {
				return "", nil, errors.New("application b's settings unreadable")
			}
			return urls[app], signers[app], nil
		}}}, nil)
	for _, app := range []string{"a", "b"} {
		in := charge("o-" + app)
		in.Target, in.Path, in.Metadata = "callbacks", "/events", map[string]string{"app": app}
		f.enqueue(t, r, in)
	}
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(hits["a"]) != 1 || len(hits["b"]) != 0 || hits["a"][0].path != "/events" || hits["a"][0].sig == "" {
		t.Fatalf("first pass: %+v", hits)
	}
	down = false
	f.clock.Advance(outbox.DefaultMaxBackoff)
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(hits["b"]) != 1 || hits["b"][0].sig == "" || hits["b"][0].sig == hits["a"][0].sig {
		t.Fatalf("after the route came back: %+v", hits)
	}
	if _, err := outbox.New(memstore.NewOutbox(memstore.NewInbox()), &outbox.Config{Targets: []outbox.Target{{Name: "x", Key: orderKey("x-")}}}); !errors.Is(err, outbox.ErrBadConfig) {
		t.Fatalf("a target with neither URL nor Route: %v", err)
	}
}
