package httpidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

const benchBody = `{"amount":100,"currency":"EUR","customer":"cus_123"}`

// benchHandler is a small JSON endpoint: it reads the body and answers 201.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/charges/ch_1")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"ch_1","amount":100,"currency":"EUR"}`)
})

func benchRequest(k string) *http.Request {
	r := httptest.NewRequest("POST", "/charges?expand=customer", strings.NewReader(benchBody))
	r.Header.Set(principalHeader, "alice")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(httpidem.HeaderKey, k)
	return r
}

// BenchmarkMiddleware measures a request through the middleware, with a
// new key (claim, run, complete) and with a key already completed
// (replay), over each store, beside the bare handler measured in the same
// run with the same request and recorder costs. Compare the rows of one
// run, not across runs.
func BenchmarkMiddleware(b *testing.B) {
	for _, sc := range []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"Memstore", func(*testing.B) store.Store { return memstore.New(nil) }},
		{"SQLite", func(b *testing.B) store.Store { s, _ := openSQLite(b, time.Now); return s }},
	} {
		b.Run(sc.name, func(b *testing.B) {
			b.Run("Bare", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					benchHandler.ServeHTTP(httptest.NewRecorder(), benchRequest("k"))
				}
			})
			newHandler := func(b *testing.B, cfg ...*key.Config) http.Handler {
				g, err := key.New(sc.open(b), append(cfg, nil)[0])
				if err != nil {
					b.Fatal(err)
				}
				m, err := httpidem.New(g, &httpidem.Config{Principal: principalFromHeader})
				if err != nil {
					b.Fatal(err)
				}
				return mux(m, benchHandler)
			}
			b.Run("NewKey", func(b *testing.B) {
				h := newHandler(b)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, benchRequest("key-"+strconv.Itoa(i)))
					if rec.Code != http.StatusCreated {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
				}
			})
			// Replay answers from the guard's replay cache; ReplayFromStore
			// with it off, from the store.
			for _, rc := range []struct {
				name string
				cfg  *key.Config
			}{{"Replay", nil}, {"ReplayFromStore", &key.Config{ReplayCacheBytes: -1}}} {
				b.Run(rc.name, func(b *testing.B) {
					h := newHandler(b, rc.cfg)
					h.ServeHTTP(httptest.NewRecorder(), benchRequest("k"))
					b.ReportAllocs()
					for b.Loop() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, benchRequest("k"))
						if rec.Header().Get(httpidem.HeaderReplayed) != "true" {
							b.Fatalf("not replayed: %d", rec.Code)
						}
					}
				})
			}
		})
	}
}
