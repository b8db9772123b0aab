package execution

import (
	"errors"
	"testing"
)

// TestNext checks every (status, action) pair against the table written
// out here, independently of Next's switch: what is listed moves, what is
// not is refused, and the terminal statuses move on nothing.
func TestNext(t *testing.T) {
	type edge struct {
		from Status
		a    Action
	}
	allowed := map[edge]Status{
		{StatusCreated, ActionQueue}:     StatusQueued,
		{StatusCreated, ActionCancel}:    StatusCanceled,
		{StatusCreated, ActionTimeout}:   StatusTimedOut,
		{StatusQueued, ActionStart}:      StatusRunning,
		{StatusQueued, ActionCancel}:     StatusCanceled,
		{StatusQueued, ActionTimeout}:    StatusTimedOut,
		{StatusRunning, ActionRequeue}:   StatusQueued,
		{StatusRunning, ActionSucceed}:   StatusSucceeded,
		{StatusRunning, ActionFail}:      StatusFailed,
		{StatusRunning, ActionCancel}:    StatusCanceling,
		{StatusRunning, ActionTimeout}:   StatusTimedOut,
		{StatusCanceling, ActionSucceed}: StatusSucceeded,
		{StatusCanceling, ActionFail}:    StatusCanceled,
		{StatusCanceling, ActionRequeue}: StatusCanceled,
		{StatusCanceling, ActionTimeout}: StatusTimedOut,
		{StatusFailed, ActionResume}:     StatusQueued,
	}
	repeats := map[edge]bool{{StatusCanceling, ActionCancel}: true, {StatusCanceled, ActionCancel}: true}
	for s := StatusCreated; s <= StatusCanceled; s++ {
		for a := ActionQueue; a <= ActionResume; a++ {
			next, changed, err := Next(s, a)
			want, ok := allowed[edge{s, a}]
			switch {
			case repeats[edge{s, a}]:
				if next != s || changed || err != nil {
					t.Errorf("%v on %v = %v %v %v, want an unchanged repeat", a, s, next, changed, err)
				}
			case ok:
				if next != want || !changed || err != nil {
					t.Errorf("%v on %v = %v %v %v, want %v", a, s, next, changed, err, want)
				}
				if s.Terminal() && a != ActionResume {
					t.Errorf("terminal %v moved on %v (only an operator's resume moves one)", s, a)
				}
			default:
				if next != s || changed || !errors.Is(err, ErrIllegalTransition) {
					t.Errorf("%v on %v = %v %v %v, want ErrIllegalTransition and no change", a, s, next, changed, err)
				}
			}
		}
	}
	if _, _, err := Next(0, ActionQueue); !errors.Is(err, ErrUnknownStatus) {
		t.Errorf("zero status: %v", err)
	}
}

// TestNextStep does the same for steps, for repeatable and once-only
// types.
func TestNextStep(t *testing.T) {
	type edge struct {
		from StepStatus
		a    StepAction
		once bool
	}
	allowed := map[edge]StepStatus{}
	for _, once := range []bool{false, true} {
		for _, s := range []StepStatus{StepPending, StepDispatched, StepExecuting, StepOutcomeUnknown} {
			allowed[edge{s, StepActionFail, once}] = StepFailed
		}
		allowed[edge{StepPending, StepActionDispatch, once}] = StepDispatched
		allowed[edge{StepDispatched, StepActionClaim, once}] = StepExecuting
		allowed[edge{StepExecuting, StepActionComplete, once}] = StepCompleted
		allowed[edge{StepExecuting, StepActionRetry, once}] = StepDispatched
		allowed[edge{StepOutcomeUnknown, StepActionResolveRetry, once}] = StepDispatched
		allowed[edge{StepOutcomeUnknown, StepActionResolveDone, once}] = StepCompleted
	}
	allowed[edge{StepExecuting, StepActionLeaseLost, false}] = StepDispatched
	allowed[edge{StepExecuting, StepActionLeaseLost, true}] = StepOutcomeUnknown
	for _, once := range []bool{false, true} {
		for s := StepPending; s <= StepOutcomeUnknown; s++ {
			for a := StepActionDispatch; a <= StepActionResolveDone; a++ {
				next, err := NextStep(s, a, once)
				if want, ok := allowed[edge{s, a, once}]; ok {
					if next != want || err != nil {
						t.Errorf("%v on %v (once %v) = %v %v, want %v", a, s, once, next, err, want)
					}
					if s.Terminal() {
						t.Errorf("terminal %v moved on %v", s, a)
					}
				} else if next != s || !errors.Is(err, ErrIllegalTransition) {
					t.Errorf("%v on %v (once %v) = %v %v, want ErrIllegalTransition", a, s, once, next, err)
				}
			}
		}
	}
}

// TestStatusNames round-trips every status through its wire name.
func TestStatusNames(t *testing.T) {
	for s := StatusCreated; s <= StatusCanceled; s++ {
		if got, err := ParseStatus(s.String()); got != s || err != nil {
			t.Errorf("ParseStatus(%q) = %v %v", s, got, err)
		}
	}
	for s := StepPending; s <= StepOutcomeUnknown; s++ {
		if got, err := ParseStepStatus(s.String()); got != s || err != nil {
			t.Errorf("ParseStepStatus(%q) = %v %v", s, got, err)
		}
	}
	for _, bad := range []string{"", "running", "DONE", "Status(9)"} {
		if _, err := ParseStatus(bad); !errors.Is(err, ErrUnknownStatus) {
			t.Errorf("ParseStatus(%q) = %v", bad, err)
		}
		if _, err := ParseStepStatus(bad); !errors.Is(err, ErrUnknownStatus) {
			t.Errorf("ParseStepStatus(%q) = %v", bad, err)
		}
	}
}
