package execution

import "context"

// Settle records the outcomes of steps a worker claimed as Run does for a
// batch that ended together: results[i] and errs[i] are what step i's
// handler returned.
func (w *Worker[TX]) Settle(ctx context.Context, claimed []Claimed, results []Result[TX], errs []error) []error {
	batch := make([]ended[TX], len(claimed))
	for i, c := range claimed {
		batch[i] = ended[TX]{c, results[i], errs[i]}
	}
	return w.settle(ctx, batch)
}
