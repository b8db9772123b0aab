package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/webhook"
)

// TestAdminProblemBase: the admin API's problems carry the configured
// base, as the endpoint's do.
func TestAdminProblemBase(t *testing.T) {
	p, err := inbox.New(memstore.NewInbox(), func(context.Context, *memstore.Tx, event.Event) error { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for base, h := range map[string]http.Handler{
		"https://idem.dev/problems/":             webhook.Admin(p, nil),
		"https://shop.example/problems/webhook/": webhook.Admin(p, &webhook.AdminConfig{ProblemBase: "https://shop.example/problems/webhook/"}),
	} {
		for path, slug := range map[string]string{
			"/dead-letters?limit=0":   "bad-parameter",
			"/dead-letters/7/requeue": "dead-letter-not-found",
		} {
			method := http.MethodGet
			if slug == "dead-letter-not-found" {
				method = http.MethodPost
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			var d struct{ Type string }
			_ = json.Unmarshal(rec.Body.Bytes(), &d)
			if d.Type != base+slug {
				t.Errorf("%s %s: type %q, want %q", method, path, d.Type, base+slug)
			}
		}
	}
}
