package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/idemhq/idem/proxy"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The proxy on the embedded SQLite store in front of an upstream that
// charges on every call, as `idem proxy --upstream URL --store sqlite:PATH`
// runs it: the retry with the same key gets the first answer back
// (Idempotent-Replayed: true) without reaching the upstream, and the same
// key with another body is refused with 422.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idem-proxy-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The upstream: every call is a new charge.
	var charges atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d","key":%q}`, n, r.Header.Get("Idempotency-Key"))
	}))
	defer upstream.Close()

	db, err := sqlitestore.Open(filepath.Join(dir, "idem.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	up, err := url.Parse(upstream.URL)
	if err != nil {
		log.Fatal(err)
	}
	p, err := proxy.New(&proxy.Config{Upstream: up, Store: st})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Drain(ctx) // after Close: answers still being recorded
	defer p.Close()    // after the server: aborts upstream calls still running

	// Served as `idem proxy` serves it: through proxy.Listener and
	// proxy.ConnContext, which refuse ambiguous framing.
	front := httptest.NewUnstartedServer(p)
	front.Listener = proxy.Listener(front.Listener)
	front.Config.ConnContext = proxy.ConnContext
	front.Start()
	defer front.Close()

	client := front.Client()
	charge := func(body string) {
		r, err := http.NewRequest("POST", front.URL+"/charges", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer alice") // the caller: a hash of this value
		r.Header.Set("Idempotency-Key", "charge-o-42")
		resp, err := client.Do(r)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			log.Fatal(err)
		}
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			var problem struct {
				Type string `json:"type"`
			}
			_ = json.Unmarshal(b, &problem)
			b = []byte(path.Base(problem.Type))
		}
		fmt.Printf("%s: %d replayed=%q %s\n", body, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
	}

	charge(`{"amount":100}`)
	charge(`{"amount":100}`) // the retry
	charge(`{"amount":999}`) // the same key, another body
	fmt.Println("upstream charges:", charges.Load())
	// Output:
	// {"amount":100}: 201 replayed="" {"charge":"ch_1","key":"charge-o-42"}
	// {"amount":100}: 201 replayed="true" {"charge":"ch_1","key":"charge-o-42"}
	// {"amount":999}: 422 replayed="" idempotency-key-reused
	// upstream charges: 1
}
