package inbox

// BatchesCommitted is how many batches of more than one event p committed
// (Config.Batch).
func BatchesCommitted[TX any](p *Processor[TX]) int64 {
	if p.batch == nil {
		return 0
	}
	return p.batch.batches.Load()
}

// Waiting is how many events wait for a batch in p.
func Waiting[TX any](p *Processor[TX]) int {
	p.batch.mu.Lock()
	defer p.batch.mu.Unlock()
	return len(p.batch.queue)
}
