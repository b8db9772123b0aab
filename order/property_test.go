package order

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC)

// deliveries draws every sequence 1..n one to three times, in a random order.
func deliveries(t *rapid.T, n int) []int64 {
	var out []int64
	for seq := 1; seq <= n; seq++ {
		copies := rapid.IntRange(1, 3).Draw(t, fmt.Sprintf("copies%d", seq))
		for range copies {
			out = append(out, int64(seq))
		}
	}
	return rapid.Permutation(out).Draw(t, "order")
}

func TestDeltaPermutationAppliesEachOnceInOrder(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 60).Draw(t, "n")
		var s Stream
		var applied []int64
		for i, seq := range deliveries(t, n) {
			ev := Incoming{Execution: "e", ExecutionSeq: 1, Sequence: seq, At: t0.Add(time.Duration(i) * time.Second)}
			d, err := Decide(ModeDelta, s, ev, &Config{MaxParked: n})
			if err != nil {
				t.Fatalf("deliver %d: %v", seq, err)
			}
			if err := d.Next.Validate(); err != nil {
				t.Fatalf("deliver %d: %v", seq, err)
			}
			if d.Next.Applied < s.Applied {
				t.Fatalf("went backwards: %d -> %d", s.Applied, d.Next.Applied)
			}
			applied = append(applied, d.Applied()...)
			for j, a := range applied {
				if a != int64(j+1) {
					t.Fatalf("applied %v is not 1..k in order", applied)
				}
			}
			if got := int64(len(applied)); got != d.Next.Applied {
				t.Fatalf("applied %d sequences, stream says %d", got, d.Next.Applied)
			}
			s = d.Next
		}
		if s.Applied != int64(n) || len(s.Parked) != 0 || len(s.Gaps) != 0 {
			t.Fatalf("end state %+v, want all %d applied", s, n)
		}
	})
}

func TestSnapshotPermutationNeverGoesBackwards(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 60).Draw(t, "n")
		var s Stream
		last := int64(0)
		for _, seq := range deliveries(t, n) {
			d, err := Decide(ModeSnapshot, s, Incoming{Execution: "e", ExecutionSeq: 1, Sequence: seq, At: t0}, nil)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case seq > s.Applied:
				if d.Action != ActionApply || seq <= last {
					t.Fatalf("seq %d after %d: %s", seq, last, d.Action)
				}
				last = seq
				if (d.Gap != nil) != (seq > s.Applied+1) {
					t.Fatalf("seq %d after %d: gap %v", seq, s.Applied, d.Gap)
				}
			case seq == s.Applied:
				if d.Action != ActionDuplicate {
					t.Fatalf("seq %d again: %s", seq, d.Action)
				}
			default:
				if d.Action != ActionStale {
					t.Fatalf("seq %d after %d: %s", seq, s.Applied, d.Action)
				}
			}
			if d.Next.Applied != last || len(d.Next.Parked) != 0 || len(d.Next.Gaps) != 0 {
				t.Fatalf("next %+v, last applied %d", d.Next, last)
			}
			s = d.Next
		}
		if s.Applied != int64(n) {
			t.Fatalf("final applied %d, want %d", s.Applied, n)
		}
	})
}

// model is the reference: what a stream must look like after any history.
type model struct {
	rank     int64          // execution the stream follows, 0 = none
	received map[int64]bool // sequences of that execution received or compensated
	applied  int64
}

func (m *model) parked() []int64 {
	var p []int64
	for seq := range m.received {
		if seq > m.applied {
			p = append(p, seq)
		}
	}
	slices.Sort(p)
	return p
}

