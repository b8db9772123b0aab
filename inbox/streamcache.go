package inbox

import (
	"container/list"
	"sync"

	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
)

// DefaultStreamCache is Config.StreamCache's default: how many streams'
// order state a Processor remembers.
const DefaultStreamCache = 4096

// knownStream is a stream's state as a transaction of this processor
// committed it: the stored bytes, and what they decode to.
type knownStream struct {
	key   store.StreamKey
	raw   []byte
	state order.Stream
	// skip is how many more events of the stream to decide under its lock
	// before guessing its state again: a guess that missed (the stream had
	// moved on) costs a round trip, and a stream whose events go to other
	// processors too would miss again and again.
	skip int
}

// missSkip is knownStream.skip after a guess that missed: one event in
// missSkip+1 risks the round trip, so that a stream whose events alternate
// between processors costs about what it costs without the cache.
const missSkip = 8

// after returns the entry to remember after a commit that left the stream
// as ks says: missed reports a guess of this Process call that missed;
// prev is the entry its attempt found, if any.
func (ks *knownStream) after(prev *knownStream, missed bool) *knownStream {
	switch {
	case missed:
		ks.skip = missSkip
	case prev != nil && prev.skip > 0:
		ks.skip = prev.skip - 1
	}
	return ks
}

// streamCache remembers the order state of the streams this processor
// committed last, so that the next event on one of them is decided before
// its transaction and stored with its record (store.InboxStreamSetter). It
// is a guess, never an authority: the store sets the stream only when it
// still holds exactly these bytes, so an entry another process or the
// compensator made stale costs a lock and a second decision, never a wrong
// one. Least recently used entries go first when it is full. Safe for
// concurrent use; a nil *streamCache remembers nothing.
type streamCache struct {
	max int

	mu    sync.Mutex
	m     map[store.StreamKey]*list.Element
	order list.List // front: most recently used
}

// newStreamCache returns a cache of max streams, or nil (remembering
// nothing) when max is not positive.
func newStreamCache(max int) *streamCache {
	if max <= 0 {
		return nil
	}
	return &streamCache{max: max, m: map[store.StreamKey]*list.Element{}}
}

// get returns the state remembered for k.
func (c *streamCache) get(k store.StreamKey) (*knownStream, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*knownStream), true
}

// put remembers ks, the state its stream was committed with. Entries are
// never modified once put (get hands them out), only replaced.
func (c *streamCache) put(ks *knownStream) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[ks.key]; ok {
		el.Value = ks
		c.order.MoveToFront(el)
		return
	}
	c.m[ks.key] = c.order.PushFront(ks)
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.m, old.Value.(*knownStream).key)
	}
}

// missed records that a guess made on ks missed, until the attempt run
// again under the lock commits (knownStream.after): the stream's next
// missSkip events are decided under its lock too, should that attempt
// leave the entry as it is (an event recorded before is answered without
// reading its stream). An entry replaced since ks was handed out is left
// as it is.
func (c *streamCache) missed(ks *knownStream) {
	if c == nil || ks == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[ks.key]; ok && el.Value == ks {
		cp := *ks
		cp.skip = missSkip
		el.Value = &cp
	}
}

// len is how many streams are remembered (for tests).
func (c *streamCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
