package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkProxy measures, in one run and at the same concurrency, a bare
// httputil.ReverseProxy and the idem proxy on its two paths (a new key:
// claim, forward, complete; a replay: one store read, no upstream call),
// over the memory and SQLite stores. Compare each to Bare:
//
//	go test -run ^$ -bench BenchmarkProxy -cpu 2 ./proxy/
func BenchmarkProxy(b *testing.B) {
	response := []byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(response)
	}))
	defer up.Close()
	upURL, _ := url.Parse(up.URL)

	b.Run("Bare", func(b *testing.B) {
		rp := httputil.NewSingleHostReverseProxy(upURL)
		tr := newTransport()
		defer tr.CloseIdleConnections()
		rp.Transport = tr
		srv := httptest.NewServer(rp)
		defer srv.Close()
		var n atomic.Int64
		benchRequests(b, srv.URL, func() string { return "bare-" + strconv.FormatInt(n.Add(1), 10) }, http.StatusCreated)
	})
	for _, kind := range []string{"Memory", "SQLite"} {
		b.Run(kind+"/NewKey", func(b *testing.B) {
			f := newFront(b, Config{Upstream: upURL, Store: openStores(b, kind, 1, nil)[0]})
			var n atomic.Int64
			benchRequests(b, f.url, func() string { return "new-" + strconv.FormatInt(n.Add(1), 10) }, http.StatusCreated)
		})
		b.Run(kind+"/Replay", func(b *testing.B) {
			f := newFront(b, Config{Upstream: upURL, Store: openStores(b, kind, 1, nil)[0]})
			f.send(b, req{key: "replayed", body: benchBody, auth: "Bearer bench"}).expect(b, http.StatusCreated, "")
			benchRequests(b, f.url, func() string { return "replayed" }, http.StatusCreated)
		})
	}
}

const benchBody = `{"amount":100,"currency":"eur"}`

// benchParallelism is the number of concurrent clients per GOMAXPROCS.
const benchParallelism = 8

// benchRequests sends POSTs with keys from nextKey from
// benchParallelism*GOMAXPROCS concurrent clients, and fails on any other
// status than want.
func benchRequests(b *testing.B, base string, nextKey func() string, want int) {
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _ := http.NewRequest(http.MethodPost, base+"/charges", strings.NewReader(benchBody))
			r.Header.Set("Authorization", "Bearer bench")
			r.Header.Set("Idempotency-Key", nextKey())
			res, err := client.Do(r)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != want {
				b.Errorf("status %d, want %d", res.StatusCode, want)
				return
			}
		}
	})
}