// TestStateMachine delivers, redelivers and reorders events of several
// executions, starts reruns, and compensates overdue gaps, checking every
// decision against the model.
func TestStateMachine(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		mode := rapid.SampledFrom([]Mode{ModeSnapshot, ModeDelta}).Draw(t, "mode")
		n := rapid.Int64Range(1, 30).Draw(t, "n")
		limit := rapid.IntRange(1, 10).Draw(t, "maxParked")
		cfg := &Config{MaxParked: limit}
		var s Stream
		m := &model{received: map[int64]bool{}}
		execs := int64(1)
		now := t0

		t.Repeat(map[string]func(*rapid.T){
			"rerun": func(t *rapid.T) { execs++ },
			"deliver": func(t *rapid.T) {
				rank := rapid.Int64Range(max(1, execs-1), execs).Draw(t, "rank")
				if rapid.IntRange(0, 9).Draw(t, "old") == 0 {
					rank = rapid.Int64Range(1, execs).Draw(t, "anyRank")
				}
				seq := rapid.Int64Range(1, n).Draw(t, "seq")
				now = now.Add(time.Second)
				ev := Incoming{Execution: fmt.Sprintf("exec-%d", rank), ExecutionSeq: rank, Sequence: seq, At: now}
				d, err := Decide(mode, s, ev, cfg)

				if rank < m.rank {
					if err != nil || d.Action != ActionSuperseded || !equal(d.Next, s) {
						t.Fatalf("older execution %d over %d: %v %+v", rank, m.rank, err, d)
					}
					return
				}
				if rank > m.rank {
					wasParked := m.parked()
					if err == nil && (d.Reset != (m.rank != 0) || !slices.Equal(d.Discarded, wasParked)) {
						t.Fatalf("new execution %d: reset %v discarded %v, want %v", rank, d.Reset, d.Discarded, wasParked)
					}
				}
				// Decide on a copy of the model; commit it only on success.
				next := &model{rank: rank, received: m.received, applied: m.applied}
				if rank > m.rank {
					next.received, next.applied = map[int64]bool{}, 0
				} else {
					next.received = maps(m.received)
				}
				prevApplied := next.applied
				switch mode {
				case ModeSnapshot:
					want := ActionStale
					if seq == next.applied {
						want = ActionDuplicate
					} else if seq > next.applied {
						want, next.applied = ActionApply, seq
					}
					if err != nil || d.Action != want {
						t.Fatalf("snapshot seq %d at %d: %v %s, want %s", seq, prevApplied, err, d.Action, want)
					}
				case ModeDelta:
					dup := seq <= next.applied || next.received[seq]
					if !dup && seq > next.applied+1 && len(next.parked()) >= limit {
						if !errors.Is(err, ErrParkedLimit) {
							t.Fatalf("parking %d with %d parked: %v", seq, limit, err)
						}
						return
					}
					next.received[seq] = true
					for next.received[next.applied+1] {
						next.applied++
					}
					want := ActionPark
					switch {
					case dup:
						want = ActionDuplicate
					case seq == prevApplied+1:
						want = ActionApply
					}
					if err != nil || d.Action != want {
						t.Fatalf("delta seq %d at %d: %v %s, want %s", seq, prevApplied, err, d.Action, want)
					}
					if got := d.Applied(); want == ActionApply && !slices.Equal(got, span(prevApplied+1, next.applied)) {
						t.Fatalf("applied %v, want %d..%d", got, prevApplied+1, next.applied)
					}
				}
				*m = *next
				check(t, d.Next, m)
				s = d.Next
			},
			"compensate": func(t *rapid.T) {
				over := Overdue(s, now.Add(time.Minute), time.Minute)
				if mode == ModeSnapshot || len(over) == 0 {
					if len(over) != 0 {
						t.Fatalf("snapshot stream has gaps %v", over)
					}
					return
				}
				g := over[0]
				g.To = rapid.Int64Range(g.From, g.To).Draw(t, "to")
				d, err := Compensated(s, g)
				if err != nil {
					t.Fatal(err)
				}
				prev := m.applied
				for seq := g.From; seq <= g.To; seq++ {
					m.received[seq] = true
				}
				for m.received[m.applied+1] {
					m.applied++
				}
				if !slices.Equal(d.Released, span(g.To+1, m.applied)) || prev != g.From-1 {
					t.Fatalf("compensated %d..%d: released %v, model applied %d", g.From, g.To, d.Released, m.applied)
				}
				check(t, d.Next, m)
				s = d.Next
			},
			"": func(t *rapid.T) {
				if err := s.Validate(); err != nil {
					t.Fatal(err)
				}
				for _, g := range s.Gaps {
					if now.Before(g.FirstSeen) {
						t.Fatalf("gap %v seen in the future", g)
					}
				}
			},
		})
	})
}

func check(t *rapid.T, s Stream, m *model) {
	t.Helper()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.ExecutionSeq != m.rank || s.Applied != m.applied || !slices.Equal(s.Parked, m.parked()) {
		t.Fatalf("stream %+v, model rank %d applied %d parked %v", s, m.rank, m.applied, m.parked())
	}
}

func equal(a, b Stream) bool {
	return a.Execution == b.Execution && a.ExecutionSeq == b.ExecutionSeq && a.Applied == b.Applied &&
		slices.Equal(a.Parked, b.Parked) && slices.Equal(a.Gaps, b.Gaps)
}

func maps(m map[int64]bool) map[int64]bool {
	c := make(map[int64]bool, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func span(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
