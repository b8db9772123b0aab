package serve_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/serve"
)

// A trigger starts a run of the latest version; its vertices run as steps
// with the keys computed from the order, and the run ends SUCCEEDED with
// one charge and one shipment. Its execution names the workflow and its
// version, and no task: the tasks API does not show its task.
func TestTriggerRunsTheWorkflow(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		ship, shipURL := newShipping(t)
		e := start(&serve.Config{})
		e.putWorkflow("checkout", checkoutFlow(payURL, shipURL, ""))
		a := e.call("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", `{"order": {"id": "o-1", "amount": 1250}}`)
		e.want(a, 201, "")
		id := a.str("execution", "id")
		if a.str("workflow") != "checkout" || a.body["version"] != 1.0 || a.str("execution", "workflow") != "checkout" {
			t.Fatalf("trigger: %s", a.raw)
		}
		done := e.settled("tok-orders", id)
		if done.str("status") != "SUCCEEDED" || done.body["taskId"] != nil || done.body["version"] != 1.0 {
			t.Fatalf("execution %s", done.raw)
		}
		if want := []string{"charge COMPLETED charge-o-1", "ship COMPLETED "}; !slices.Equal(e.steps("tok-orders", id), want) {
			t.Fatalf("steps %v, want %v", e.steps("tok-orders", id), want)
		}
		if keys, charges, _ := pay.effects(); keys != 1 || charges != 1 {
			t.Fatalf("payments: %d keys, %d charges", keys, charges)
		}
		if orders, shipments, _ := ship.count(); orders != 1 || shipments != 1 {
			t.Fatalf("shipping: %d orders, %d shipments", orders, shipments)
		}
		if tasks := e.call("tok-orders", "GET", "/v1/tasks", "", ""); strings.Contains(tasks.raw, "idem.workflow") {
			t.Fatalf("the tasks API shows a workflow's run: %s", tasks.raw)
		}
		if other := e.call("tok-billing", "GET", "/v1/executions/"+id, "", ""); other.status != 404 {
			t.Fatalf("another application reads the run: %d", other.status)
		}
		evs := e.call("tok-orders", "GET", "/v1/executions/"+id+"/events", "", "")
		if !strings.Contains(evs.raw, `"subject":"checkout"`) || strings.Contains(evs.raw, "taskId") {
			t.Fatalf("events: %s", evs.raw)
		}
	})
}

// 100 identical triggers at once start one execution: one 201, 99 200s
// with Idempotent-Replayed and the same execution; 1,000 distinct ones
// start 1,000. Every order is charged once.
func TestTriggerStorms(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, start func(cfg *serve.Config) *env) {
		pay, payURL := newPayments(t)
		_, shipURL := newShipping(t)
		e := start(&serve.Config{})
		e.putWorkflow("checkout", checkoutFlow(payURL, shipURL, ""))
		storm := func(n int, body func(i int) string) []answer {
			out := make([]answer, n)
			var wg sync.WaitGroup
			sem := make(chan struct{}, 32)
			for i := range n {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					a, err := e.try("tok-orders", "POST", "/v1/workflows/checkout/trigger", "", body(i))
					if err != nil {
						a.raw = err.Error()
					}
					out[i] = a
				})
			}
			wg.Wait()
			return out
		}
		same := storm(100, func(int) string { return `{"order": {"id": "o-same", "amount": 5}}` })
		created, ids := 0, map[string]bool{}
		for _, a := range same {
			switch {
			case a.status == 201:
				created++
			case a.status == 200 && a.header.Get("Idempotent-Replayed") == "true":
			default:
				t.Fatalf("an identical trigger: %d %s", a.status, a.raw)
			}
			ids[a.str("execution", "id")] = true
		}
		if created != 1 || len(ids) != 1 {
			t.Fatalf("100 identical triggers: %d created, %d executions; want 1 and 1", created, len(ids))
		}
		distinct := storm(1000, func(i int) string { return fmt.Sprintf(`{"order": {"id": "o-%d", "amount": 5}}`, i) })
		ids = map[string]bool{}
		for _, a := range distinct {
			if a.status != 201 {
				t.Fatalf("a distinct trigger: %d %s", a.status, a.raw)
			}
			ids[a.str("execution", "id")] = true
		}
		if len(ids) != 1000 {
			t.Fatalf("1,000 distinct triggers started %d executions", len(ids))
		}
		for id := range ids {
			if got := e.settled("tok-orders", id); got.str("status") != "SUCCEEDED" {
				t.Fatalf("execution %s", got.raw)
			}
		}
		if keys, charges, _ := pay.effects(); keys != 1001 || charges != 1001 {
			t.Fatalf("payments: %d keys, %d charges; want 1,001 of each", keys, charges)
		}
	})
}
