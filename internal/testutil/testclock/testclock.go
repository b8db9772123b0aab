// Package testclock is the settable clock of idem's tests: stores, guards,
// processors and relays read it instead of the wall clock, so that a test
// ends a lease or a retention exactly when it says.
package testclock

import (
	"sync"
	"time"
)

// Epoch0 is where the suites' clocks start: whole microseconds, so that any
// store keeps it exactly, and in the future, so that a store that hands
// expiry to its server (Redis TTLs) never sees it as past.
var Epoch0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a settable clock, safe for concurrent use. Its zero value is
// not usable; use New.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock that reads t until moved.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
