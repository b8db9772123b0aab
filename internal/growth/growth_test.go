package growth_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"flag"
	"fmt"
	mathrand "math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store"
)

var (
	maxRecords = flag.Int("growth.max", 10_000,
		"largest number of stored records: sizes 10^3, 10^5 and 10^7 up to it, and it (the full run: 10000000)")
	opsFlag = flag.Int("growth.ops", 0,
		"operations per latency measurement; 0 means 400 when -growth.max is at most 10^4 (CI), 4000 above")
)

// TestMain fails the package if a test leaves a goroutine behind (a pool,
// a client, the reader of redis-server's output).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	// The scope and request every record is keyed by, as package key keys
	// a charge: Scope.StoreKey and FingerprintOf(method, path, body).
	principal = "growth-tenant"
	operation = "POST /charges"
	method    = "POST"
	path      = "/charges"

	lease     = 30 * time.Second
	retention = 24 * time.Hour

	// expiryOffset puts the prefilled records' expiry well after the run,
	// so that none expires during it.
	expiryOffset = 6 * time.Hour

	// dueFrom is the first index of the records written already expired
	// for a sweep to delete, far above the prefilled ones.
	dueFrom = 1_000_000_000

	// heapBound is how much the Go heap may grow from the smallest size to
	// the largest: the records live in the store, so the heap must not
	// follow them (ten million records are gigabytes).
	heapBound = 64 // MiB

	// sweepBatch is key.SweeperConfig's default BatchSize.
	sweepBatch = 1000
)

// The i-th prefilled record. Each store's fill writes exactly these bytes
// in its own format (the PostgreSQL fill computes them in SQL), and
// checkReplay reads them back through the store.

func storeKey(name string) string {
	return key.Scope{Principal: principal, Operation: operation, Key: name}.StoreKey()
}

func prefilledKey(i int) string { return storeKey("order-" + strconv.Itoa(i)) }

func body(i int) string { return `{"amount":100,"order":"o-` + strconv.Itoa(i) + `"}` }

func fingerprint(i int) []byte {
	return key.FingerprintOf([]byte(method), []byte(path), []byte(body(i)))
}

func response(i int) []byte {
	return []byte(`{"id":"ch_` + strconv.Itoa(i) + `","amount":100,"status":"succeeded"}`)
}

func owner(i int) []byte {
	sum := sha256.Sum256([]byte("owner-" + strconv.Itoa(i)))
	return sum[:16]
}

// expiresAt is when record i of a fill expires: zero + i ms, as if the
// records were written one per millisecond, the oldest first.
func expiresAt(zero time.Time, i int) time.Time { return zero.Add(time.Duration(i) * time.Millisecond) }

// subject is one store under measurement: the store and what the run needs
// beyond its API.
type subject struct {
	st store.Store
	// zero is the time prefilled record i expires i ms after.
	zero time.Time
	// fill writes records [from, to), completed, record i expiring at
	// expiresAt(zero, i).
	fill func(t *testing.T, from, to int, zero time.Time)
	// count returns how many records the store holds.
	count func(t *testing.T) int
	// footprint returns the bytes the store spends on what it holds.
	footprint func(t *testing.T) int64
	// footprintName names footprint in the table ("disk", "memory").
	footprintName string
	// explain logs how the store runs the statements that read the
	// records, at the largest size; nil when there is nothing to show.
	explain func(t *testing.T)
	// setting says what the store ran with (pool, durability), for the log.
	setting string
}

// TestGrowth measures each store at each size; see the package doc.
func TestGrowth(t *testing.T) {
	sizes := sizesUpTo(*maxRecords)
	ops := *opsFlag
	if ops == 0 {
		ops = 400
		if *maxRecords > 10_000 {
			ops = 4000
		}
	}
	t.Logf("sizes %v, %d operations per latency measurement", sizes, ops)
	for _, kind := range []struct {
		name string
		open func(*testing.T) *subject
	}{
		{"SQLite", openSQLite},
		{"Postgres", openPostgres},
		{"Redis", openRedis},
	} {
		// One store at a time, never in parallel: they share the CPUs.
		t.Run(kind.name, func(t *testing.T) { measure(t, kind.name, kind.open(t), sizes, ops) })
	}
}

// sizesUpTo returns 10^3, 10^5 and 10^7 up to max, and max itself.
func sizesUpTo(max int) []int {
	var out []int
	for _, n := range []int{1_000, 100_000, 10_000_000} {
		if n <= max {
			out = append(out, n)
		}
	}
	if len(out) == 0 || out[len(out)-1] < max {
		out = append(out, max)
	}
	return out
}

// sizeRow is one line of a store's table.
type sizeRow struct {
	records                        int // when the measurement started
	new1, new16, replay1, replay16 sample
	sweepDue, sweepNone            time.Duration // zero: the store expires records itself
	bytesPerRecord                 float64
	heapBefore, heapAfter          float64 // MiB
}

