package httpidem_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/memstore"
)

// A charge endpoint behind the middleware: the retry with the same key
// gets the first response back, and the handler runs once.
func Example() {
	g, err := key.New(memstore.New(nil), nil) // sqlitestore or pgstore in production
	if err != nil {
		log.Fatal(err)
	}
	m, err := httpidem.New(g, &httpidem.Config{
		// From your authentication; an unauthenticated request passes through.
		Principal: func(r *http.Request) (string, bool) { return r.Header.Get("X-User"), r.Header.Get("X-User") != "" },
	})
	if err != nil {
		log.Fatal(err)
	}
	charges := 0
	mux := http.NewServeMux()
	mux.Handle("POST /charges", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges)
	})))

	for range 2 {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":100}`))
		r.Header.Set("X-User", "alice")
		r.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		body, _ := io.ReadAll(rec.Body)
		fmt.Printf("%d %s replayed=%q\n", rec.Code, body, rec.Header().Get("Idempotent-Replayed"))
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201 {"charge":1} replayed=""
	// 201 {"charge":1} replayed="true"
	// charges: 1
}
