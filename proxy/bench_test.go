package proxy

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/httpidem"
	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
)

// The proxy's benchmarks (see the README), every row measured in one run
// at the same concurrency (benchParallelism x GOMAXPROCS clients over
// loopback HTTP), each reporting throughput and p50/p99 latency besides
// ns/op:
//
//   - BenchmarkProxy: Bare (httputil.ReverseProxy) and, per store, the idem
//     proxy on a new key (claim, forward, complete) and on a replay.
//
//   - BenchmarkMiddleware: Handler (a bare JSON handler) and, per store, the
//     same handler behind httpidem on a new key and on a replay.
//
//   - BenchmarkStoreAlone: per store, the store's own claim+complete for
//     the same writes, at the same concurrency: the ceiling new keys can
//     reach on that store.
//
//     go test -run '^$' -bench 'Proxy|Middleware|StoreAlone' -benchtime 3s ./proxy/
var benchStores = []string{"Memory", "SQLite", "SQLiteNormal", "Postgres", "Redis"}

const benchBody = `{"amount":100,"currency":"eur"}`

// benchParallelism is the number of concurrent clients per GOMAXPROCS.
const benchParallelism = 8

var benchResponse = []byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`)

// benchHandler is the upstream and the bare handler: it reads the body and
// answers 201 with a small JSON body.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(benchResponse)
})

func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(benchHandler)
	defer up.Close()
	upURL, _ := url.Parse(up.URL)

	b.Run("Bare", func(b *testing.B) {
		rp := httputil.NewSingleHostReverseProxy(upURL)
		tr := newTransport()
		defer tr.CloseIdleConnections()
		rp.Transport = tr
		srv := httptest.NewServer(rp)
		defer srv.Close()
		benchRequests(b, srv.URL, newKeys("bare"), http.StatusCreated)
	})
	for _, kind := range benchStores {
		b.Run(kind+"/NewKey", func(b *testing.B) {
			f := newFront(b, Config{Upstream: upURL, Store: openStores(b, kind, 1, nil)[0]})
			benchRequests(b, f.url, newKeys("new"), http.StatusCreated)
		})
		b.Run(kind+"/Replay", func(b *testing.B) {
			f := newFront(b, Config{Upstream: upURL, Store: openStores(b, kind, 1, nil)[0]})
			f.send(b, req{key: "replayed", body: benchBody, auth: "Bearer bench"}).expect(b, http.StatusCreated, "")
			benchRequests(b, f.url, func() string { return "replayed" }, http.StatusCreated)
		})
	}
}

func BenchmarkMiddleware(b *testing.B) {
	b.Run("Handler", func(b *testing.B) {
		srv := httptest.NewServer(benchHandler)
		defer srv.Close()
		benchRequests(b, srv.URL, newKeys("bare"), http.StatusCreated)
	})
	serve := func(b *testing.B, kind string) string {
		g, err := key.New(openStores(b, kind, 1, nil)[0], nil)
		if err != nil {
			b.Fatal(err)
		}
		m, err := httpidem.New(g, &httpidem.Config{Principal: func(r *http.Request) (string, bool) {
			a := r.Header.Get("Authorization")
			return a, a != ""
		}})
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(m.Wrap(benchHandler))
		b.Cleanup(srv.Close)
		return srv.URL
	}
	for _, kind := range benchStores {
		b.Run(kind+"/NewKey", func(b *testing.B) {
			benchRequests(b, serve(b, kind), newKeys("new"), http.StatusCreated)
		})
		b.Run(kind+"/Replay", func(b *testing.B) {
			u := serve(b, kind)
			r, _ := http.NewRequest(http.MethodPost, u+"/charges", strings.NewReader(benchBody))
			r.Header.Set("Authorization", "Bearer bench")
			r.Header.Set("Idempotency-Key", "replayed")
			res, err := http.DefaultClient.Do(r)
			if err != nil || res.StatusCode != http.StatusCreated {
				b.Fatalf("first request: %v %v", res, err)
			}
			res.Body.Close()
			benchRequests(b, u, func() string { return "replayed" }, http.StatusCreated)
		})
	}
}

func BenchmarkStoreAlone(b *testing.B) {
	for _, kind := range benchStores {
		b.Run(kind+"/NewKey", func(b *testing.B) {
			s := openStores(b, kind, 1, nil)[0]
			ctx := context.Background()
			var n atomic.Int64
			benchLoop(b, func() error {
				sc := key.Scope{Principal: "bench", Operation: "POST /charges", Key: "k" + strconv.FormatInt(n.Add(1), 10)}
				res, err := s.Claim(ctx, store.ClaimParams{Key: sc.StoreKey(), Fingerprint: key.FingerprintOf([]byte(benchBody)),
					Owner: rand.Text(), Lease: key.DefaultLease, Retention: key.DefaultRetention})
				if err != nil {
					return err
				}
				return s.Complete(ctx, store.CompleteParams{Fence: store.Fence{Key: sc.StoreKey(), Epoch: res.Record.Epoch, Owner: res.Record.Owner},
					Response: benchResponse, Retention: key.DefaultRetention})
			})
		})
	}
}

func newKeys(prefix string) func() string {
	var n atomic.Int64
	return func() string { return prefix + "-" + strconv.FormatInt(n.Add(1), 10) }
}

// benchRequests sends POSTs with keys from nextKey and fails on any other
// status than want (a replay is a 201 too).
func benchRequests(b *testing.B, base string, nextKey func() string, want int) {
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	benchLoop(b, func() error {
		r, _ := http.NewRequest(http.MethodPost, base+"/charges", strings.NewReader(benchBody))
		r.Header.Set("Authorization", "Bearer bench")
		r.Header.Set("Idempotency-Key", nextKey())
		res, err := client.Do(r)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			return &statusError{got: res.StatusCode, want: want}
		}
		return nil
	})
}

type statusError struct{ got, want int }

func (e *statusError) Error() string {
	return "status " + strconv.Itoa(e.got) + ", want " + strconv.Itoa(e.want)
}

// benchLoop runs op from benchParallelism*GOMAXPROCS goroutines and reports
// req/s and the p50 and p99 of op's latency.
func benchLoop(b *testing.B, op func() error) {
	var (
		mu  sync.Mutex
		all []time.Duration
	)
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			if err := op(); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		all = append(all, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
}