// measure grows one store through sizes, measures it at each, then runs
// the client sweep at the largest, and logs the tables.
func measure(t *testing.T, name string, s *subject, sizes []int, ops int) {
	var (
		rows    []sizeRow
		filled  int          // prefilled records are 0 .. filled-1
		created atomic.Int64 // records the measurements created
	)
	newKey := func(ctx context.Context) error {
		n := created.Add(1)
		k := storeKey("fresh-" + strconv.FormatInt(n, 10))
		res, err := s.st.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: fingerprint(int(n)), Owner: token(),
			Lease: lease, Retention: retention})
		if err != nil {
			return fmt.Errorf("claim of new key %d: %w", n, err)
		}
		if !res.Claimed {
			return fmt.Errorf("new key %d not granted: %v", n, res.Record.State)
		}
		err = s.st.Complete(ctx, store.CompleteParams{Response: response(int(n)), Retention: retention,
			Fence: store.Fence{Key: k, Epoch: res.Record.Epoch, Owner: res.Record.Owner}})
		if err != nil {
			return fmt.Errorf("complete of new key %d: %w", n, err)
		}
		return nil
	}
	replay := func(ctx context.Context) error { return checkReplay(ctx, s.st, mathrand.IntN(filled)) }

	for step, n := range sizes {
		if target := n - int(created.Load()); target > filled {
			start := time.Now()
			s.fill(t, filled, target, s.zero)
			t.Logf("%s: wrote records %d to %d in %v", name, filled, target-1, time.Since(start).Round(time.Millisecond))
			filled = target
		}
		verifyPrefill(t, s, filled)
		row := sizeRow{records: filled + int(created.Load())}
		if got := s.count(t); got != row.records {
			t.Fatalf("%s holds %d records, want %d prefilled + %d created", name, got, filled, created.Load())
		}
		row.heapBefore = heapMiB()
		row.replay1 = drive(t, 1, ops, replay)
		row.replay16 = drive(t, 16, ops, replay)
		row.new1 = drive(t, 1, ops, newKey)
		row.new16 = drive(t, 16, ops, newKey)
		held := filled + int(created.Load())
		if got := s.count(t); got != held {
			t.Fatalf("%s holds %d records after the measurement, want %d", name, got, held)
		}
		row.bytesPerRecord = float64(s.footprint(t)) / float64(held)
		if !s.st.Capabilities().SelfExpiring {
			// One batch of expired records, then what key.Sweep does: a
			// full batch, then a short one that ends the sweep.
			from := dueFrom + step*sweepBatch
			s.fill(t, from, from+sweepBatch, time.Now().Add(-time.Hour-time.Duration(from)*time.Millisecond))
			row.sweepDue = timeSweep(t, s.st, sweepBatch)
			row.sweepNone = timeSweep(t, s.st, 0)
			if got := s.count(t); got != held {
				t.Fatalf("%s holds %d records after the sweep, want %d", name, got, held)
			}
		}
		row.heapAfter = heapMiB()
		rows = append(rows, row)
		t.Logf("%s at %d records: measured", name, row.records)
	}
	if s.explain != nil {
		s.explain(t)
	}

	var scaling []scalingRow
	atRecords := filled + int(created.Load())
	for _, clients := range []int{1, 4, 16, 64, 256} {
		scaling = append(scaling, scalingRow{clients, drive(t, clients, max(ops, 8*clients), newKey)})
	}

	t.Logf("%s (%s): cost by stored records\n\n%s", name, s.setting, sizeTable(rows, s.footprintName))
	t.Logf("%s: new keys by clients, at %d records\n\n%s", name, atRecords, scalingTable(scaling))

	grew := rows[len(rows)-1].heapAfter - rows[0].heapBefore
	if grew > heapBound {
		t.Errorf("%s: the Go heap grew by %.1f MiB from %d to %d records, more than %d MiB: records are kept in the process",
			name, grew, rows[0].records, rows[len(rows)-1].records, heapBound)
	}
}

// checkReplay claims prefilled record i with its own fingerprint through
// the store, as a retry would, and checks that it replays: not granted,
// DONE, epoch 1, with the fingerprint and response written for it.
func checkReplay(ctx context.Context, st store.Store, i int) error {
	fp := fingerprint(i)
	res, err := st.Claim(ctx, store.ClaimParams{Key: prefilledKey(i), Fingerprint: fp, Owner: token(),
		Lease: lease, Retention: retention})
	if err != nil {
		return fmt.Errorf("replay of record %d: %w", i, err)
	}
	r := res.Record
	if res.Claimed || r.State != store.StateDone || r.Epoch != 1 ||
		!bytes.Equal(r.Fingerprint, fp) || !bytes.Equal(r.Response, response(i)) {
		return fmt.Errorf("record %d: claimed %v, %v, epoch %d, fingerprint %x, response %q; want a replay of %q",
			i, res.Claimed, r.State, r.Epoch, r.Fingerprint, r.Response, response(i))
	}
	return nil
}

