package workflow_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/workflow"
)

// A schedule's ticks are the cron expression's, in a window; each tick's
// run has the tick's identity and the tick in its payload.
func TestSchedule(t *testing.T) {
	d := checkout()
	config(d, 0)["schedule"] = map[string]any{"cron": "*/15 * * * *", "catchUp": "all", "payload": map[string]any{"region": "eu"}}
	w, _, _, err := workflow.Load(mustJSON(t, d), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := w.Schedule()
	if s == nil || s.CatchUp() != workflow.CatchUpAll || s.String() != "*/15 * * * *" {
		t.Fatalf("schedule %+v", s)
	}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ticks := s.Ticks(at, at.Add(time.Hour), 10)
	if len(ticks) != 4 || !ticks[0].Equal(at.Add(15*time.Minute)) || !ticks[3].Equal(at.Add(time.Hour)) {
		t.Fatalf("ticks %v", ticks)
	}
	if last := s.Ticks(at, at.Add(time.Hour), 1); len(last) != 1 || !last[0].Equal(at.Add(time.Hour)) {
		t.Fatalf("the newest tick only: %v", last)
	}
	if got := s.ClientID(ticks[0]); got != "cron-2026-12-02T10:15:00Z" {
		t.Fatalf("identity %q", got)
	}
	if got := string(s.Payload(ticks[0])); got != `{"region":"eu","tick":"2026-12-02T10:15:00Z"}` {
		t.Fatalf("payload %s", got)
	}
	w, _, _, _ = workflow.Load(mustJSON(t, checkout()), nil)
	if w.Schedule() != nil {
		t.Fatal("a schedule where none was written")
	}
}

// A payload is checked against the ENTRY_POINT's inputSchema, and the
// error says where it does not fit.
func TestInputSchema(t *testing.T) {
	d := checkout()
	config(d, 0)["inputSchema"] = map[string]any{
		"type":     "object",
		"required": []any{"order"},
		"properties": map[string]any{"order": map[string]any{
			"type": "object", "required": []any{"id", "amount"},
			"properties": map[string]any{"id": map[string]any{"type": "string"}, "amount": map[string]any{"type": "integer", "minimum": 1}},
		}},
	}
	w, _, _, err := workflow.Load(mustJSON(t, d), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.CheckPayload([]byte(`{"order": {"id": "o-1", "amount": 5}}`)); err != nil {
		t.Fatalf("a payload that fits: %v", err)
	}
	err = w.CheckPayload([]byte(`{"order": {"id": "o-1", "amount": 0}}`))
	if !errors.Is(err, workflow.ErrBadPayload) || !strings.Contains(err.Error(), "/order/amount") {
		t.Fatalf("an amount of 0: %v", err)
	}
	if err := w.CheckPayload([]byte(`[]`)); !errors.Is(err, workflow.ErrBadPayload) {
		t.Fatalf("an array: %v", err)
	}
}
