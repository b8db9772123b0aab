package outbox_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/webhook"
)

// TestSignedCallbacksToAnIdemReceiver sends a stream of intents as signed
// CloudEvents to an idem webhook endpoint whose answers are lost the first
// time: the receiver verifies them, dedups the re-sends by their stable id,
// and applies the stream in order, each once.
func TestSignedCallbacksToAnIdemReceiver(t *testing.T) {
	ctx := context.Background()
	const secret = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtMTIzNDU2Nzg5MA=="

	// The receiver: an idem webhook endpoint, delta order, on its own store.
	var mu sync.Mutex
	var applied []int64
	rin := memstore.NewInbox()
	p, err := inbox.New(rin, func(ctx context.Context, tx *memstore.Tx, ev event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, ev.Sequence)
		n := len(applied)
		tx.OnRollback(func() { mu.Lock(); applied = applied[:n-1]; mu.Unlock() })
		return nil
	}, &inbox.Config{Mode: order.ModeDelta, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.NewVerifier(signature.SchemeStandard, []string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(p, &webhook.Config{Verifier: v, Logger: slog.New(slog.DiscardHandler),
		Event: &event.Config{Owner: event.SourcePrefixes("https://billing.example/")}})
	if err != nil {
		t.Fatal(err)
	}
	// Every first answer is lost on the way back (processed, then 502).
	var seenMu sync.Mutex
	seen := map[string]int{}
	var outcomes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		seenMu.Lock()
		id := r.Header.Get("Ce-Id")
		seen[id]++
		first := seen[id] == 1
		outcomes = append(outcomes, strconv.Itoa(rec.Code))
		seenMu.Unlock()
		if first {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer srv.Close()

	// The sender: a relay with a signed CloudEvents target.
	signer, err := signature.NewSigner(signature.SchemeStandard, []string{secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture()
	r := f.relay(t, []outbox.Target{{Name: "billing", URL: srv.URL, Key: orderKey("invoice-"), Signer: signer,
		Events: &outbox.CallbackEvents{Source: "https://billing.example/invoices", Type: "invoice.changed"}}},
		func(c *outbox.Config) {
			c.Now = time.Now
			c.Backoff = time.Millisecond
			c.MaxBackoff = time.Millisecond
		})
	for i := range 3 {
		f.enqueue(t, r, outbox.Intent{Target: "billing", Method: "POST", Stream: "o-7",
			Body:    []byte(`{"order":{"id":"o-7-` + strconv.Itoa(i) + `"}}`),
			Headers: map[string]string{"Content-Type": "application/json"}})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := r.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		done, _ := f.s.ListIntents(ctx, store.IntentDone, 0, 10)
		if len(done) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not delivered: done %d", len(done))
		}
		time.Sleep(2 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(applied, []int64{1, 2, 3}) {
		t.Fatalf("receiver applied %v, want [1 2 3] once each", applied)
	}
	for id, n := range seen {
		if n != 2 {
			t.Fatalf("event %s sent %d times, want 2 (first answer lost)", id, n)
		}
	}
	if len(outcomes) != 6 {
		t.Fatalf("receiver answers %v", outcomes)
	}
}
