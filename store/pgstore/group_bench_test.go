package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// BenchmarkGroupCommit measures new keys (claim, then complete) from 1, 16
// and 64 clients with group commit (Grouped, as the store runs: one group
// at a time), with two groups at once (TwoAtOnce, as the store ran before)
// and without it (Alone: every caller may lead, so every write is its own
// autocommit, as before group commit), in one run. Besides req/s and the p50 and p99
// latency of a key (claim and complete) it reports the CPU
// each key costs, in this process and in the pool's PostgreSQL backends
// (from /proc): on a machine whose CPUs are shared, that cost is the
// steadier figure.
//
//	go test -run '^$' -bench BenchmarkGroupCommit -benchtime 3000x ./store/pgstore
func BenchmarkGroupCommit(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		for _, c := range []struct {
			name    string
			leaders int
		}{{"Grouped", 0}, {"TwoAtOnce", 2}, {"Alone", 1 << 20}} {
			b.Run(fmt.Sprintf("%s/%d", c.name, clients), func(b *testing.B) {
				if c.leaders > 0 {
					defer pgstore.SetGroupLeaders(pgstore.SetGroupLeaders(c.leaders))
					defer pgstore.SetGroupStall(pgstore.SetGroupStall(0))
				}
				s, bundle := setup(b)
				s = newStore(b, bundle.pool, nil)
				benchNewKeys(b, s, bundle.pool, clients)
			})
		}
	}
}

// benchNewKeys runs b.N new keys from clients goroutines.
func benchNewKeys(b *testing.B, s *pgstore.Store, pool *pgxpool.Pool, clients int) {
	ctx := context.Background()
	var n atomic.Int64
	next := func() string { return "k" + strconv.FormatInt(n.Add(1), 10) }
	// Open every connection first, so that the backends are known.
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() { _, _ = s.Claim(ctx, params(next(), "f")) })
	}
	wg.Wait()
	pids := backends(b, pool)
	c0, i0 := pgstore.GroupStats(s)
	goCPU, pgCPU := cpuTimes(pids)
	b.ResetTimer()
	start := time.Now()
	var left atomic.Int64
	left.Store(int64(b.N))
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	for range clients {
		wg.Go(func() {
			mine := make([]time.Duration, 0, b.N/clients+1)
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				res, err := s.Claim(ctx, params(next(), "f"))
				if err == nil {
					err = s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res), Response: []byte(`{"id":"ch_1"}`), Retention: time.Hour})
				}
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	goCPU2, pgCPU2 := cpuTimes(pids)
	c1, i1 := pgstore.GroupStats(s)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64((goCPU2-goCPU).Microseconds())/float64(b.N), "go-cpu-µs/op")
	b.ReportMetric(float64((pgCPU2-pgCPU).Microseconds())/float64(b.N), "pg-cpu-µs/op")
	if c1 > c0 {
		b.ReportMetric(float64(i1-i0)/float64(c1-c0), "writes/group")
	}
}

// backends returns the process ids of the pool's server backends: the
// test schema's name is their application_name.
func backends(tb testing.TB, pool *pgxpool.Pool) []int {
	rows, err := pool.Query(context.Background(),
		"SELECT pid FROM pg_stat_activity WHERE application_name = current_setting('application_name')")
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			tb.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// cpuTimes returns the CPU time used so far by this process and by the
// processes pids (user and system; /proc counts in 10 ms ticks).
func cpuTimes(pids []int) (self, others time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, p := range pids {
		bs, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th of them.
		f := strings.Fields(string(bs[strings.LastIndexByte(string(bs), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.Atoi(f[11])
			s, _ := strconv.Atoi(f[12])
			others += time.Duration(u+s) * 10 * time.Millisecond
		}
	}
	return self, others
}
