package idem_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/proxy"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/webhook"
)

// Every package that validates a Config says so with its own ErrBadConfig,
// matched with errors.Is, and names the field in the message.
func TestBadConfigIsMatchable(t *testing.T) {
	t.Parallel()
	st := memstore.New(nil)
	g, err := key.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(context.Context, *memstore.Tx, event.Event) error { return nil }
	p, err := inbox.New(memstore.NewInbox(), apply, nil)
	if err != nil {
		t.Fatal(err)
	}
	principal := func(*http.Request) (string, bool) { return "p", true }
	for _, tt := range []struct {
		name     string
		err      error
		sentinel error
	}{
		{"key", func() error { _, err := key.New(st, &key.Config{Lease: -time.Second}); return err }(), key.ErrBadConfig},
		{"httpidem", func() error {
			_, err := httpidem.New(g, &httpidem.Config{Principal: principal, MaxBody: -1})
			return err
		}(), httpidem.ErrBadConfig},
		{"proxy", func() error {
			_, err := proxy.New(&proxy.Config{Upstream: &url.URL{Scheme: "ftp", Host: "x"}, Store: st})
			return err
		}(), proxy.ErrBadConfig},
		{"signature", func() error {
			_, err := signature.NewVerifier(signature.SchemeIdem, []string{"0123456789abcdef0123456789abcdef"}, &signature.Config{Tolerance: time.Hour * 24 * 365})
			return err
		}(), signature.ErrBadConfig},
		{"webhook", func() error { _, err := webhook.New(p, &webhook.Config{}); return err }(), webhook.ErrBadConfig},
		{"inbox", func() error {
			_, err := inbox.New(memstore.NewInbox(), apply, &inbox.Config{MaxAttempts: -1})
			return err
		}(), inbox.ErrBadConfig},
		{"outbox", func() error {
			_, err := outbox.New(memstore.NewOutbox(memstore.NewInbox()), &outbox.Config{})
			return err
		}(), outbox.ErrBadConfig},
	} {
		if !errors.Is(tt.err, tt.sentinel) {
			t.Errorf("%s: %v, want an error wrapping %v", tt.name, tt.err, tt.sentinel)
		}
	}
}
