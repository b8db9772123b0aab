package order

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

func at(seq int64) Incoming {
	return Incoming{Execution: "e1", ExecutionSeq: 1, Sequence: seq, At: t0}
}

func TestDecideEdgeCases(t *testing.T) {
	t.Parallel()
	base := Stream{Execution: "e1", ExecutionSeq: 1, Applied: 3}
	parked := Stream{Execution: "e1", ExecutionSeq: 1, Applied: 3, Parked: []int64{5, 9},
		Gaps: []Gap{{From: 4, To: 4, FirstSeen: t0}, {From: 6, To: 8, FirstSeen: t0.Add(time.Second)}}}
	tests := []struct {
		name     string
		mode     Mode
		s        Stream
		ev       Incoming
		cfg      *Config
		err      error
		action   Action
		applied  []int64
		gap      *Gap
		nextPark []int64
	}{
		{name: "SequenceZero", mode: ModeDelta, s: base, ev: at(0), err: ErrBadSequence},
		{name: "SequenceNegative", mode: ModeSnapshot, s: base, ev: at(-1), err: ErrBadSequence},
		{name: "SequenceMinInt64", mode: ModeDelta, s: base, ev: at(math.MinInt64), err: ErrBadSequence},
		{name: "NoExecution", mode: ModeDelta, s: base, ev: Incoming{ExecutionSeq: 1, Sequence: 1}, err: ErrBadExecution},
		{name: "ExecutionSeqZero", mode: ModeDelta, s: base, ev: Incoming{Execution: "e1", Sequence: 1}, err: ErrBadExecution},
		{name: "SameRankOtherExecution", mode: ModeDelta, s: base, ev: Incoming{Execution: "e2", ExecutionSeq: 1, Sequence: 4}, err: ErrExecutionConflict},
		{name: "BadMode", mode: 0, s: base, ev: at(4), err: ErrBadMode},
		{name: "BadConfig", mode: ModeDelta, s: base, ev: at(4), cfg: &Config{MaxParked: -1}, err: ErrBadConfig},
		{name: "BadStream", mode: ModeDelta, s: Stream{Execution: "e1", ExecutionSeq: 1, Applied: 3, Parked: []int64{4}}, ev: at(5), err: ErrBadStream},
		{name: "ParkedInSnapshotStream", mode: ModeSnapshot, s: parked, ev: at(10), err: ErrBadStream},
		{name: "SnapshotMaxInt64", mode: ModeSnapshot, s: base, ev: at(math.MaxInt64), action: ActionApply,
			applied: []int64{math.MaxInt64}, gap: &Gap{From: 4, To: math.MaxInt64 - 1, FirstSeen: t0}},
		{name: "SnapshotAtMaxInt64Duplicate", mode: ModeSnapshot, s: Stream{Execution: "e1", ExecutionSeq: 1, Applied: math.MaxInt64}, ev: at(math.MaxInt64), action: ActionDuplicate},
		{name: "DeltaMaxInt64Parks", mode: ModeDelta, s: base, ev: at(math.MaxInt64), action: ActionPark,
			gap: &Gap{From: 4, To: math.MaxInt64 - 1, FirstSeen: t0}, nextPark: []int64{math.MaxInt64}},
		{name: "DeltaAtMaxInt64Duplicate", mode: ModeDelta, s: Stream{Execution: "e1", ExecutionSeq: 1, Applied: math.MaxInt64}, ev: at(math.MaxInt64), action: ActionDuplicate},
		{name: "DeltaNext", mode: ModeDelta, s: base, ev: at(4), action: ActionApply, applied: []int64{4}},
		{name: "DeltaAlreadyApplied", mode: ModeDelta, s: base, ev: at(3), action: ActionDuplicate},
		{name: "DeltaDuplicateParked", mode: ModeDelta, s: parked, ev: at(9), action: ActionDuplicate, nextPark: []int64{5, 9}},
		{name: "DeltaFillReleases", mode: ModeDelta, s: parked, ev: at(4), action: ActionApply, applied: []int64{4, 5}, nextPark: []int64{9}},
		{name: "DeltaSplitGapKeepsFirstSeen", mode: ModeDelta, s: parked, ev: Incoming{Execution: "e1", ExecutionSeq: 1, Sequence: 7, At: t0.Add(time.Hour)},
			action: ActionPark, gap: &Gap{From: 6, To: 6, FirstSeen: t0.Add(time.Second)}, nextPark: []int64{5, 7, 9}},
		{name: "DeltaLimitExceeded", mode: ModeDelta, s: parked, ev: at(12), cfg: &Config{MaxParked: 2}, err: ErrParkedLimit},
		{name: "DeltaLimitNotHitByApply", mode: ModeDelta, s: parked, ev: at(4), cfg: &Config{MaxParked: 2}, action: ActionApply, applied: []int64{4, 5}, nextPark: []int64{9}},
		{name: "DeltaLimitNotHitByDuplicate", mode: ModeDelta, s: parked, ev: at(5), cfg: &Config{MaxParked: 2}, action: ActionDuplicate, nextPark: []int64{5, 9}},
		{name: "OlderExecution", mode: ModeDelta, s: Stream{Execution: "e2", ExecutionSeq: 2, Applied: 1}, ev: at(2), action: ActionSuperseded},
		{name: "SnapshotStale", mode: ModeSnapshot, s: base, ev: at(2), action: ActionStale},
		{name: "SnapshotDuplicate", mode: ModeSnapshot, s: base, ev: at(3), action: ActionDuplicate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.s.clone()
			d, err := Decide(tt.mode, tt.s, tt.ev, tt.cfg)
			if !equal(before, tt.s) {
				t.Fatalf("Decide modified its input: %+v", tt.s)
			}
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Action != tt.action || !slices.Equal(d.Applied(), tt.applied) || !slices.Equal(d.Next.Parked, tt.nextPark) {
				t.Fatalf("got %s applied %v parked %v, want %s %v %v", d.Action, d.Applied(), d.Next.Parked, tt.action, tt.applied, tt.nextPark)
			}
			if (d.Gap == nil) != (tt.gap == nil) || (d.Gap != nil && *d.Gap != *tt.gap) {
				t.Fatalf("gap %v, want %v", d.Gap, tt.gap)
			}
			if err := d.Next.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestNewExecutionResets(t *testing.T) {
	t.Parallel()
	old := Stream{Execution: "e1", ExecutionSeq: 1, Applied: 3, Parked: []int64{5}, Gaps: []Gap{{From: 4, To: 4, FirstSeen: t0}}}
	d, err := Decide(ModeDelta, old, Incoming{Execution: "e2", ExecutionSeq: 2, Sequence: 1, At: t0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Reset || !slices.Equal(d.Discarded, []int64{5}) || d.Action != ActionApply ||
		!equal(d.Next, Stream{Execution: "e2", ExecutionSeq: 2, Applied: 1}) {
		t.Fatalf("got %+v", d)
	}
	// A late event of the first run never applies after the rerun.
	late, err := Decide(ModeDelta, d.Next, Incoming{Execution: "e1", ExecutionSeq: 1, Sequence: 4, At: t0}, nil)
	if err != nil || late.Action != ActionSuperseded || !equal(late.Next, d.Next) {
		t.Fatalf("late old event: %v %+v", err, late)
	}
}

func TestCompensated(t *testing.T) {
	t.Parallel()
	s := Stream{Execution: "e1", ExecutionSeq: 1, Applied: 3, Parked: []int64{6, 9},
		Gaps: []Gap{{From: 4, To: 5, FirstSeen: t0}, {From: 7, To: 8, FirstSeen: t0.Add(time.Minute)}}}
	if got := Overdue(s, t0.Add(30*time.Second), time.Minute); len(got) != 0 {
		t.Fatalf("overdue too early: %v", got)
	}
	if got := Overdue(s, t0.Add(time.Minute), time.Minute); len(got) != 1 || got[0].From != 4 {
		t.Fatalf("overdue at deadline: %v", got)
	}
	for _, g := range []Gap{{From: 7, To: 8}, {From: 4, To: 6}, {From: 5, To: 5}, {From: 4, To: 3}} {
		if _, err := Compensated(s, g); !errors.Is(err, ErrUnknownGap) {
			t.Fatalf("Compensated(%v) err = %v, want ErrUnknownGap", g, err)
		}
	}
	d, err := Compensated(s, Gap{From: 4, To: 4})
	if err != nil || len(d.Released) != 0 || d.Next.Applied != 4 || d.Next.Gaps[0] != (Gap{From: 5, To: 5, FirstSeen: t0}) {
		t.Fatalf("partial: %v %+v", err, d)
	}
	d, err = Compensated(d.Next, d.Next.Gaps[0])
	if err != nil || !slices.Equal(d.Applied(), []int64{6}) || d.Next.Applied != 6 || len(d.Next.Gaps) != 1 {
		t.Fatalf("rest: %v %+v", err, d)
	}
	if _, err := Compensated(Stream{}, Gap{From: 1, To: 1}); !errors.Is(err, ErrUnknownGap) {
		t.Fatalf("no gaps: %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]Stream{
		"FreshWithState":      {Applied: 1},
		"NegativeRank":        {Execution: "e", ExecutionSeq: -1},
		"NoExecutionName":     {ExecutionSeq: 1},
		"NegativeApplied":     {Execution: "e", ExecutionSeq: 1, Applied: -1},
		"ParkedNext":          {Execution: "e", ExecutionSeq: 1, Applied: 1, Parked: []int64{2}},
		"ParkedUnsorted":      {Execution: "e", ExecutionSeq: 1, Parked: []int64{5, 3}},
		"GapMissing":          {Execution: "e", ExecutionSeq: 1, Parked: []int64{3}},
		"GapWrong":            {Execution: "e", ExecutionSeq: 1, Parked: []int64{3}, Gaps: []Gap{{From: 1, To: 1}}},
		"ParkedAfterMaxInt64": {Execution: "e", ExecutionSeq: 1, Applied: math.MaxInt64, Parked: []int64{math.MinInt64}},
		"GapsOutOfTimeOrder": {Execution: "e", ExecutionSeq: 1, Parked: []int64{2, 4},
			Gaps: []Gap{{From: 1, To: 1, FirstSeen: t0.Add(time.Second)}, {From: 3, To: 3, FirstSeen: t0}}},
	} {
		if err := s.Validate(); !errors.Is(err, ErrBadStream) {
			t.Errorf("%s: Validate() = %v, want ErrBadStream", name, err)
		}
	}
}

func TestHalted(t *testing.T) {

	s := Stream{Execution: "x", ExecutionSeq: 1, Applied: 6}
	// 8, 9 and 11 parked behind 7; then 7 arrives and releases 8 and 9.
	for _, seq := range []int64{8, 9, 11} {
		d, err := Decide(ModeDelta, s, Incoming{Execution: "x", ExecutionSeq: 1, Sequence: seq, At: t0}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s = d.Next
	}
	d, err := Decide(ModeDelta, s, Incoming{Execution: "x", ExecutionSeq: 1, Sequence: 7, At: t0.Add(time.Minute)}, nil)
	if err != nil || !slices.Equal(d.Applied(), []int64{7, 8, 9}) {
		t.Fatalf("Decide(7) = %v, %v", d.Applied(), err)
	}
	at := t0.Add(time.Hour)

	// 8 failed: 7 stays applied, 9 and 11 are parked, 8 and 10 are gaps.
	got, err := d.Halted(8, at)
	if err != nil {
		t.Fatal(err)
	}
	want := Stream{Execution: "x", ExecutionSeq: 1, Applied: 7, Parked: []int64{9, 11},
		Gaps: []Gap{{From: 8, To: 8, FirstSeen: t0}, {From: 10, To: 10, FirstSeen: t0}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Halted(8) = %+v\nwant %+v", got, want)
	}
	// The event itself failed: nothing of the decision counts.
	got, err = d.Halted(7, at)
	if err != nil || got.Applied != 6 || !slices.Equal(got.Parked, []int64{8, 9, 11}) || got.Gaps[0] != (Gap{From: 7, To: 7, FirstSeen: t0}) {
		t.Fatalf("Halted(7) = %+v, %v", got, err)
	}
	// The last applied failed with nothing behind: no gap to hold.
	d2, _ := Decide(ModeDelta, Stream{Execution: "x", ExecutionSeq: 1, Applied: 2}, Incoming{Execution: "x", ExecutionSeq: 1, Sequence: 3, At: t0}, nil)
	got, err = d2.Halted(3, at)
	if err != nil || got.Applied != 2 || got.Parked != nil || got.Gaps != nil {
		t.Fatalf("Halted(3) = %+v, %v", got, err)
	}
	if _, err := d.Halted(11, at); !errors.Is(err, ErrUnknownGap) {
		t.Fatalf("Halted(not applied) = %v", err)
	}
	// Filling the halted gap releases the rest, in order.
	got, _ = d.Halted(8, at)
	d3, err := Decide(ModeDelta, got, Incoming{Execution: "x", ExecutionSeq: 1, Sequence: 8, At: at}, nil)
	if err != nil || !slices.Equal(d3.Applied(), []int64{8, 9}) || d3.Next.Applied != 9 {
		t.Fatalf("refill: %v %+v %v", d3.Applied(), d3.Next, err)
	}
}
