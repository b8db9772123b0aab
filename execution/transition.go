package execution

import (
	"errors"
	"fmt"
)

// ErrIllegalTransition is wrapped by Next and NextStep when an action does
// not apply to the state (complete a CANCELED step, cancel a SUCCEEDED
// execution). Nothing may change then.
var ErrIllegalTransition = errors.New("execution: illegal transition")

// Action is something that happens to an execution.
type Action uint8

// The execution actions.
const (
	// ActionQueue: the execution is ready for its first step.
	ActionQueue Action = iota + 1
	// ActionStart: a worker claimed one of its steps.
	ActionStart
	// ActionRequeue: its running step went back to wait for a worker
	// (failed with retries left, or its lease ended on a repeatable type).
	ActionRequeue
	// ActionSucceed: its last step completed.
	ActionSucceed
	// ActionFail: a step failed for good (or, while canceling, the worker
	// gave up as asked).
	ActionFail
	// ActionCancel: an operator or the application asked to cancel.
	ActionCancel
	// ActionTimeout: its deadline passed.
	ActionTimeout
	// ActionResume: an operator retries a FAILED execution: its failed
	// step runs again (with the same downstream key).
	ActionResume
)

var actionNames = [...]string{"", "queue", "start", "requeue", "succeed", "fail", "cancel", "timeout", "resume"}

func (a Action) String() string {
	if a != 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Next returns the status an execution in s moves to on a. changed is
// false when a is a repeat that changes nothing (cancel while CANCELING or
// CANCELED): answer it as done, and write no event. A terminal status
// refuses every action but that repeat, and an operator's resume of a
// FAILED one.
//
//	CREATED ──queue──► QUEUED ──start──► RUNNING ──succeed──► SUCCEEDED
//	   │                 ▲ │               │ │ └───fail──────► FAILED
//	   │                 │ │               │ └─requeue─► QUEUED
//	   └──cancel──► CANCELED ◄──cancel─────┘ cancel (a worker holds a step)
//	                     ▲                 ▼
//	                     └──fail/requeue── CANCELING ──succeed──► SUCCEEDED
//	any live status ──timeout──► TIMED_OUT
//	FAILED ──resume──► QUEUED (an operator's retry)
//
// A step that completes while its execution is CANCELING finished before
// the cancel reached its worker: the execution SUCCEEDED, as it did.
func Next(s Status, a Action) (next Status, changed bool, err error) {
	if s == 0 || int(s) >= len(statusNames) {
		return s, false, fmt.Errorf("%w: %v", ErrUnknownStatus, s)
	}
	if a == ActionCancel && (s == StatusCanceling || s == StatusCanceled) {
		return s, false, nil
	}
	if !s.Terminal() && a == ActionTimeout {
		return StatusTimedOut, true, nil
	}
	switch {
	case s == StatusCreated && a == ActionQueue:
		return StatusQueued, true, nil
	case (s == StatusCreated || s == StatusQueued) && a == ActionCancel:
		return StatusCanceled, true, nil
	case s == StatusQueued && a == ActionStart:
		return StatusRunning, true, nil
	case s == StatusRunning && a == ActionRequeue:
		return StatusQueued, true, nil
	case s == StatusRunning && a == ActionCancel:
		return StatusCanceling, true, nil
	case (s == StatusRunning || s == StatusCanceling) && a == ActionSucceed:
		return StatusSucceeded, true, nil
	case s == StatusRunning && a == ActionFail:
		return StatusFailed, true, nil
	case s == StatusCanceling && (a == ActionFail || a == ActionRequeue):
		return StatusCanceled, true, nil
	case s == StatusFailed && a == ActionResume:
		return StatusQueued, true, nil
	}
	return s, false, fmt.Errorf("%w: %v on a %v execution", ErrIllegalTransition, a, s)
}

// StepAction is something that happens to a step.
type StepAction uint8

// The step actions.
const (
	// StepActionDispatch: the step's turn came; workers may claim it.
	StepActionDispatch StepAction = iota + 1
	// StepActionClaim: a worker claimed it (epoch+1, attempts+1, a lease).
	StepActionClaim
	// StepActionComplete: its worker completed it, with its epoch.
	StepActionComplete
	// StepActionRetry: its worker failed it retryably with budget left;
	// it is dispatched again after a backoff.
	StepActionRetry
	// StepActionFail: its worker failed it for good, or the budget is
	// spent, or its execution ended (canceled, timed out).
	StepActionFail
	// StepActionLeaseLost: its lease ended without a result.
	StepActionLeaseLost
	// StepActionResolveRetry: an operator resolved an OUTCOME_UNKNOWN step
	// by running it again (with the same downstream key).
	StepActionResolveRetry
	// StepActionResolveDone: an operator resolved an OUTCOME_UNKNOWN step as
	// done, with an output.
	StepActionResolveDone
)

var stepActionNames = [...]string{"", "dispatch", "claim", "complete", "retry", "fail", "lease lost", "resolve retry", "resolve done"}

func (a StepAction) String() string {
	if a != 0 && int(a) < len(stepActionNames) {
		return stepActionNames[a]
	}
	return fmt.Sprintf("StepAction(%d)", uint8(a))
}

// NextStep returns the status a step in s moves to on a. once says the
// step's task type is once-only: a lost lease then leaves it
// OUTCOME_UNKNOWN (it may have had effects) instead of dispatching it
// again with a new epoch. COMPLETED and FAILED refuse every action.
//
//	PENDING ──dispatch──► DISPATCHED ──claim──► EXECUTING ──complete──► COMPLETED
//	                        ▲   ▲                │  │  └──fail─────────► FAILED
//	                        │   └─retry / lease lost (repeatable)
//	                        │                    └──lease lost (once-only)──► OUTCOME_UNKNOWN
//	                        └──────────────resolve retry──────────────────────────┘ │
//	                                           COMPLETED ◄──resolve done────────────┘
//
// Any live step fails when its execution ends (StepActionFail).
func NextStep(s StepStatus, a StepAction, once bool) (StepStatus, error) {
	if s == 0 || int(s) >= len(stepNames) {
		return s, fmt.Errorf("%w: %v", ErrUnknownStatus, s)
	}
	if !s.Terminal() && a == StepActionFail {
		return StepFailed, nil
	}
	switch {
	case s == StepPending && a == StepActionDispatch:
		return StepDispatched, nil
	case s == StepDispatched && a == StepActionClaim:
		return StepExecuting, nil
	case s == StepExecuting && a == StepActionComplete:
		return StepCompleted, nil
	case s == StepExecuting && a == StepActionRetry:
		return StepDispatched, nil
	case s == StepExecuting && a == StepActionLeaseLost && once:
		return StepOutcomeUnknown, nil
	case s == StepExecuting && a == StepActionLeaseLost:
		return StepDispatched, nil
	case s == StepOutcomeUnknown && a == StepActionResolveRetry:
		return StepDispatched, nil
	case s == StepOutcomeUnknown && a == StepActionResolveDone:
		return StepCompleted, nil
	}
	return s, fmt.Errorf("%w: %v on a %v step", ErrIllegalTransition, a, s)
}
