package key

import (
	"bytes"
	"container/list"
	"sync"
	"time"
)

// DefaultReplayCacheBytes is the replay cache's default size.
const DefaultReplayCacheBytes = 16 << 20

// entryOverhead is what an entry costs beyond its key, fingerprint and
// response: the map's and the list's bookkeeping, roughly.
const entryOverhead = 160

// replayCache keeps completed responses in process, so that a replay is
// answered without a store round trip. A completed record never changes
// until it expires, so a copy is as good as the record until then; the
// copy expires earlier than the record (its deadline is measured from
// before the store decided), never later. Entries are looked up by the
// store key, which holds the principal, the operation and the key, and
// served only to the same fingerprint. Least recently used entries go
// first when the cache is full. Safe for concurrent use.
type replayCache struct {
	max int64

	mu    sync.Mutex
	size  int64
	m     map[string]*list.Element
	order list.List // front: most recently used
}

type cached struct {
	key         string
	fingerprint []byte
	response    []byte
	epoch       int64
	deadline    time.Time // local clock
}

func (c *cached) cost() int64 {
	return int64(len(c.key)+len(c.fingerprint)+len(c.response)) + entryOverhead
}

func newReplayCache(max int64) *replayCache {
	if max <= 0 {
		return nil
	}
	return &replayCache{max: max, m: map[string]*list.Element{}}
}

// get returns the response stored for key when it is cached, unexpired at
// now, and for fingerprint fp.
func (rc *replayCache) get(key string, fp []byte, now time.Time) (*cached, bool) {
	if rc == nil {
		return nil, false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	el, ok := rc.m[key]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cached)
	if !now.Before(e.deadline) {
		rc.remove(el)
		return nil, false
	}
	if !bytes.Equal(e.fingerprint, fp) {
		return nil, false // the store answers: a conflict
	}
	rc.order.MoveToFront(el)
	return e, true
}

// put caches a completed response until deadline (local clock). An entry
// larger than the whole cache is not kept.
func (rc *replayCache) put(key string, fp, response []byte, epoch int64, deadline time.Time) {
	if rc == nil || !time.Now().Before(deadline) {
		return
	}
	e := &cached{key: key, fingerprint: bytes.Clone(fp), response: bytes.Clone(response), epoch: epoch, deadline: deadline}
	if e.cost() > rc.max {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if el, ok := rc.m[key]; ok {
		rc.remove(el)
	}
	rc.m[key] = rc.order.PushFront(e)
	rc.size += e.cost()
	for rc.size > rc.max {
		rc.remove(rc.order.Back())
	}
}

// forget drops key's entry (its record changed: a newer claim took it).
func (rc *replayCache) forget(key string) {
	if rc == nil {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if el, ok := rc.m[key]; ok {
		rc.remove(el)
	}
}

func (rc *replayCache) remove(el *list.Element) {
	e := rc.order.Remove(el).(*cached)
	delete(rc.m, e.key)
	rc.size -= e.cost()
}

// stats is for tests: entries and bytes.
func (rc *replayCache) stats() (int, int64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.m), rc.size
}
