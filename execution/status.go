package execution

import (
	"errors"
	"fmt"

	"github.com/idemhq/idem/store"
)

// Status is an execution's state.
type Status uint8

// The execution states. An execution is created, queued for its first
// step, runs while a worker holds a step, and ends in one of the four
// terminal states, which are final. Their values are the store's
// (store.ExecutionStatus(s) converts).
const (
	// StatusCreated: written with its task, not yet queued.
	StatusCreated = Status(store.ExecutionCreated)
	// StatusQueued: its next step waits for a worker.
	StatusQueued = Status(store.ExecutionQueued)
	// StatusRunning: a worker has claimed one of its steps.
	StatusRunning = Status(store.ExecutionRunning)
	// StatusSucceeded: every step completed (terminal).
	StatusSucceeded = Status(store.ExecutionSucceeded)
	// StatusFailed: a step failed for good (terminal).
	StatusFailed = Status(store.ExecutionFailed)
	// StatusTimedOut: its deadline passed while it was live (terminal).
	StatusTimedOut = Status(store.ExecutionTimedOut)
	// StatusCanceling: cancel was asked while a worker held a step; the
	// worker is told on its next heartbeat.
	StatusCanceling = Status(store.ExecutionCanceling)
	// StatusCanceled: canceled (terminal).
	StatusCanceled = Status(store.ExecutionCanceled)
)

var statusNames = [...]string{"", "CREATED", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELING", "CANCELED"}

// String returns the status as the wire spells it ("TIMED_OUT").
func (s Status) String() string {
	if s != 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Terminal reports whether s is final: SUCCEEDED, FAILED, TIMED_OUT or
// CANCELED.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusTimedOut || s == StatusCanceled
}

// ErrUnknownStatus is wrapped by ParseStatus and ParseStepStatus for a
// name that is no status.
var ErrUnknownStatus = errors.New("execution: unknown status")

// ParseStatus reads a status as the wire spells it.
func ParseStatus(name string) (Status, error) {
	for i, n := range statusNames {
		if i > 0 && n == name {
			return Status(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownStatus, name)
}

// StepStatus is a step's state.
type StepStatus uint8

// The step states.
const (
	// StepPending: waiting for its turn (an earlier step runs).
	StepPending StepStatus = iota + 1
	// StepDispatched: ready for a worker to claim.
	StepDispatched
	// StepExecuting: claimed by a worker, under a lease and an epoch.
	StepExecuting
	// StepCompleted: done; its output is recorded and it never runs again
	// (terminal).
	StepCompleted
	// StepFailed: failed for good (terminal).
	StepFailed
	// StepOutcomeUnknown: a once-only step whose worker lost its lease: it
	// may have had effects, so it is not run again until an operator
	// resolves it.
	StepOutcomeUnknown
)

var stepNames = [...]string{"", "PENDING", "DISPATCHED", "EXECUTING", "COMPLETED", "FAILED", "OUTCOME_UNKNOWN"}

// String returns the status as the wire spells it ("OUTCOME_UNKNOWN").
func (s StepStatus) String() string {
	if s != 0 && int(s) < len(stepNames) {
		return stepNames[s]
	}
	return fmt.Sprintf("StepStatus(%d)", uint8(s))
}

// Terminal reports whether s is final: COMPLETED or FAILED.
func (s StepStatus) Terminal() bool { return s == StepCompleted || s == StepFailed }

// ParseStepStatus reads a step status as the wire spells it.
func ParseStepStatus(name string) (StepStatus, error) {
	for i, n := range stepNames {
		if i > 0 && n == name {
			return StepStatus(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownStatus, name)
}
