package store

import (
	"context"
	"fmt"
	"time"
)

// ExecutionStatus is an execution's state as the store keeps it. Package
// execution names the values and decides the transitions; the store only
// compares them (a transition is a conditional update from one value to
// another) and never moves a row on its own.
type ExecutionStatus uint8

// The values package execution gives ExecutionStatus. The store reads one
// of them itself: ListTasks filters on the current execution's status.
const (
	ExecutionCreated ExecutionStatus = iota + 1
	ExecutionQueued
	ExecutionRunning
	ExecutionSucceeded
	ExecutionFailed
	ExecutionTimedOut
	ExecutionCanceling
	ExecutionCanceled
)

// Task is an application's request to do work of a type.
type Task struct {
	// App owns the task: every read and write names it, and another
	// application's task is ErrNotFound.
	App string
	// ID is chosen by the caller (opaque, unique per App).
	ID   string
	Type string
	// Input is the task's JSON input, stored as given.
	Input       []byte
	ExternalRef string
	// Deadline, when not zero, ends a live execution as timed out.
	Deadline time.Time
	// CurrentExecution is the ID of the task's latest execution (a rerun
	// moves it); Status is that execution's status.
	CurrentExecution string
	Status           ExecutionStatus
	CreatedAt        time.Time
}

// Execution is one run of a task.
type Execution struct {
	App    string
	ID     string
	TaskID string
	// Number is 1 for the task's first execution, 2 for its first rerun…
	Number int
	Status ExecutionStatus
	// LastSequence is the sequence of its latest event (from 1, gap-free).
	LastSequence int64
	CreatedAt    time.Time
	// StartedAt is when it first ran, FinishedAt when it reached a terminal
	// status; zero until then. The caller sets them with the transition.
	StartedAt  time.Time
	FinishedAt time.Time
	// Output (JSON) and Error are set by the transition that ends it.
	Output   []byte
	Error    string
	Progress int
	// Workflow and Version name the workflow a workflow's execution runs
	// and the version it pinned when it started ("" and 0 for a task's).
	Workflow string
	Version  int
}

// Event is one entry of an execution's history: a transition or a
// progress report. Sequence numbers each execution's events 1, 2, 3…
// with no gap, assigned by the store in the transaction that writes the
// event with the change it reports.
type Event struct {
	ExecutionID string
	Sequence    int64
	// Type is the CloudEvents type ("idem.execution.running").
	Type string
	// Data is the event's JSON data, as the caller built it.
	Data []byte
	Time time.Time
}

// ExecutionRef names an application's execution.
type ExecutionRef struct{ App, ID string }

// NewTask is what CreateTaskTx writes: the task, its first execution and
// that execution's first event.
type NewTask struct {
	Task Task
	// ExecutionID is the first execution's ID, chosen by the caller.
	ExecutionID string
	// Status is the first execution's status.
	Status ExecutionStatus
	// Event is the first execution's first event (sequence 1).
	Event Event
	// More are the execution's next events (sequences 2, 3, …), written
	// with it: a task created and queued at once has its queued event
	// here, and Status is the status after them.
	More []Event
	// Step, when set, is the execution's first step, added with it as
	// AddStepTx adds one (an ID in use is ErrDuplicate).
	Step *Step
	// Workflow and Version are the first execution's (Execution).
	Workflow string
	Version  int
}

// Rerun is what RerunTx writes: a new execution of a task, with its first
// event.
type Rerun struct {
	App, TaskID string
	// ExecutionID is the new execution's ID, chosen by the caller.
	ExecutionID string
	Status      ExecutionStatus
	// Workflow and Version are the new execution's (Execution).
	Workflow string
	Version  int
	// Event is its first event (sequence 1); its Time is the execution's
	// creation time.
	Event Event
}

