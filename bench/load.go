package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// result is what one setup did in one measurement.
type result struct {
	ops      int64
	elapsed  time.Duration
	p50, p99 time.Duration
}

// rate is operations per second.
func (r result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// drive runs op from clients goroutines, each in a loop, for d, and
// returns the count and the latency percentiles of the calls that ended.
// The first error stops every client and is returned: a row whose
// operations fail measures nothing.
func drive(ctx context.Context, clients int, d time.Duration, op func(ctx context.Context, client int) error) (result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t := time.Now()
				if err := op(ctx, c); err != nil {
					cancel(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return result{}, err
	}
	return summarize(slices.Concat(lat...), elapsed), nil
}

// measure runs op as drive does, for warmup unmeasured (when positive),
// then for d.
func measure(ctx context.Context, clients int, warmup, d time.Duration, op func(ctx context.Context, client int) error) (result, error) {
	if warmup > 0 {
		if _, err := drive(ctx, clients, warmup, op); err != nil {
			return result{}, fmt.Errorf("warming up: %w", err)
		}
	}
	return drive(ctx, clients, d, op)
}

// summarize counts latencies and takes their 50th and 99th percentiles.
func summarize(lat []time.Duration, elapsed time.Duration) result {
	r := result{ops: int64(len(lat)), elapsed: elapsed}
	if len(lat) == 0 {
		return r
	}
	slices.Sort(lat)
	r.p50 = lat[len(lat)*50/100]
	r.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	return r
}

// keys makes idempotency keys unique to this run: 36 characters, the
// length of a UUID, which Fiber's middleware requires by default.
type keys struct {
	run string
	n   atomic.Int64
}

func newKeys() *keys { return &keys{run: rand.Text()[:12]} }

// next returns a key never returned before.
func (k *keys) next() string { return fmt.Sprintf("%s-%023d", k.run, k.n.Add(1)) }
