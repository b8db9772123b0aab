package serve

import (
	"encoding/json"
	"time"

	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/store"
)

// Task is a task on the wire.
type Task struct {
	ID                 string          `json:"id"`
	Type               string          `json:"type"`
	Input              json.RawMessage `json:"input"`
	ExternalRef        string          `json:"externalRef,omitempty"`
	Status             string          `json:"status"`
	CurrentExecutionID string          `json:"currentExecutionId"`
	CreatedAt          time.Time       `json:"createdAt"`
	Deadline           *time.Time      `json:"deadline,omitempty"`
}

// Execution is an execution on the wire.
type Execution struct {
	ID         string          `json:"id"`
	TaskID     string          `json:"taskId,omitempty"`
	Number     int             `json:"number"`
	Status     string          `json:"status"`
	CreatedAt  time.Time       `json:"createdAt"`
	StartedAt  *time.Time      `json:"startedAt,omitempty"`
	FinishedAt *time.Time      `json:"finishedAt,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      string          `json:"error,omitempty"`
	Progress   *int            `json:"progress,omitempty"`
	// Workflow and Version name a workflow's run (which has no task).
	Workflow string `json:"workflow,omitempty"`
	Version  int    `json:"version,omitempty"`
}

// Step is a step on the wire. Its id is opaque: it names the application
// too, so that a worker can address it alone.
type Step struct {
	ID             string          `json:"id"`
	ExecutionID    string          `json:"executionId"`
	Name           string          `json:"name"`
	Status         string          `json:"status"`
	Epoch          int64           `json:"epoch"`
	Attempts       int             `json:"attempts"`
	LeaseUntil     *time.Time      `json:"leaseUntil,omitempty"`
	Output         json.RawMessage `json:"output,omitempty"`
	Error          string          `json:"error,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
}

// Event is an execution's event on the wire: a structured-mode CloudEvent.
type Event struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Subject         string          `json:"subject"`
	Sequence        string          `json:"sequence"`
	ExecutionID     string          `json:"executionid"`
	Time            time.Time       `json:"time"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func taskOf(t store.Task) Task {
	return Task{ID: t.ID, Type: t.Type, Input: json.RawMessage(t.Input), ExternalRef: t.ExternalRef,
		Status: execution.Status(t.Status).String(), CurrentExecutionID: t.CurrentExecution, CreatedAt: t.CreatedAt.UTC(),
		Deadline: optTime(t.Deadline)}
}

func executionOf(e store.Execution) Execution {
	out := Execution{ID: e.ID, TaskID: e.TaskID, Number: e.Number, Status: execution.Status(e.Status).String(),
		CreatedAt: e.CreatedAt.UTC(), StartedAt: optTime(e.StartedAt), FinishedAt: optTime(e.FinishedAt), Error: e.Error,
		Workflow: e.Workflow, Version: e.Version}
	if e.Workflow != "" {
		out.TaskID = "" // its task is the service's own
	}
	if len(e.Output) > 0 {
		out.Output = json.RawMessage(e.Output)
	}
	if e.Progress != 0 {
		p := e.Progress
		out.Progress = &p
	}
	return out
}

// subjectOf is the CloudEvents subject of e's events: its task, or the
// workflow a workflow's run runs.
func subjectOf(e store.Execution) string {
	if e.Workflow != "" {
		return e.Workflow
	}
	return e.TaskID
}

func stepOf(s store.Step) Step {
	out := Step{ID: wireStepID(s.App, s.ID), ExecutionID: s.ExecutionID, Name: s.Name, Status: execution.StepStatus(s.Status).String(),
		Epoch: s.Epoch, Attempts: s.Attempts, LeaseUntil: optTime(s.LeaseUntil), Error: s.Error, IdempotencyKey: s.IdempotencyKey}
	if len(s.Output) > 0 {
		out.Output = json.RawMessage(s.Output)
	}
	return out
}
