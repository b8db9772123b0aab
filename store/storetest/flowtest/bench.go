package flowtest

import (
	"context"
	"strconv"
	"testing"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
)

// Bench runs the engine's benchmarks (key.Guard) on the stores newStore
// returns, each empty, isolated and on its own clock, the same on every
// store:
//   - NewKey: a key seen for the first time (claim, run, complete);
//   - Replay: a completed key asked again (one claim that reads the record);
//   - Conflict: a completed key asked with other content.
//
// Each store's own bench_test.go sets these beside a hand-written baseline
// doing the same work with the driver alone (insert-if-absent plus update;
// a point read), so that the engine's cost is reported as a ratio measured
// in the same run.
func Bench(b *testing.B, newStore func(b *testing.B) store.Store) {
	ctx := context.Background()
	response := []byte(`{"id":"ch_1","amount":100,"status":"succeeded"}`)
	op := func(context.Context) ([]byte, error) { return response, nil }
	guard := func(b *testing.B) *key.Guard {
		g, err := key.New(newStore(b), &key.Config{Heartbeat: -1})
		if err != nil {
			b.Fatal(err)
		}
		return g
	}
	request := func(k, body string) key.Request {
		return key.Request{
			Scope:       key.Scope{Principal: "bench", Operation: "POST /charges", Key: k},
			Fingerprint: key.FingerprintOf([]byte(body)),
		}
	}

	b.Run("NewKey", func(b *testing.B) {
		g := guard(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if res, err := g.Do(ctx, request("k"+strconv.Itoa(i), "100"), op); err != nil || res.Outcome != key.OutcomeExecuted {
				b.Fatal(res.Outcome, err)
			}
		}
	})
	b.Run("Replay", func(b *testing.B) {
		g := guard(b)
		r := request("k", "100")
		if _, err := g.Do(ctx, r, op); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if res, err := g.Do(ctx, r, op); err != nil || res.Outcome != key.OutcomeReplayed {
				b.Fatal(res.Outcome, err)
			}
		}
	})
	b.Run("Conflict", func(b *testing.B) {
		g := guard(b)
		if _, err := g.Do(ctx, request("k", "100"), op); err != nil {
			b.Fatal(err)
		}
		r := request("k", "999")
		b.ReportAllocs()
		for b.Loop() {
			if res, _ := g.Do(ctx, r, op); res.Outcome != key.OutcomeConflict {
				b.Fatal(res.Outcome)
			}
		}
	})
}

// RunSeqAndParallel runs work as two sub-benchmarks: Seq, one call at a
// time, and Parallel, from GOMAXPROCS goroutines (b.RunParallel). Stores
// use it for their own and their hand-written baseline's benchmarks, so
// that both are measured alike.
func RunSeqAndParallel(b *testing.B, work func()) {
	b.Run("Seq", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			work()
		}
	})
	b.Run("Parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				work()
			}
		})
	})
}
