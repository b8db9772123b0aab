package memstore_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

func BenchmarkEngine(b *testing.B) {
	flowtest.Bench(b, func(b *testing.B) store.Store { return memstore.New(nil) })
}

// BenchmarkBaseline is the same work written by hand: a mutex-guarded map,
// insert-if-absent then update for a new key, one lookup for a replay.
func BenchmarkBaseline(b *testing.B) {
	type rec struct {
		state    int
		response []byte
	}
	response := []byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`)
	b.Run("NewKey", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string]rec{}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			k := "k" + strconv.Itoa(i)
			mu.Lock()
			if _, ok := m[k]; !ok {
				m[k] = rec{state: 1}
			}
			mu.Unlock()
			mu.Lock()
			m[k] = rec{state: 2, response: response}
			mu.Unlock()
		}
	})
	b.Run("Replay", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string]rec{"k": {state: 2, response: response}}
		b.ReportAllocs()
		for b.Loop() {
			mu.Lock()
			r := m["k"]
			mu.Unlock()
			if r.state != 2 {
				b.Fatal(r)
			}
		}
	})
}
