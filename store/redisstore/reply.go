package redisstore

import (
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// parseRecord decodes reply() of common.lua: {flag, now, fingerprint, state,
// epoch, owner, unknown, lease_until, expires_at, response}.
func parseRecord(key string, v []any) (flag bool, now time.Time, rec store.Record, err error) {
	if len(v) != 10 {
		return false, time.Time{}, store.Record{}, fmt.Errorf("redisstore: script replied %d values, want 10", len(v))
	}
	var p replyParser
	flagN := p.int(v[0])
	nowUS := p.int(v[1])
	rec = store.Record{
		Key:         key,
		Fingerprint: []byte(p.str(v[2])),
		State:       store.State(p.int(v[3])),
		Epoch:       p.int(v[4]),
		Owner:       p.str(v[5]),
		Unknown:     p.int(v[6]) == 1,
		LeaseUntil:  fromMicros(p.int(v[7])),
		ExpiresAt:   fromMicros(p.int(v[8])),
	}
	if resp := p.str(v[9]); rec.State == store.StateDone {
		rec.Response = []byte(resp)
	}
	if p.err != nil {
		return false, time.Time{}, store.Record{}, p.err
	}
	return flagN == 1, fromMicros(nowUS), rec, nil
}

// replyParser reads typed values out of a script reply, keeping the first
// mismatch.
type replyParser struct{ err error }

func (p *replyParser) int(v any) int64 {
	n, ok := v.(int64)
	if !ok && p.err == nil {
		p.err = fmt.Errorf("redisstore: script replied %T, want an integer", v)
	}
	return n
}

func (p *replyParser) str(v any) string {
	s, ok := v.(string)
	if !ok && p.err == nil {
		p.err = fmt.Errorf("redisstore: script replied %T, want a string", v)
	}
	return s
}

// fromMicros is the stored microseconds as a time; 0 is the zero time.
func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}
