package order

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// FuzzDecide replays an arbitrary history (8 bytes a step: execution rank,
// sequence) through Decide and checks that every accepted decision keeps the
// stream valid, never moves Applied backwards within an execution, never
// applies a superseded execution, and applies deltas contiguously.
// Committed seeds live in testdata/fuzz/FuzzDecide.
func FuzzDecide(f *testing.F) {
	step := func(rank uint8, seq int64) []byte {
		b := make([]byte, 9)
		b[0] = rank
		binary.BigEndian.PutUint64(b[1:], uint64(seq))
		return b
	}
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	f.Add(true, uint8(4), cat(step(1, 8), step(1, 7), step(1, 6), step(1, 5), step(1, 4), step(1, 3), step(1, 2), step(1, 1)))
	f.Add(false, uint8(4), cat(step(1, 6), step(1, 8), step(1, 7)))
	f.Add(true, uint8(1), cat(step(1, 0), step(1, -1), step(1, 1<<62), step(1, 1<<63-1)))
	f.Add(true, uint8(2), cat(step(1, 3), step(2, 2), step(1, 1), step(2, 1), step(3, 5)))
	f.Fuzz(func(t *testing.T, delta bool, maxParked uint8, history []byte) {
		mode := ModeSnapshot
		if delta {
			mode = ModeDelta
		}
		cfg := &Config{MaxParked: int(maxParked)}
		var s Stream
		for i := 0; i+9 <= len(history); i += 9 {
			rank := int64(history[i]%4) + 1
			seq := int64(binary.BigEndian.Uint64(history[i+1:]))
			ev := Incoming{Execution: string(rune('a' + rank)), ExecutionSeq: rank, Sequence: seq, At: time.Unix(int64(i), 0)}
			d, err := Decide(mode, s, ev, cfg)
			if err != nil {
				switch {
				case errors.Is(err, ErrBadSequence) && seq < 1:
				case errors.Is(err, ErrParkedLimit) && delta:
				default:
					t.Fatalf("step %d %+v: unexpected %v", i/9, ev, err)
				}
				continue
			}
			if err := d.Next.Validate(); err != nil {
				t.Fatalf("step %d: %v", i/9, err)
			}
			switch {
			case rank < s.ExecutionSeq:
				if d.Action != ActionSuperseded || !equal(d.Next, s) {
					t.Fatalf("older execution applied: %+v", d)
				}
			case rank == s.ExecutionSeq && d.Next.Applied < s.Applied:
				t.Fatalf("went backwards %d -> %d", s.Applied, d.Next.Applied)
			}
			if delta && d.Action == ActionApply {
				prev := s.Applied
				if d.Reset {
					prev = 0
				}
				for _, a := range d.Applied() {
					if a != prev+1 {
						t.Fatalf("applied %v after %d", d.Applied(), s.Applied)
					}
					prev = a
				}
			}
			s = d.Next
		}
	})
}
