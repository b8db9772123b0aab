package inbox

// Waiting is how many events wait for a batch in p.
func Waiting[TX any](p *Processor[TX]) int {
	p.batch.mu.Lock()
	defer p.batch.mu.Unlock()
	return len(p.batch.queue)
}
