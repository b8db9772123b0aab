package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
)

// TestConcurrentBodiesStayApart: the buffers a response body is copied
// through (and the ones a participating body is prefetched into) are
// recycled between requests, so a buffer handed back while still in use,
// or handed to two requests at once, would mix one client's answer into
// another's. Many requests at once, stored and not, with bodies smaller
// than one copy buffer, spanning several, and larger than MaxResponse
// (streamed, not stored), each get their own bytes, and so do their
// replays.
func TestConcurrentBodiesStayApart(t *testing.T) {
	const maxResponse = 3 * copyBufferSize
	f, up, _, _ := setup(t, "Memory", func(c *Config) { c.MaxResponse = maxResponse })
	body := func(id string, size int) []byte {
		return bytes.Repeat([]byte(id+"."), size/(len(id)+1)+1)[:size]
	}
	up.setHandler(func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body(r.URL.Query().Get("id"), size))
	})
	sizes := []int{0, 1, 700, copyBufferSize - 1, copyBufferSize + 1, 2*copyBufferSize + 17, maxResponse + 1, 5 * copyBufferSize}
	const clients, each = 12, 16
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("c%di%d", c, i)
				size := sizes[(c+i)%len(sizes)]
				q := req{path: fmt.Sprintf("/charges?id=%s&size=%d", id, size)}
				if i%3 != 0 { // two in three hold a key and are stored
					q.key = id
				}
				want := body(id, size)
				tries := 2 // the second, with a key, is a replay
				if q.key != "" && size > maxResponse {
					tries = 1 // its key completed without the body: never run again
				}
				for try := range tries {
					got := f.send(t, q)
					if got.err != nil || got.status != http.StatusCreated || !bytes.Equal(got.body, want) {
						t.Errorf("%s (%d bytes, try %d): status %d, %d bytes, err %v; body differs: %t",
							id, size, try, got.status, len(got.body), got.err, !bytes.Equal(got.body, want))
						return
					}
					if try == 1 && q.key != "" && !got.replayed() {
						t.Errorf("%s (%d bytes): the second request was not a replay", id, size)
					}
				}
			}
		})
	}
	wg.Wait()
}
