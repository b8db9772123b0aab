package httpidem

import (
	"errors"
	"sync/atomic"
)

// bodyAllowance is how much of each request body, and of each captured
// response, is held without drawing on Config.MemoryBudget. An ordinary
// JSON request and its answer never wait on the budget, so that clients
// holding large bodies open cannot starve them; what one connection holds
// this way is of the order of what net/http already spends on it (its
// buffers and goroutine).
const bodyAllowance = 16 << 10

// errOverBudget is readBody's error for a body that the memory budget cannot
// hold now: the client is told to come back (503 + Retry-After).
var errOverBudget = errors.New("httpidem: memory budget for buffered bodies exhausted")

// budget counts the bytes of buffered request and response bodies beyond
// each one's allowance. Request bodies must fit (reserve); a response the
// handler already produced is counted even past the limit (force), because
// refusing it would lose an effect that happened, and while it is held the
// budget refuses request bodies instead.
type budget struct {
	limit int64
	used  atomic.Int64
}

// reserve takes n bytes if they fit under the limit.
func (b *budget) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// force takes n bytes whatever the limit.
func (b *budget) force(n int64) {
	if n > 0 {
		b.used.Add(n)
	}
}

// release gives n bytes back.
func (b *budget) release(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// InUse returns how many bytes of buffered bodies, beyond each one's small
// allowance, the middleware holds now (Config.MemoryBudget), for metrics.
func (m *Middleware) InUse() int64 { return m.budget.used.Load() }

// charge is what one request has taken from the budget; it grows as its
// buffers do and is given back when the request is done.
type charge struct {
	b     *budget
	taken int64
}

// grow accounts for a buffer (request or response) of capacity size: it
// takes what size needs beyond the allowance and beyond what was taken.
// With must, the bytes are taken even past the limit.
func (c *charge) grow(size int, must bool) bool {
	need := int64(size-bodyAllowance) - c.taken
	if need <= 0 {
		return true
	}
	if must {
		c.b.force(need)
	} else if !c.b.reserve(need) {
		return false
	}
	c.taken += need
	return true
}

// done gives everything back.
func (c *charge) done() {
	c.b.release(c.taken)
	c.taken = 0
}
