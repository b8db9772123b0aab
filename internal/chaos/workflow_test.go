package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// workflowSize is one version of TestWorkflowChaos.
type workflowSize struct {
	orders, triggers    int // orders, and concurrent triggers of each
	duration, killEvery time.Duration
}

func currentWorkflowSize() workflowSize {
	if *long {
		return workflowSize{orders: 1000, triggers: 3, duration: 60 * time.Second, killEvery: 2 * time.Second}
	}
	return workflowSize{orders: 40, triggers: 3, duration: 6 * time.Second, killEvery: 1500 * time.Millisecond}
}

// TestWorkflowChaos runs the checkout workflow (charge an order at a
// payments API that honours Idempotency-Key, then ship it through a legacy
// API without keys, verified before each write and unique per order) on
// three `idem serve` processes sharing one PostgreSQL schema, SIGKILLs one
// at random again and again while orders are triggered, each several times
// at once at different processes, and has the payments API drop one
// answer in five after charging. After the faults stop, every order must
// have one run, SUCCEEDED within the lease plus a few seconds, every
// trigger of it answered with that run; and the targets must have seen
// one charge and one shipment per order.
func TestWorkflowChaos(t *testing.T) {
	sz := currentWorkflowSize()
	ctx := context.Background()
	pool := testdb.Postgres(t)
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateApp(ctx, store.App{Name: "shop", TokenHashes: [][]byte{serve.HashToken("tok")}, Scheme: "idem", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The payments API: one charge per key; one answer in five is lost
	// after the charge.
	var pmu sync.Mutex
	charges, payCalls := map[string]int{}, map[string]int{}
	var dropped atomic.Int64
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		k := r.Header.Get("Idempotency-Key")
		pmu.Lock()
		payCalls[k]++
		if charges[k] == 0 {
			charges[k]++
		}
		pmu.Unlock()
		if rand.IntN(5) == 0 {
			dropped.Add(1)
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer payments.Close()
	// The shipping API: no keys; one shipment per order (a second is 409).
	var smu sync.Mutex
	shipments := map[string]int{}
	var posts atomic.Int64
	shipping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		smu.Lock()
		defer smu.Unlock()
		if r.Method == http.MethodGet {
			if shipments[strings.TrimPrefix(r.URL.Path, "/shipments/")] == 0 {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.WriteHeader(http.StatusOK)
			return
		}
		posts.Add(1)
		var body struct{ Order string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		if shipments[body.Order] > 0 {
			w.WriteHeader(http.StatusConflict)
			return
		}
		shipments[body.Order]++
		w.WriteHeader(http.StatusCreated)
	}))
	defer shipping.Close()

	storeURL := schemaURL(t, pool).String()
	dir := t.TempDir()
	procs := make([]*proxyProc, 3)
	for i := range procs {
		procs[i] = &proxyProc{t: t, addr: freeAddr(t), log: filepath.Join(dir, fmt.Sprintf("serve-%d.log", i)),
			args: []string{"serve", "--store", storeURL, "--lease", "2s", "--key-lease", "2s", "--shutdown-timeout", "2s"}}
		procs[i].start()
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	call := func(method, path, body string) (int, map[string]any, error) {
		p := procs[rand.IntN(len(procs))]
		req, _ := http.NewRequest(method, "http://"+p.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		res, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(res.Body)
		_ = json.Unmarshal(b, &out)
		return res.StatusCode, out, nil
	}
	def := `{"vertices": [
  {"id": "start", "type": "ENTRY_POINT", "config": {"idempotencyFields": "order.id"}},
  {"id": "charge", "type": "GATEWAY", "config": {"method": "POST", "url": "` + payments.URL + `/charges",
    "headers": {"Idempotency-Key": "= 'charge-' & payload.order.id"}, "body": {"amount": "= payload.order.amount"},
    "timeout": "2s", "retry": {"maxAttempts": 50, "backoff": "50ms"}}},
  {"id": "ship", "type": "GATEWAY", "config": {"method": "POST", "url": "` + shipping.URL + `/shipments",
    "body": {"order": "= payload.order.id"},
    "verify": {"url": "= '` + shipping.URL + `/shipments/' & payload.order.id", "found": "= response.status = 200"},
    "timeout": "2s", "retry": {"maxAttempts": 50, "backoff": "50ms"}}},
  {"id": "done", "type": "END"}],
 "edges": [{"from": "start", "to": "charge"}, {"from": "charge", "to": "ship"}, {"from": "ship", "to": "done"}]}`
	for {
		status, _, err := call("PUT", "/v1/workflows/checkout", def)
		if err == nil && (status == 201 || status == 200) {
			break
		}
		if err == nil {
			t.Fatalf("PUT the workflow: %d", status)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var kills atomic.Int64
	wg.Go(func() {
		tk := time.NewTicker(sz.killEvery)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				procs[rand.IntN(len(procs))].kill()
				kills.Add(1)
			}
		}
	})
	// The triggers: each order sz.triggers times at once, retried (at any
	// process) until one answers, spread over the run's duration.
	var tmu sync.Mutex
	runs := map[string]map[string]bool{} // order → executions its triggers were answered with
	var answered, retried atomic.Int64
	start := time.Now()
	pace := sz.duration / time.Duration(sz.orders)
	var triggers sync.WaitGroup
	for i := range sz.orders {
		order := fmt.Sprintf("o-%d", i)
		for range sz.triggers {
			triggers.Go(func() {
				for {
					status, out, err := call("POST", "/v1/workflows/checkout/trigger", `{"order": {"id": "`+order+`", "amount": 5}}`)
					if err == nil && (status == 201 || status == 200) {
						ex, _ := out["execution"].(map[string]any)
						id, _ := ex["id"].(string)
						tmu.Lock()
						if runs[order] == nil {
							runs[order] = map[string]bool{}
						}
						runs[order][id] = true
						tmu.Unlock()
						answered.Add(1)
						return
					}
					if err == nil && status != http.StatusServiceUnavailable {
						t.Errorf("trigger of %s: %d %v", order, status, out)
						return
					}
					retried.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
		time.Sleep(pace)
	}
	triggers.Wait()
	for time.Since(start) < sz.duration {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	faultsEnd := time.Now()

	// Every run ends SUCCEEDED within the lease plus a few seconds.
	deadline := faultsEnd.Add(2*time.Second + 10*time.Second)
	for order, ids := range runs {
		if len(ids) != 1 {
			t.Fatalf("order %s: its triggers were answered with %d runs %v, want one", order, len(ids), ids)
		}
		for id := range ids {
			for {
				e, err := st.GetExecution(ctx, "shop", id)
				if err == nil && e.Status == 4 { // SUCCEEDED
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("order %s: run %s is %+v (%v) %v after the faults stopped", order, id, e, err, time.Since(faultsEnd))
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	if len(runs) != sz.orders {
		t.Fatalf("%d orders have runs, want %d", len(runs), sz.orders)
	}
	pmu.Lock()
	defer pmu.Unlock()
	smu.Lock()
	defer smu.Unlock()
	repeats := 0
	for k, n := range charges {
		if n != 1 {
			t.Fatalf("payments: %d charges under %s", n, k)
		}
		repeats += payCalls[k] - 1
	}
	if len(charges) != sz.orders {
		t.Fatalf("payments: %d keys charged, want %d", len(charges), sz.orders)
	}
	for o, n := range shipments {
		if n != 1 {
			t.Fatalf("shipping: %d shipments of %s", n, o)
		}
	}
	if len(shipments) != sz.orders {
		t.Fatalf("shipping: %d orders shipped, want %d", len(shipments), sz.orders)
	}
	t.Logf("%d orders, %d triggers answered (%d retried), %d kills; payments: %d answers dropped, %d repeated calls absorbed; shipping: %d posts",
		sz.orders, answered.Load(), retried.Load(), kills.Load(), dropped.Load(), repeats, posts.Load())
}