// Transition is a conditional change of an execution's status, with the
// event that reports it.
type Transition struct {
	App string
	ID  string
	// From is the status the change was decided on: the change applies
	// only if the execution is still in it.
	From, To ExecutionStatus
	// StartedAt, FinishedAt, Output, Error and Progress are written when
	// not zero (nil for Output).
	StartedAt  time.Time
	FinishedAt time.Time
	Output     []byte
	Error      string
	Progress   int
	// Reopen clears FinishedAt, Output and Error (an operator resumes a
	// finished execution); Error is then written when not empty.
	Reopen bool
	// Event is appended with the execution's next sequence.
	Event Event
}

// TaskQuery selects an application's tasks, newest first.
type TaskQuery struct {
	App string
	// Type and Status filter when set.
	Type   string
	Status ExecutionStatus
	// ExcludeType, when set, leaves out the tasks of this type (the
	// hidden tasks that hold workflows' executions).
	ExcludeType string
	// After continues a listing after the task with this creation time and
	// ID (the last one of the previous page); zero to start.
	AfterTime time.Time
	AfterID   string
	// Limit is the most tasks returned, at least 1.
	Limit int
}

// ExecutionStore is the storage of tasks, executions and their events.
// Every change that reports an event writes it in the same transaction,
// with the execution's next sequence, so the history has no gap and no
// change goes unreported. Experimental: the shape follows `idem serve`
// and may change with it; the conformance suite is its contract.
type ExecutionStore[TX any] interface {
	Transactor[TX]

	// CreateTaskTx writes t.Task, its first execution (Number 1, t.Status),
	// t.Event as that execution's sequence 1, t.More as the next ones and
	// t.Step, in tx. A task, execution or step ID already used by the
	// application is ErrDuplicate.
	CreateTaskTx(ctx context.Context, tx TX, t NewTask) error

	// RerunTx writes a new execution of r's task with the next Number, its
	// status and first event (sequence 1), and makes it the task's current
	// execution, in tx. ErrNotFound for an unknown task.
	RerunTx(ctx context.Context, tx TX, r Rerun) (Execution, error)

	// TransitionTx applies t in tx if the execution is in t.From, appends
	// t.Event with its next sequence, and returns the execution as it now
	// is with applied=true. An execution in another status is left
	// unchanged and returned with applied=false. ErrNotFound for an unknown
	// execution (or another application's).
	TransitionTx(ctx context.Context, tx TX, t Transition) (e Execution, applied bool, err error)
	// TransitionsTx applies each of ts as TransitionTx does, in order, in
	// one round trip where the store can (a worker settles many steps at
	// once), and returns each execution and whether its transition
	// applied.
	TransitionsTx(ctx context.Context, tx TX, ts []Transition) ([]Execution, []bool, error)

	// AppendEventTx appends ev to the execution's history with its next
	// sequence, in tx, without a change of status (a progress report);
	// progress, when not negative, is stored as the execution's Progress.
	AppendEventTx(ctx context.Context, tx TX, app, executionID string, ev Event, progress int) (seq int64, err error)

	// GetTask, GetExecution: ErrNotFound for an unknown ID or another
	// application's. The Tx forms read in tx, seeing its writes (they take
	// no lock: the changes decided on what they read are conditional).
	GetTask(ctx context.Context, app, id string) (Task, error)
	GetExecution(ctx context.Context, app, id string) (Execution, error)
	GetTaskTx(ctx context.Context, tx TX, app, id string) (Task, error)
	GetExecutionTx(ctx context.Context, tx TX, app, id string) (Execution, error)
	// GetExecutionsTx reads, in tx, each execution of refs and its task,
	// in refs' order, in a round trip or two where the store can (a
	// worker's claim of many steps needs them all). ErrNotFound when one
	// is missing.
	GetExecutionsTx(ctx context.Context, tx TX, refs []ExecutionRef) ([]Execution, []Task, error)

	// ListTasks returns q's page, newest first (creation time, then ID
	// descending).
	ListTasks(ctx context.Context, q TaskQuery) ([]Task, error)

	// OverdueExecutions returns up to limit live executions (CREATED,
	// QUEUED, RUNNING, CANCELING) that are their task's current one and
	// whose task's deadline is before now, earliest deadline first, for
	// the caller to time out (any application).
	OverdueExecutions(ctx context.Context, now time.Time, limit int) ([]Execution, error)

	// ListEvents returns the execution's events with a sequence above
	// after, in order, at most limit. ErrNotFound for an unknown execution
	// or another application's.
	ListEvents(ctx context.Context, app, executionID string, after int64, limit int) ([]Event, error)
}

