package workflow

import (
	"encoding/json"
	"time"

	"github.com/robfig/cron/v3"
)

// CatchUp is what a schedule does with the ticks it missed while no
// service ran (downtime, a deploy), in the window of its identities.
type CatchUp string

// The catch-up policies.
const (
	// CatchUpLatest (the default): the latest missed tick runs, once; the
	// older ones are skipped.
	CatchUpLatest CatchUp = "latest"
	// CatchUpAll: every missed tick runs, oldest first, at most
	// MaxCatchUp of them.
	CatchUpAll CatchUp = "all"
	// CatchUpNone: missed ticks are skipped; only the ticks that come due
	// while a service runs do.
	CatchUpNone CatchUp = "none"
)

// MaxCatchUp bounds the missed ticks one schedule runs after downtime.
const MaxCatchUp = 1000

// Schedule is an ENTRY_POINT's cron trigger: each tick starts a run whose
// identity is the tick's time (a clientIdempotencyId "cron-<tick>"), so
// the same tick fired twice (two services, a restart) is one run.
type Schedule struct {
	spec    string
	sched   cron.Schedule
	catchUp CatchUp
	payload map[string]json.RawMessage
}

// Schedule returns the workflow's schedule, or nil when it has none.
func (w *Workflow) Schedule() *Schedule { return w.schedule }

// CatchUp returns the schedule's catch-up policy.
func (s *Schedule) CatchUp() CatchUp { return s.catchUp }

// String returns the cron expression as written.
func (s *Schedule) String() string { return s.spec }

// Ticks returns the schedule's ticks after after and at or before upTo,
// oldest first, at most max of them (the newest ones when there are more).
func (s *Schedule) Ticks(after, upTo time.Time, max int) []time.Time {
	var out []time.Time
	for t := s.sched.Next(after); !t.IsZero() && !t.After(upTo); t = s.sched.Next(t) {
		out = append(out, t)
		if len(out) > max {
			out = out[1:]
		}
	}
	return out
}

// ClientID is the identity of tick's run.
func (s *Schedule) ClientID(tick time.Time) string {
	return "cron-" + tick.UTC().Format(time.RFC3339)
}

// Payload is tick's run's payload: the schedule's payload object with
// "tick", the tick's time.
func (s *Schedule) Payload(tick time.Time) []byte {
	p := make(map[string]any, len(s.payload)+1)
	for k, v := range s.payload {
		p[k] = v
	}
	p["tick"] = tick.UTC().Format(time.RFC3339)
	return mustJSON(p)
}

// schedule reads an ENTRY_POINT's schedule: {"cron", "catchUp"?,
// "payload"?}.
func (c *compiler) schedule(at string, raw json.RawMessage) *Schedule {
	var cfg map[string]json.RawMessage
	if !c.probs.decode(at, raw, &cfg, `must be an object: {"cron", "catchUp"?, "payload"?}`) {
		return nil
	}
	c.probs.unknown(at, cfg, "cron", "catchUp", "payload")
	s := &Schedule{catchUp: CatchUpLatest}
	if !c.probs.decode(at+"/cron", cfg["cron"], &s.spec, "must be a string") || s.spec == "" {
		c.probs.add(at+"/cron", "a schedule needs its cron expression, such as \"0 * * * *\" (minute, hour, day of month, month, day of week) or \"@hourly\"")
		return nil
	}
	sched, err := cron.ParseStandard(s.spec)
	if err != nil {
		c.probs.add(at+"/cron", "%q: %v", s.spec, err)
		return nil
	}
	s.sched = sched
	var catchUp string
	if c.probs.decode(at+"/catchUp", cfg["catchUp"], &catchUp, "must be a string") && catchUp != "" {
		switch cu := CatchUp(catchUp); cu {
		case CatchUpLatest, CatchUpAll, CatchUpNone:
			s.catchUp = cu
		default:
			c.probs.add(at+"/catchUp", "%q: %s (the default), %s or %s", catchUp, CatchUpLatest, CatchUpAll, CatchUpNone)
		}
	}
	if raw, ok := cfg["payload"]; ok {
		if err := json.Unmarshal(raw, &s.payload); err != nil || s.payload == nil {
			c.probs.add(at+"/payload", "must be an object (each run's payload: it, and \"tick\")")
		} else if _, ok := s.payload["tick"]; ok {
			c.probs.add(at+"/payload/tick", "\"tick\" is the tick's time, set by the schedule")
		}
	}
	return s
}
