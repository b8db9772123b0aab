package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testutil/testclock"
	"github.com/idemhq/idem/store"
)

// exerciseOutbox checks store.OutboxStore: an intent exists if and only if
// its business transaction committed; each due row is claimed by one relay
// at a time; every result is fenced by the claim; streams deliver one row
// at a time in order; disabled targets wait; dead rows can be requeued;
// done rows are swept.
func exerciseOutbox[TX any](t *testing.T, open Open[TX]) {
	newStore := onOwnClock[store.OutboxStore[TX]](open)
	ctx := context.Background()
	t0 := testclock.Epoch0
	enqueue := func(t *testing.T, s store.OutboxStore[TX], in store.Intent) (int64, int64) {
		t.Helper()
		var id, seq int64
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			var err error
			id, seq, err = s.EnqueueTx(ctx, tx, in)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id, seq
	}
	intent := func(target, stream string) store.Intent {
		return store.Intent{Target: target, Method: "POST", Path: "/charges", Body: []byte(`{"order":{"id":"o-1"}}`),
			Stream: stream, DueAt: t0, EnqueuedAt: t0}
	}
	claim := func(t *testing.T, s store.OutboxStore[TX], owner string, now time.Time, limit int, skip ...string) []store.Intent {
		t.Helper()
		got, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: owner, Now: now, Lease: 10 * time.Second, Limit: limit, Skip: skip})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ids := func(in []store.Intent) []int64 {
		var out []int64
		for _, i := range in {
			out = append(out, i.ID)
		}
		return out
	}

	t.Run("BatchedCompletionsFenceEachAlone", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		b, ok := s.(store.OutboxBatcher)
		if !ok {
			return // the store records completions one by one: nothing to check
		}
		for range 3 {
			enqueue(t, s, intent("pay", ""))
		}
		got := claim(t, s, "relay-a", t0, 10)
		if len(got) != 3 {
			t.Fatalf("claimed %d", len(got))
		}
		fences := []store.IntentFence{got[0].Fence(), got[1].Fence(), got[2].Fence()}
		fences[1].Epoch++ // a claim another relay took over
		errs, err := b.CompleteIntents(ctx, fences, []int{200, 201, 202}, t0.Add(time.Second))
		if err != nil || len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], store.ErrFenced) || errs[2] != nil {
			t.Fatalf("complete intents: %v %v, want the second fenced alone", errs, err)
		}
		for i, want := range []store.IntentState{store.IntentDone, store.IntentInFlight, store.IntentDone} {
			in, err := s.GetIntent(ctx, got[i].ID)
			if err != nil || in.State != want || (want == store.IntentDone && in.Status != 200+i) {
				t.Fatalf("intent %d: %+v %v, want %v", i, in, err, want)
			}
		}
		if errs, err := b.CompleteIntents(ctx, nil, nil, t0); err != nil || len(errs) != 0 {
			t.Fatalf("none: %v %v", errs, err)
		}
	})

	t.Run("EnqueueCommitsWithTheBusinessChange", func(t *testing.T) {
		t.Parallel()
		s, ledger := newStore(t)
		errBoom := errors.New("boom")
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			if err := ledger.Charge(ctx, tx, "rolled-back"); err != nil {
				return err
			}
			if _, _, err := s.EnqueueTx(ctx, tx, intent("pay", "")); err != nil {
				return err
			}
			return errBoom
		})
		if !errors.Is(err, errBoom) {
			t.Fatal(err)
		}
		if got := claim(t, s, "r1", t0, 10); len(got) != 0 || charges(t, ledger, "rolled-back") != 0 {
			t.Fatalf("rolled-back transaction left intents %v", ids(got))
		}
		in := intent("pay", "")
		in.Headers = map[string]string{"Content-Type": "application/json", "X-Trace": "t"}
		in.Metadata = map[string]string{"tenant": "acme"}
		in.Body = []byte{0, 1, 2, 0xff}
		var id int64
		err = s.InTx(ctx, func(ctx context.Context, tx TX) error {
			if err := ledger.Charge(ctx, tx, "committed"); err != nil {
				return err
			}
			var err error
			id, _, err = s.EnqueueTx(ctx, tx, in)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.GetIntent(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Target != "pay" || got.Method != "POST" || got.Path != "/charges" || string(got.Body) != string(in.Body) ||
			!maps.Equal(got.Headers, in.Headers) || !maps.Equal(got.Metadata, in.Metadata) || got.State != store.IntentPending ||
			got.Attempts != 0 || got.Sequence != 0 || got.Stream != "" {
			t.Fatalf("stored intent %+v", got)
		}
		if _, err := s.GetIntent(ctx, id+1000); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetIntent(unknown) = %v", err)
		}
	})

	t.Run("ConcurrentRelaysClaimEachRowOnce", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		const n = 120
		err := s.InTx(ctx, func(ctx context.Context, tx TX) error {
			for range n {
				if _, _, err := s.EnqueueTx(ctx, tx, intent("pay", "")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			seen  = map[int64]string{}
			dupes []string
			errs  []error
		)
		Concurrently(6, func(r int) {
			owner := "relay-" + strconv.Itoa(r)
			for {
				got, err := s.ClaimIntents(ctx, store.OutboxClaim{Owner: owner, Now: t0, Lease: time.Minute, Limit: 7})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, in := range got {
					if prev, ok := seen[in.ID]; ok {
						dupes = append(dupes, fmt.Sprintf("%d by %s and %s", in.ID, prev, owner))
					}
					seen[in.ID] = owner
				}
				mu.Unlock()
				if err != nil || len(got) == 0 {
					return
				}
			}
		})
		if len(errs) > 0 {
			t.Fatalf("%d claims failed, first: %v", len(errs), errs[0])
		}
		if len(dupes) > 0 || len(seen) != n {
			t.Fatalf("claimed %d of %d rows; claimed twice: %v", len(seen), n, dupes)
		}
	})

	t.Run("StaleRelayIsFenced", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		id, _ := enqueue(t, s, intent("pay", ""))
		a := claim(t, s, "relay-a", t0, 1)
		if len(a) != 1 || a[0].Epoch != 1 || a[0].Attempts != 1 || a[0].State != store.IntentInFlight {
			t.Fatalf("first claim %+v", a)
		}
		if got := claim(t, s, "relay-b", t0.Add(9*time.Second), 1); len(got) != 0 {
			t.Fatalf("claimed under a live lease: %v", ids(got))
		}
		// relay-a pauses past its lease; relay-b takes the row over.
		b := claim(t, s, "relay-b", t0.Add(10*time.Second), 1)
		if len(b) != 1 || b[0].ID != id || b[0].Epoch != 2 || b[0].Attempts != 2 {
			t.Fatalf("takeover %+v", b)
		}
		for name, err := range map[string]error{
			"complete": s.CompleteIntent(ctx, a[0].Fence(), 200, t0),
			"retry":    s.RetryIntent(ctx, a[0].Fence(), t0, "late"),
			"kill":     s.KillIntent(ctx, a[0].Fence(), "late", t0),
			"forged":   s.CompleteIntent(ctx, store.IntentFence{ID: id, Epoch: 2, Owner: "relay-a"}, 200, t0),
		} {
			if !errors.Is(err, store.ErrFenced) {
				t.Errorf("stale %s = %v, want ErrFenced", name, err)
			}
		}
		if err := s.CompleteIntent(ctx, b[0].Fence(), 201, t0.Add(11*time.Second)); err != nil {
			t.Fatal(err)
		}
		got, _ := s.GetIntent(ctx, id)
		if got.State != store.IntentDone || got.Status != 201 || !got.DoneAt.Equal(t0.Add(11*time.Second)) || got.Epoch != 2 {
			t.Fatalf("after completion %+v", got)
		}
		if err := s.CompleteIntent(ctx, b[0].Fence(), 200, t0); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("completing twice = %v, want ErrFenced", err)
		}
		if got := claim(t, s, "relay-c", t0.Add(time.Hour), 1); len(got) != 0 {
			t.Fatalf("a done row was claimed: %v", ids(got))
		}
	})

	t.Run("RetryWaitsUntilDue", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		id, _ := enqueue(t, s, intent("pay", ""))
		a := claim(t, s, "r", t0, 1)
		if err := s.RetryIntent(ctx, a[0].Fence(), t0.Add(30*time.Second), "503 Service Unavailable"); err != nil {
			t.Fatal(err)
		}
		got, _ := s.GetIntent(ctx, id)
		if got.State != store.IntentPending || got.LastError != "503 Service Unavailable" || !got.DueAt.Equal(t0.Add(30*time.Second)) || got.Attempts != 1 {
			t.Fatalf("after retry %+v", got)
		}
		if c := claim(t, s, "r", t0.Add(29*time.Second), 1); len(c) != 0 {
			t.Fatal("claimed before due")
		}
		if c := claim(t, s, "r", t0.Add(30*time.Second), 1); len(c) != 1 || c[0].Epoch != 2 || c[0].Attempts != 2 {
			t.Fatalf("claim when due: %+v", c)
		}
	})

	t.Run("StreamsDeliverOneAtATimeInOrder", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		var o1 []int64
		for i := range 3 {
			id, seq := enqueue(t, s, intent("pay", "order-1"))
			if seq != int64(i+1) {
				t.Fatalf("sequence %d, want %d", seq, i+1)
			}
			o1 = append(o1, id)
		}
		_, seq := enqueue(t, s, intent("pay", "order-2"))
		plain, _ := enqueue(t, s, intent("pay", ""))
		if seq != 1 {
			t.Fatalf("order-2's first sequence = %d", seq)
		}
		got := claim(t, s, "r", t0, 10)
		if len(got) != 3 || got[0].ID != o1[0] || got[0].Sequence != 1 || got[2].ID != plain {
			t.Fatalf("first claim %v: want order-1's first, order-2's first, the plain row", ids(got))
		}
		if c := claim(t, s, "r", t0, 10); len(c) != 0 {
			t.Fatalf("claimed %v while the streams' heads are in flight", ids(c))
		}
		if err := s.CompleteIntent(ctx, got[0].Fence(), 200, t0); err != nil {
			t.Fatal(err)
		}
		next := claim(t, s, "r", t0, 10)
		if len(next) != 1 || next[0].ID != o1[1] || next[0].Sequence != 2 {
			t.Fatalf("after the head completed: %v", ids(next))
		}
		// A dead row ends its turn too: the stream goes on.
		if err := s.KillIntent(ctx, next[0].Fence(), "400 Bad Request", t0); err != nil {
			t.Fatal(err)
		}
		if last := claim(t, s, "r", t0, 10); len(last) != 1 || last[0].ID != o1[2] {
			t.Fatalf("after the second died: %v", ids(last))
		}
	})

	t.Run("DisabledTargetsWait", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		gone, _ := enqueue(t, s, intent("legacy", ""))
		live, _ := enqueue(t, s, intent("pay", ""))
		if err := s.DisableTarget(ctx, "legacy", "410 Gone", t0); err != nil {
			t.Fatal(err)
		}
		dis, err := s.DisabledTargets(ctx)
		if err != nil || !slices.Equal(dis, []string{"legacy"}) {
			t.Fatalf("DisabledTargets = %v, %v", dis, err)
		}
		if c := claim(t, s, "r", t0, 10, dis...); len(c) != 1 || c[0].ID != live {
			t.Fatalf("claimed %v with legacy disabled", ids(c))
		}
		if err := s.EnableTarget(ctx, "legacy"); err != nil {
			t.Fatal(err)
		}
		dis, _ = s.DisabledTargets(ctx)
		if c := claim(t, s, "r", t0, 10, dis...); len(dis) != 0 || len(c) != 1 || c[0].ID != gone {
			t.Fatalf("after enabling: disabled %v, claimed %v", dis, ids(c))
		}
	})

	t.Run("DeadRowsListedAndRequeued", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		var dead []int64
		for range 5 {
			id, _ := enqueue(t, s, intent("pay", ""))
			dead = append(dead, id)
		}
		for _, in := range claim(t, s, "r", t0, 10) {
			if err := s.KillIntent(ctx, in.Fence(), "out of budget", t0.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		var listed []int64
		for after := int64(0); ; {
			page, err := s.ListIntents(ctx, store.IntentDead, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, in := range page {
				if in.LastError != "out of budget" || in.State != store.IntentDead || !in.DoneAt.Equal(t0.Add(time.Minute)) {
					t.Fatalf("dead row %+v", in)
				}
			}
			listed = append(listed, ids(page)...)
			after = page[len(page)-1].ID
		}
		if !slices.Equal(listed, dead) {
			t.Fatalf("listed %v, want %v", listed, dead)
		}
		if err := s.RequeueIntent(ctx, dead[0], t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.RequeueIntent(ctx, dead[0], t0.Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("requeue of a pending row = %v, want ErrNotFound", err)
		}
		got := claim(t, s, "r", t0.Add(time.Hour), 10)
		if len(got) != 1 || got[0].ID != dead[0] || got[0].Attempts != 1 {
			t.Fatalf("requeued row claimed as %+v, want attempts restarting at 1", got)
		}
		if _, err := s.ListIntents(ctx, store.IntentDead, 0, 0); err == nil {
			t.Error("ListIntents with limit 0: no error")
		}
	})

	t.Run("SweepDeletesOldDoneRows", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		for range 5 {
			enqueue(t, s, intent("pay", ""))
		}
		pending, _ := enqueue(t, s, intent("pay", ""))
		got := claim(t, s, "r", t0, 5)
		for i, in := range got {
			if err := s.CompleteIntent(ctx, in.Fence(), 200, t0.Add(time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		n, err := s.SweepIntents(ctx, t0.Add(3*time.Second), 2)
		if err != nil || n != 2 {
			t.Fatalf("first sweep %d, %v; want 2 (limit)", n, err)
		}
		n, _ = s.SweepIntents(ctx, t0.Add(3*time.Second), 10)
		if n != 1 {
			t.Fatalf("second sweep %d, want 1 (done before +3s)", n)
		}
		done, _ := s.ListIntents(ctx, store.IntentDone, 0, 10)
		if len(done) != 2 {
			t.Fatalf("done rows left %v, want the 2 newest", ids(done))
		}
		if _, err := s.GetIntent(ctx, pending); err != nil {
			t.Fatalf("the pending row was swept: %v", err)
		}
		if c := claim(t, s, "r2", t0.Add(time.Hour), 10); len(c) != 1 || c[0].ID != pending {
			t.Fatalf("claimable after sweep: %v", ids(c))
		}
	})

	t.Run("BadClaims", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t)
		for _, c := range []store.OutboxClaim{
			{Owner: "r", Now: t0, Lease: time.Second, Limit: 0},
			{Owner: "", Now: t0, Lease: time.Second, Limit: 1},
			{Owner: "r", Now: t0, Lease: 0, Limit: 1},
		} {
			if _, err := s.ClaimIntents(ctx, c); err == nil {
				t.Errorf("ClaimIntents(%+v): no error", c)
			}
		}
	})
}
