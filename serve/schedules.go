package serve

import (
	"context"
	"time"

	"github.com/idemhq/idem/internal/loop"
	"github.com/idemhq/idem/workflow"
)

// RunSchedules starts the runs of the workflows' schedules (an
// ENTRY_POINT's "schedule") until ctx ends, looking every
// Config.ScheduleInterval. Each tick starts a run whose identity is the
// tick's time, taken as a trigger's is: every `idem serve` process runs
// its own scheduler, and a tick fired by two of them, or fired again after
// a restart, is one run, however it ended. When a process first sees a
// schedule (it started, or the version is new), the ticks it missed within
// the workflow's idempotencyWindow, and after the version was stored, run
// as its catchUp says: the latest one (the default), all of them (at most
// workflow.MaxCatchUp), or none.
func (srv *Server[TX]) RunSchedules(ctx context.Context) error {
	seen := map[compiledKey]time.Time{} // a version's schedule: its ticks up to this are handled here
	return loop.Every(ctx, srv.cfg.ScheduleInterval, func() bool {
		srv.schedule(ctx, seen)
		srv.settled()
		return false
	})
}

// schedule fires the ticks that came due since the last look.
func (srv *Server[TX]) schedule(ctx context.Context, seen map[compiledKey]time.Time) {
	defs, err := srv.s.LatestDefinitions(ctx, workflow.Kind)
	if err != nil {
		srv.cfg.Logger.WarnContext(ctx, "serve: reading the workflows' schedules failed", "error", err)
		return
	}
	now := srv.cfg.Now()
	live := map[compiledKey]bool{}
	for _, d := range defs {
		k := compiledKey{d.App, d.Name, d.Version}
		live[k] = true
		wf, _, err := srv.compiled(ctx, d.App, d.Name, d.Version)
		if err != nil {
			srv.cfg.Logger.WarnContext(ctx, "serve: a stored workflow does not load", "app", d.App, "workflow", d.Name, "error", err)
			continue
		}
		s := wf.Schedule()
		if s == nil {
			continue
		}
		after, known := seen[k]
		var ticks []time.Time
		if !known {
			floor := d.CreatedAt
			if w := now.Add(-wf.Window()); w.After(floor) {
				floor = w
			}
			switch s.CatchUp() {
			case workflow.CatchUpAll:
				ticks = s.Ticks(floor, now, workflow.MaxCatchUp)
			case workflow.CatchUpLatest:
				ticks = s.Ticks(floor, now, 1)
			default: // none: only a tick that came due within the last look's span
				if g := now.Add(-2 * srv.cfg.ScheduleInterval); g.After(floor) {
					floor = g
				}
				ticks = s.Ticks(floor, now, 1)
			}
		} else {
			ticks = s.Ticks(after, now, workflow.MaxCatchUp)
		}
		seen[k] = now
		for _, tick := range ticks {
			_, outcome, err := srv.fire(ctx, d.App, d.Name, wf, d.Version, s.Payload(tick), s.ClientID(tick), true, true)
			if isStoreError(err) || (err != nil && ctx.Err() == nil && !isTriggerInvalid(err)) {
				// The store failed: this tick and the later ones are
				// looked at again next time.
				srv.cfg.Logger.WarnContext(ctx, "serve: a schedule's tick could not start its run", "app", d.App, "workflow", d.Name,
					"tick", tick, "error", err)
				seen[k] = tick.Add(-time.Nanosecond)
				break
			}
			if err != nil || outcome == fireReused {
				srv.cfg.Logger.WarnContext(ctx, "serve: a schedule's tick cannot run", "app", d.App, "workflow", d.Name, "tick", tick, "error", err)
			}
		}
	}
	for k := range seen {
		if !live[k] {
			delete(seen, k) // a newer version replaced it
		}
	}
}
