package inbox

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// The stream cache holds at most its size, drops the least recently used
// stream first, and replaces a stream's entry in place.
func TestStreamCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newStreamCache(2)
	sk := func(i int) store.StreamKey { return store.StreamKey{Source: "src", Subject: fmt.Sprint(i)} }
	put := func(i int, applied int64) {
		c.put(&knownStream{key: sk(i), raw: fmt.Appendf(nil, `{"applied":%d}`, applied), state: order.Stream{Applied: applied}})
	}
	put(1, 1)
	put(2, 1)
	if _, ok := c.get(sk(1)); !ok { // 1 is now the most recently used
		t.Fatal("1 missing")
	}
	put(3, 1) // evicts 2
	if _, ok := c.get(sk(2)); ok {
		t.Fatal("2 kept past the size, though least recently used")
	}
	put(1, 2) // replaces 1's entry
	if ks, ok := c.get(sk(1)); !ok || ks.state.Applied != 2 || string(ks.raw) != `{"applied":2}` {
		t.Fatalf("1 after its replacement: %+v %v", ks, ok)
	}
	if _, ok := c.get(sk(3)); !ok || c.len() != 2 {
		t.Fatalf("3 missing, or %d entries, want 2", c.len())
	}
	var off *streamCache = newStreamCache(-1)
	off.put(&knownStream{key: sk(1)})
	if _, ok := off.get(sk(1)); ok || off.len() != 0 {
		t.Fatal("a cache of size -1 remembered a stream")
	}
}

// A guess that misses (the stream moved on under another processor) makes
// the processor decide the stream's next missSkip events under its lock
// before it guesses again, so that a stream whose events alternate between
// processors does not pay a missed guess on every event.
func TestStreamCacheBacksOffAfterAMiss(t *testing.T) {
	ctx := context.Background()
	in := memstore.NewInbox()
	apply := func(context.Context, *memstore.Tx, event.Event) error { return nil }
	newProcessor := func() *Processor[*memstore.Tx] {
		p, err := New(in, apply, &Config{Mode: order.ModeDelta})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := newProcessor(), newProcessor()
	sk := store.StreamKey{Source: "src", Subject: "o-1"}
	seq := int64(0)
	send := func(p *Processor[*memstore.Tx]) {
		t.Helper()
		seq++
		res, err := p.Process(ctx, event.Event{Source: sk.Source, Subject: sk.Subject, ID: fmt.Sprint("e", seq), Type: "t", Sequence: seq})
		if err != nil || res.Outcome != OutcomeProcessed {
			t.Fatalf("seq %d: %+v %v", seq, res, err)
		}
	}
	skip := func(p *Processor[*memstore.Tx]) int {
		t.Helper()
		ks, ok := p.streams.get(sk)
		if !ok {
			t.Fatal("the stream is not remembered")
		}
		return ks.skip
	}
	send(a) // a remembers 1
	send(a) // a guesses right: 2
	if got := skip(a); got != 0 {
		t.Fatalf("skip %d after a right guess, want 0", got)
	}
	send(b) // b moves the stream to 3
	// 3 again, republished under another ID, to a: a guesses 2 -> 3 and
	// misses; under the lock the stream holds 3, a duplicate.
	if res, err := a.Process(ctx, event.Event{Source: sk.Source, Subject: sk.Subject, ID: "e3-again", Type: "t", Sequence: 3}); err != nil || res.Outcome != OutcomeDuplicate {
		t.Fatalf("3 again: %+v %v", res, err)
	}
	if got := skip(a); got != missSkip {
		t.Fatalf("skip %d after a miss, want %d", got, missSkip)
	}
	for i := 1; i <= missSkip; i++ {
		send(a)
		if got := skip(a); got != missSkip-i {
			t.Fatalf("skip %d after %d events under the lock, want %d", got, i, missSkip-i)
		}
	}
	send(a) // guesses again, right
	if got := skip(a); got != 0 {
		t.Fatalf("skip %d, want 0", got)
	}
}
