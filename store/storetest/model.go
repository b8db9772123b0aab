package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// checkModel drives the store and the model with the same random sequence
// of calls on a few keys, including stale and forged fences, and requires
// the same answers and the same records after every step. Retention is long
// enough that nothing expires, so that stores which expire records by
// themselves compare exactly; expiry has its own tests.
func checkModel[TX any](t *testing.T, open Open[TX]) {
	ctx := context.Background()
	clock := testclock.New(testclock.Epoch0)
	sut, _ := OpenAs[store.Store](t, open, clock.Now)
	iteration := 0
	rapid.Check(t, func(rt *rapid.T) {
		iteration++
		clock.Set(testclock.Epoch0)
		model := &recordModel{now: clock.Now, records: map[string]store.Record{}}
		prefix := fmt.Sprintf("m%d/", iteration)
		keys := []string{prefix + "a", prefix + "b", prefix + "c"}
		var fences []store.Fence
		owners := 0
		pickKey := rapid.SampledFrom(keys)
		lease := rapid.SampledFrom([]time.Duration{time.Second, 5 * time.Second, 10 * time.Second})

		compareRecord := func(rt *rapid.T, k string) {
			want, werr := model.get(k)
			got, gerr := sut.Get(ctx, k)
			if !sameErr(werr, gerr) {
				rt.Fatalf("get %s: model err %v, store err %v", k, werr, gerr)
			}
			if werr == nil {
				if d := diff(want, got); d != "" {
					rt.Fatalf("get %s: %s", k, d)
				}
			}
		}
		pickFence := func(rt *rapid.T) store.Fence {
			if len(fences) == 0 || rapid.IntRange(0, 9).Draw(rt, "forge") == 0 {
				return store.Fence{Key: pickKey.Draw(rt, "key"), Epoch: int64(rapid.IntRange(1, 3).Draw(rt, "epoch")), Owner: "forged"}
			}
			return rapid.SampledFrom(fences).Draw(rt, "fence")
		}
		fenced := func(rt *rapid.T, name string, f store.Fence, werr, gerr error) {
			if !sameErr(werr, gerr) {
				rt.Fatalf("%s %+v: model err %v, store err %v", name, f, werr, gerr)
			}
			compareRecord(rt, f.Key)
		}

		rt.Repeat(map[string]func(*rapid.T){
			"claim": func(rt *rapid.T) {
				owners++
				p := store.ClaimParams{
					Key:         pickKey.Draw(rt, "key"),
					Fingerprint: []byte(rapid.SampledFrom([]string{"fp1", "fp2"}).Draw(rt, "fp")),
					Owner:       fmt.Sprintf("owner-%d", owners),
					Lease:       lease.Draw(rt, "lease"),
					Retention:   time.Hour,
				}
				want := model.claim(p)
				got, err := sut.Claim(ctx, p)
				if err != nil {
					rt.Fatalf("claim: %v", err)
				}
				if want.Claimed != got.Claimed || !want.Now.Equal(got.Now) {
					rt.Fatalf("claim %+v: model claimed=%v now=%v, store claimed=%v now=%v", p, want.Claimed, want.Now, got.Claimed, got.Now)
				}
				if d := diff(want.Record, got.Record); d != "" {
					rt.Fatalf("claim %+v: %s", p, d)
				}
				if got.Claimed {
					fences = append(fences, store.Fence{Key: p.Key, Epoch: got.Record.Epoch, Owner: p.Owner})
				}
			},
			"complete": func(rt *rapid.T) {
				p := store.CompleteParams{Fence: pickFence(rt), Response: []byte(rapid.StringN(0, 8, -1).Draw(rt, "resp")), Retention: time.Hour}
				fenced(rt, "complete", p.Fence, model.complete(p), sut.Complete(ctx, p))
			},
			"release": func(rt *rapid.T) {
				f := pickFence(rt)
				fenced(rt, "release", f, model.release(f), sut.Release(ctx, f))
			},
			"markUnknown": func(rt *rapid.T) {
				f := pickFence(rt)
				fenced(rt, "markUnknown", f, model.markUnknown(f), sut.MarkUnknown(ctx, f))
			},
			"extend": func(rt *rapid.T) {
				f := pickFence(rt)
				l := lease.Draw(rt, "lease")
				wu, werr := model.extend(f, l)
				gu, gerr := sut.Extend(ctx, f, l)
				if werr == nil && gerr == nil && !wu.Equal(gu) {
					rt.Fatalf("extend: model until %v, store until %v", wu, gu)
				}
				fenced(rt, "extend", f, werr, gerr)
			},
			"advance": func(rt *rapid.T) {
				clock.Advance(rapid.SampledFrom([]time.Duration{time.Millisecond, 500 * time.Millisecond, 3 * time.Second, 7 * time.Second}).Draw(rt, "by"))
			},
			"sweep": func(rt *rapid.T) {
				if _, err := sut.Sweep(ctx, 10); err != nil {
					rt.Fatalf("sweep: %v", err)
				}
			},
			"": func(rt *rapid.T) {
				for _, k := range keys {
					compareRecord(rt, k)
				}
			},
		})
	})
}