// StepStatus is a step's state as the store keeps it; package execution
// names the values and decides the transitions. The store reads three of
// them itself: ClaimStepsTx claims DISPATCHED steps, and EXECUTING ones
// whose lease ended when their type is repeatable.
type StepStatus uint8

// The values package execution gives StepStatus.
const (
	StepPending StepStatus = iota + 1
	StepDispatched
	StepExecuting
	StepCompleted
	StepFailed
	StepOutcomeUnknown
)

// Step is the unit a worker runs: claimed atomically, under a lease and an
// epoch that every later write of the worker carries.
type Step struct {
	App         string
	ID          string
	ExecutionID string
	Name        string
	// Type is the task type workers claim by.
	Type string
	// Once marks a once-only type: a lost lease leaves the step to an
	// operator instead of letting the next claim run it again.
	Once   bool
	Status StepStatus
	// Epoch is +1 at every claim; Attempts counts the claims.
	Epoch    int64
	Attempts int
	// Owner is the claiming worker's token for this claim.
	Owner      string
	LeaseUntil time.Time
	// DueAt is when a DISPATCHED step may be claimed (a retry's backoff).
	DueAt time.Time
	// CancelRequested tells the worker, on its next heartbeat, to stop;
	// a step with it set is never claimed again.
	CancelRequested bool
	Output          []byte
	Error           string
	// IdempotencyKey is the downstream key every attempt sends.
	IdempotencyKey string
	CreatedAt      time.Time
}

// StepClaim are the arguments of ClaimStepsTx.
type StepClaim struct {
	// Types are the task types the worker runs (at least one).
	Types []string
	// Owner is the worker's token for this claim (a new one per claim:
	// with the epoch, it fences the claim's later writes).
	Owner string
	// Now is the caller's clock: due times and leases compare to it.
	Now   time.Time
	Lease time.Duration
	// Limit is how many steps the claim takes at most. Defaults to 1.
	Limit int
}

// StepUpdate is a conditional change of a step: it applies only while the
// step is in From and, when Epoch is not zero, under that claim (Epoch and
// Owner). Fields are written when not zero (nil for Output); Status is
// written always.
type StepUpdate struct {
	App, ID string
	From    StepStatus
	Epoch   int64
	Owner   string

	Status          StepStatus
	LeaseUntil      time.Time
	DueAt           time.Time
	Output          []byte
	Error           string
	CancelRequested bool
	// ClearClaim ends the claim: owner and lease are emptied (the epoch
	// stays, so the next claim's is higher).
	ClearClaim bool
}

