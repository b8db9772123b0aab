package order_test

import (
	"fmt"
	"time"

	"github.com/idemhq/idem/order"
)

// The orders example's case: sequence 8 SHIPPED arrives before sequence 7 PAID.
func Example() {
	at := time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC)
	run := func(mode order.Mode, events []order.Incoming, payload map[int64]string) {
		// The order object already projected sequence 6 (CREATED).
		s := order.Stream{Execution: "exec-1", ExecutionSeq: 1, Applied: 6}
		for _, ev := range events {
			d, err := order.Decide(mode, s, ev, nil)
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Printf("%s: seq %d %q -> %s", mode, ev.Sequence, payload[ev.Sequence], d.Action)
			if d.Gap != nil {
				fmt.Printf(", gap %d..%d", d.Gap.From, d.Gap.To)
			}
			if a := d.Applied(); len(a) > 0 {
				fmt.Printf(", apply %v", a)
			}
			fmt.Println()
			s = d.Next
		}
		fmt.Printf("%s: applied up to %d, parked %v\n", mode, s.Applied, s.Parked)
	}
	ev := func(seq int64) order.Incoming {
		return order.Incoming{Execution: "exec-1", ExecutionSeq: 1, Sequence: seq, At: at}
	}
	late := []order.Incoming{ev(8), ev(7), ev(7)} // 7 is redelivered too

	// Snapshot events: the projection keeps SHIPPED, records gap 7, drops 7.
	run(order.ModeSnapshot, late, map[int64]string{7: "PAID", 8: "SHIPPED"})

	// Delta events: 8 waits for 7, then both apply; nothing is lost.
	run(order.ModeDelta, late, map[int64]string{7: "+10 paid", 8: "+0 shipped"})
	// Output:
	// snapshot: seq 8 "SHIPPED" -> apply, gap 7..7, apply [8]
	// snapshot: seq 7 "PAID" -> stale
	// snapshot: seq 7 "PAID" -> stale
	// snapshot: applied up to 8, parked []
	// delta: seq 8 "+0 shipped" -> park, gap 7..7
	// delta: seq 7 "+10 paid" -> apply, apply [7 8]
	// delta: seq 7 "+10 paid" -> duplicate
	// delta: applied up to 8, parked []
}

// A gap that never fills: after the deadline the caller refetches the
// missing facts and the parked deltas apply.
func ExampleCompensated() {
	t0 := time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC)
	s := order.Stream{Execution: "exec-1", ExecutionSeq: 1, Applied: 6}
	d, _ := order.Decide(order.ModeDelta, s, order.Incoming{Execution: "exec-1", ExecutionSeq: 1, Sequence: 8, At: t0}, nil)
	s = d.Next

	fmt.Println("overdue after 10s:", len(order.Overdue(s, t0.Add(10*time.Second), time.Minute)))
	for _, g := range order.Overdue(s, t0.Add(2*time.Minute), time.Minute) {
		// Compensation hook: refetch sequence g.From..g.To (or the state as
		// of g.To) from the source and apply it, then:
		d, err := order.Compensated(s, g)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("compensated %d..%d, then apply %v\n", g.From, g.To, d.Applied())
		s = d.Next
	}
	fmt.Println("applied up to", s.Applied, "gaps", len(s.Gaps))
	// Output:
	// overdue after 10s: 0
	// compensated 7..7, then apply [8]
	// applied up to 8 gaps 0
}
