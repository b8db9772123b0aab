package execution

import (
	"encoding/json"

	"github.com/idemhq/idem/event"
)

// Rank is the execution number an event of this engine carries in its data
// (executionNumber: 1 for a task's first execution, 2 for its first
// rerun…), and 0 for any other event. A receiver on package inbox sets it
// as inbox.Config.ExecutionRank, so that once a rerun's events arrive, the
// late events of the run it replaced are superseded instead of applied.
func Rank(ev event.Event) int64 {
	var d struct {
		Number int64 `json:"executionNumber"`
	}
	if json.Unmarshal(ev.Data, &d) != nil {
		return 0
	}
	return d.Number
}