// StepStore is the storage of steps, in the execution store's
// transactions. Experimental, like ExecutionStore.
type StepStore[TX any] interface {
	Transactor[TX]

	// AddStepTx writes s (its Status, DueAt, Name, Type, Once,
	// IdempotencyKey, CreatedAt) in tx. An ID the application used already
	// is ErrDuplicate.
	AddStepTx(ctx context.Context, tx TX, s Step) error

	// ClaimStepsTx claims, in tx, the c.Limit oldest claimable steps of
	// c.Types (due first, then by ID; fewer, or none, when fewer are
	// claimable): DISPATCHED and due, or EXECUTING with its lease ended
	// when its type is not once-only, never one with CancelRequested.
	// Each becomes EXECUTING with Epoch+1, Attempts+1, c.Owner and a lease
	// until c.Now+c.Lease. Concurrent claims never get the same step, and
	// do not wait for each other. The steps come in claim order.
	ClaimStepsTx(ctx context.Context, tx TX, c StepClaim) ([]Step, error)

	// UpdateStepTx applies u in tx when the step is in u.From (and under
	// u's claim when u.Epoch is set) and returns the step as it now is
	// with applied=true; otherwise it changes nothing and returns the step
	// as it is with applied=false, so the caller tells a stale claim
	// (another epoch) from an illegal transition (another status).
	// ErrNotFound for an unknown step or another application's.
	UpdateStepTx(ctx context.Context, tx TX, u StepUpdate) (s Step, applied bool, err error)
	// UpdateStepsTx applies each of us as UpdateStepTx does, in order, in
	// one round trip where the store can.
	UpdateStepsTx(ctx context.Context, tx TX, us []StepUpdate) ([]Step, []bool, error)

	// GetStep: ErrNotFound for an unknown step or another application's.
	// GetStepTx reads in tx, as GetTaskTx does.
	GetStep(ctx context.Context, app, id string) (Step, error)
	GetStepTx(ctx context.Context, tx TX, app, id string) (Step, error)

	// ListSteps returns the execution's steps in creation order (then ID);
	// ListStepsTx reads them in tx.
	ListSteps(ctx context.Context, app, executionID string) ([]Step, error)
	ListStepsTx(ctx context.Context, tx TX, app, executionID string) ([]Step, error)

	// ExpiredSteps returns up to limit EXECUTING steps whose lease ended
	// before now, oldest lease first, for the caller to settle: once-only
	// ones become OUTCOME_UNKNOWN, those whose execution is canceling end
	// it (repeatable ones are also claimed again by ClaimStepsTx).
	ExpiredSteps(ctx context.Context, now time.Time, limit int) ([]Step, error)
}

// StepWaker is implemented by stores that can tell the processes sharing
// them that steps may have become claimable, so that claimers waiting in
// other processes try at once instead of at their next poll (PostgreSQL:
// NOTIFY and LISTEN). Wake-ups are hints: one may be lost or spurious, and
// claimers keep polling, only less often.
type StepWaker interface {
	// NotifySteps announces, outside any transaction, that steps may have
	// become claimable; call it after the transaction that made them so
	// committed. It never waits for a transaction of another.
	NotifySteps(ctx context.Context) error
	// StepWakeups returns a channel that receives a value, coalesced,
	// after each NotifySteps of any process, and is closed when ctx ends
	// or the listening connection fails (the caller may call again).
	StepWakeups(ctx context.Context) (<-chan struct{}, error)
}

// StepSettler is implemented by stores that write a worker's step updates
// and its executions' transitions in one round trip (PostgreSQL: one
// pipeline): the engine settles a batch of completed steps with it.
type StepSettler[TX any] interface {
	// SettleStepsTx is UpdateStepsTx(us) and then TransitionsTx(ts), with
	// their results, in one round trip where it can, except that ts[j]
	// applies only when the update us[after[j]] did, on the same
	// application (its step's): a transition whose step update was refused
	// neither applies nor locks its execution.
	SettleStepsTx(ctx context.Context, tx TX, us []StepUpdate, ts []Transition, after []int) (steps []Step, stepsApplied []bool, execs []Execution, execsApplied []bool, err error)
}

// CheckSettle checks SettleStepsTx's arguments, for the stores that
// implement it: each transition follows one of the step updates, of its
// own application.
func CheckSettle(us []StepUpdate, ts []Transition, after []int) error {
	if len(after) != len(ts) {
		return fmt.Errorf("settle: %d transitions and %d steps they follow", len(ts), len(after))
	}
	for j, i := range after {
		if i < 0 || i >= len(us) || us[i].App != ts[j].App {
			return fmt.Errorf("settle: transition %d follows no step update of its application", j)
		}
	}
	return nil
}

// StepClaimReader is implemented by stores that read the executions and
// tasks of the steps they claim in the claim's own round trip
// (PostgreSQL: one pipeline): the engine's claims use it.
type StepClaimReader[TX any] interface {
	// ClaimStepsReadTx is ClaimStepsTx(c) and then GetExecutionsTx of the
	// claimed steps' executions, with their results, in one round trip
	// where it can: execs[i] and tasks[i] are those of steps[i].
	ClaimStepsReadTx(ctx context.Context, tx TX, c StepClaim) (steps []Step, execs []Execution, tasks []Task, err error)
}