// verifyPrefill checks the first and last prefilled records and some in
// between: each replays, and Get shows the owner and expiry written.
func verifyPrefill(t *testing.T, s *subject, filled int) {
	t.Helper()
	ctx := context.Background()
	picks := []int{0, filled - 1}
	for range 16 {
		picks = append(picks, mathrand.IntN(filled))
	}
	for _, i := range picks {
		if err := checkReplay(ctx, s.st, i); err != nil {
			t.Fatalf("prefilled records do not replay: %v", err)
		}
		r, err := s.st.Get(ctx, prefilledKey(i))
		if err != nil {
			t.Fatalf("Get of prefilled record %d: %v", i, err)
		}
		if r.Owner != string(owner(i)) || !r.ExpiresAt.Equal(expiresAt(s.zero, i)) || !r.LeaseUntil.IsZero() || r.Unknown {
			t.Fatalf("prefilled record %d reads owner %x, expiry %v, lease %v, unknown %v; want owner %x, expiry %v, no lease",
				i, r.Owner, r.ExpiresAt, r.LeaseUntil, r.Unknown, owner(i), expiresAt(s.zero, i))
		}
	}
}

// sample is one measurement: each operation's latency, sorted, and the
// time they all took.
type sample struct {
	lat  []time.Duration
	took time.Duration
}

// us is the p-th percentile latency in microseconds.
func (s sample) us(p float64) int64 {
	i := min(int(float64(len(s.lat))*p), len(s.lat)-1)
	return s.lat[i].Microseconds()
}

func (s sample) perSecond() float64 { return float64(len(s.lat)) / s.took.Seconds() }

// drive runs op ops times from clients goroutines and fails the test on
// the first error.
func drive(t *testing.T, clients, ops int, op func(context.Context) error) sample {
	t.Helper()
	ctx := context.Background()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	lats := make([][]time.Duration, clients)
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(ops) {
				began := time.Now()
				if err := op(ctx); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				lats[c] = append(lats[c], time.Since(began))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if len(errs) > 0 {
		t.Fatalf("%d clients: %d operations failed, the first: %v", clients, len(errs), errs[0])
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	return sample{lat: all, took: took}
}

// timeSweep runs one sweep of a batch, which must delete want records,
// and returns its time.
func timeSweep(t *testing.T, st store.Store, want int) time.Duration {
	t.Helper()
	start := time.Now()
	n, err := st.Sweep(context.Background(), sweepBatch)
	took := time.Since(start)
	if err != nil || n != want {
		t.Fatalf("Sweep deleted %d records, want %d (err %v)", n, want, err)
	}
	return took
}

// heapMiB is the Go heap in use after a collection.
func heapMiB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}

// token returns 16 random bytes, like package key's owner tokens.
func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return string(b)
}

func sizeTable(rows []sizeRow, footprint string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| records | new key p50 / p99 µs, 1 client | new key p50 / p99 µs, 16 clients | new keys/s, 16 clients "+
		"| replay p50 / p99 µs, 1 client | replay p50 / p99 µs, 16 clients | replays/s, 16 clients "+
		"| sweep ms, 1,000 due / none due | %s B/record | Go heap MiB, before → after |\n", footprint)
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		sweep := "–"
		if r.sweepDue > 0 {
			sweep = fmt.Sprintf("%.1f / %.1f", ms(r.sweepDue), ms(r.sweepNone))
		}
		fmt.Fprintf(&b, "| %s | %d / %d | %d / %d | %s | %d / %d | %d / %d | %s | %s | %.0f | %.1f → %.1f |\n",
			thousands(int64(r.records)),
			r.new1.us(0.5), r.new1.us(0.99), r.new16.us(0.5), r.new16.us(0.99), thousands(int64(r.new16.perSecond())),
			r.replay1.us(0.5), r.replay1.us(0.99), r.replay16.us(0.5), r.replay16.us(0.99), thousands(int64(r.replay16.perSecond())),
			sweep, r.bytesPerRecord, r.heapBefore, r.heapAfter)
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type scalingRow struct {
	clients int
	s       sample
}

func scalingTable(rows []scalingRow) string {
	var b strings.Builder
	b.WriteString("| clients | new keys/s | p50 µs | p99 µs |\n|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %s | %d | %d |\n", r.clients, thousands(int64(r.s.perSecond())), r.s.us(0.5), r.s.us(0.99))
	}
	return b.String()
}

// thousands writes n with commas: 10,000,000.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
