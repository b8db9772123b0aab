package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemhq/idem/event"
)

// FuzzFromHTTPStructured feeds arbitrary structured-mode bodies. Seeds live in
// testdata/fuzz/FuzzFromHTTPStructured. Properties: no panic; every error
// matches exactly one sentinel; an accepted event is valid and survives a
// structured round trip through ToHTTP and FromHTTP unchanged.
func FuzzFromHTTPStructured(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"urn:x","type":"t","sequence":"8"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Content-Type", "application/cloudevents+json")
		ev, err := event.FromHTTP(r, body, nil)
		if err != nil {
			n := 0
			for _, s := range []error{event.ErrMalformed, event.ErrBadSequence, event.ErrNotOwned} {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %v matches %d sentinels", err, n)
			}
			return
		}
		if ev.Sequence < 1 || ev.ID == "" || ev.Source == "" || ev.Type == "" {
			t.Fatalf("accepted an invalid event %+v", ev)
		}
		h, body2, err := event.ToHTTP(ev, event.ModeStructured)
		if err != nil {
			t.Fatalf("ToHTTP(%+v): %v", ev, err)
		}
		r2 := httptest.NewRequest(http.MethodPost, "/", nil)
		r2.Header = h
		ev2, err := event.FromHTTP(r2, body2, nil)
		if err != nil {
			t.Fatalf("round trip of %s: %v (sent %s)", body, err, body2)
		}
		want := ev.Data
		if ev.DataContentType == "application/json" && json.Valid(want) {
			var c bytes.Buffer
			_ = json.Compact(&c, want)
			want = c.Bytes()
		}
		if ev2.ID != ev.ID || ev2.Source != ev.Source || ev2.Type != ev.Type || ev2.Subject != ev.Subject ||
			ev2.Sequence != ev.Sequence || ev2.ExecutionID != ev.ExecutionID || !ev2.Time.Equal(ev.Time) ||
			ev2.DataContentType != ev.DataContentType || !bytes.Equal(ev2.Data, want) {
			t.Fatalf("round trip changed the event\nfirst  %+v\nsecond %+v\nsent %s", ev, ev2, body2)
		}
	})
}