func sameErr(a, b error) bool {
	switch {
	case a == nil || b == nil:
		return a == nil && b == nil
	case errors.Is(a, store.ErrFenced):
		return errors.Is(b, store.ErrFenced)
	case errors.Is(a, store.ErrNotFound):
		return errors.Is(b, store.ErrNotFound)
	}
	return false
}

// diff describes how got differs from the model's record, or returns "".
func diff(want, got store.Record) string {
	switch {
	case want.Key != got.Key:
		return fmt.Sprintf("key %q, model %q", got.Key, want.Key)
	case !bytes.Equal(want.Fingerprint, got.Fingerprint):
		return fmt.Sprintf("fingerprint %q, model %q", got.Fingerprint, want.Fingerprint)
	case want.State != got.State:
		return fmt.Sprintf("state %v, model %v", got.State, want.State)
	case want.Epoch != got.Epoch:
		return fmt.Sprintf("epoch %d, model %d", got.Epoch, want.Epoch)
	case want.Owner != got.Owner:
		return fmt.Sprintf("owner %q, model %q", got.Owner, want.Owner)
	case want.Unknown != got.Unknown:
		return fmt.Sprintf("unknown %v, model %v", got.Unknown, want.Unknown)
	case !want.LeaseUntil.Equal(got.LeaseUntil):
		return fmt.Sprintf("lease until %v, model %v", got.LeaseUntil, want.LeaseUntil)
	case !want.ExpiresAt.Equal(got.ExpiresAt):
		return fmt.Sprintf("expires at %v, model %v", got.ExpiresAt, want.ExpiresAt)
	case !bytes.Equal(want.Response, got.Response):
		return fmt.Sprintf("response %q, model %q", got.Response, want.Response)
	}
	return ""
}

// recordModel is the record's state machine as store.Store's doc comments
// state it, with no concurrency and no storage: the model checkModel holds
// every store to.
type recordModel struct {
	now     func() time.Time
	records map[string]store.Record // as stored, expired or not
}

// claim grants the key when no live record holds it, when it was released,
// or when its lease ended under the same fingerprint; the epoch goes on
// from the record still stored.
func (m *recordModel) claim(p store.ClaimParams) store.ClaimResult {
	now := m.now()
	old, stored := m.records[p.Key]
	live := stored && now.Before(old.ExpiresAt)
	takeover := old.State == store.StateReleased ||
		old.State == store.StateProcessing && bytes.Equal(old.Fingerprint, p.Fingerprint) && !now.Before(old.LeaseUntil)
	if live && !takeover {
		return store.ClaimResult{Record: old, Now: now}
	}
	rec := store.Record{Key: p.Key, Fingerprint: p.Fingerprint, State: store.StateProcessing, Epoch: old.Epoch + 1,
		Owner: p.Owner, LeaseUntil: now.Add(p.Lease), ExpiresAt: now.Add(p.Retention)}
	m.records[p.Key] = rec
	return store.ClaimResult{Claimed: true, Record: rec, Now: now}
}

// held applies change to the record that f holds (processing, with f's
// epoch and owner), or returns ErrFenced and changes nothing.
func (m *recordModel) held(f store.Fence, change func(rec *store.Record, now time.Time)) error {
	rec, ok := m.records[f.Key]
	if !ok || rec.State != store.StateProcessing || rec.Epoch != f.Epoch || rec.Owner != f.Owner {
		return store.ErrFenced
	}
	change(&rec, m.now())
	m.records[f.Key] = rec
	return nil
}

func (m *recordModel) complete(p store.CompleteParams) error {
	return m.held(p.Fence, func(rec *store.Record, now time.Time) {
		rec.State, rec.Response, rec.Unknown = store.StateDone, p.Response, false
		rec.LeaseUntil, rec.ExpiresAt = time.Time{}, now.Add(p.Retention)
	})
}

func (m *recordModel) release(f store.Fence) error {
	return m.held(f, func(rec *store.Record, _ time.Time) {
		rec.State, rec.Unknown, rec.LeaseUntil = store.StateReleased, false, time.Time{}
	})
}

func (m *recordModel) markUnknown(f store.Fence) error {
	return m.held(f, func(rec *store.Record, _ time.Time) { rec.Unknown = true })
}

// extend moves the lease, and the expiry with it when the lease would
// outlive the record.
func (m *recordModel) extend(f store.Fence, lease time.Duration) (time.Time, error) {
	var until time.Time
	err := m.held(f, func(rec *store.Record, now time.Time) {
		until = now.Add(lease)
		rec.LeaseUntil = until
		if rec.ExpiresAt.Before(until) {
			rec.ExpiresAt = until
		}
	})
	return until, err
}

func (m *recordModel) get(key string) (store.Record, error) {
	rec, ok := m.records[key]
	if !ok || !m.now().Before(rec.ExpiresAt) {
		return store.Record{}, store.ErrNotFound
	}
	return rec, nil
}
