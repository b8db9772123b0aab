package serve_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

var errInjected = errors.New("injected failure")

// faulty is the SQLite store with one step of a task's creation failing
// once: before the call (it never reached the store) or after it (it did,
// and its answer was lost).
type faulty struct {
	*sqlitestore.Store
	mu    sync.Mutex
	fail  string // the step that fails next
	after bool
}

func (f *faulty) hit(step string) (fail, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != step {
		return false, false
	}
	f.fail = ""
	return true, f.after
}

func (f *faulty) BeginTx(ctx context.Context) (*sql.Tx, error) {
	if fail, _ := f.hit("begin"); fail {
		return nil, errInjected
	}
	return f.Store.BeginTx(ctx)
}

// CreateTaskTx fails before writing ("create"), or after writing the
// task, its execution, its events and its step in tx ("create-written"),
// as a store whose last insert failed would.
func (f *faulty) CreateTaskTx(ctx context.Context, tx *sql.Tx, t store.NewTask) error {
	if fail, _ := f.hit("create"); fail {
		return errInjected
	}
	if err := f.Store.CreateTaskTx(ctx, tx, t); err != nil {
		return err
	}
	if fail, _ := f.hit("create-written"); fail {
		return errInjected
	}
	return nil
}

func (f *faulty) TransitionTx(ctx context.Context, tx *sql.Tx, t store.Transition) (store.Execution, bool, error) {
	if fail, _ := f.hit("transition"); fail {
		return store.Execution{}, false, errInjected
	}
	return f.Store.TransitionTx(ctx, tx, t)
}

// TransitionsTx is how the engine applies transitions: one failure point
// for them all.
func (f *faulty) TransitionsTx(ctx context.Context, tx *sql.Tx, ts []store.Transition) ([]store.Execution, []bool, error) {
	if fail, _ := f.hit("transition"); fail {
		return nil, nil, errInjected
	}
	return f.Store.TransitionsTx(ctx, tx, ts)
}

func (f *faulty) AddStepTx(ctx context.Context, tx *sql.Tx, s store.Step) error {
	if fail, _ := f.hit("step"); fail {
		return errInjected
	}
	return f.Store.AddStepTx(ctx, tx, s)
}

func (f *faulty) EnqueueTx(ctx context.Context, tx *sql.Tx, in store.Intent) (int64, int64, error) {
	if fail, _ := f.hit("callback"); fail {
		return 0, 0, errInjected
	}
	return f.Store.EnqueueTx(ctx, tx, in)
}

func (f *faulty) CompleteTx(ctx context.Context, tx *sql.Tx, p store.CompleteParams) error {
	if fail, _ := f.hit("complete"); fail {
		return errInjected
	}
	return f.Store.CompleteTx(ctx, tx, p)
}

func (f *faulty) CommitTx(ctx context.Context, tx *sql.Tx) error {
	fail, after := f.hit("commit")
	if !fail {
		return f.Store.CommitTx(ctx, tx)
	}
	if !after {
		_ = f.Store.RollbackTx(ctx, tx) // the COMMIT never reached the database
		return errInjected
	}
	if err := f.Store.CommitTx(ctx, tx); err != nil {
		return err
	}
	return errInjected // committed, answer lost
}

// TestCreateFaults fails each step of a task's creation once. The
// request never leaves anything partial: either nothing of it exists
// (and the retry with the same key creates it), or all of it does (and
// the answer is the task, or the retry replays it); in the end there is
// one task, one execution with events 1 and 2, one step, and one callback
// per event.
func TestCreateFaults(t *testing.T) {
	for _, tc := range []struct {
		step   string
		after  bool
		status int // the first answer
	}{
		{"begin", false, 503},
		{"create", false, 503},
		{"create-written", false, 503}, // the execution queued and its step written: one store call
		{"callback", false, 503},
		{"complete", false, 503},
		{"commit", false, 503},
		{"commit", true, 201}, // committed: read back, the answer stands
	} {
		name := tc.step
		if tc.after {
			name += "-answer-lost"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			base := openSQLite(t).(*sqlitestore.Store)
			f := &faulty{Store: base}
			if err := f.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("tok")}, CallbackURL: "http://127.0.0.1:1/cb",
				Scheme: "idem", Secrets: []string{"secret-0123456789"}, CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			srv, err := serve.New[*sql.Tx](f, &serve.Config{Types: types0()})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			e := &env{t: t, url: hs.URL}
			body := `{"type":"export","input":{"order":"o-1"}}`
			f.mu.Lock()
			f.fail, f.after = tc.step, tc.after
			f.mu.Unlock()
			first := e.call("tok", "POST", "/v1/tasks", "k-1", body)
			if first.status != tc.status {
				t.Fatalf("first answer %d %s, want %d", first.status, first.raw, tc.status)
			}
			tasks, err := base.ListTasks(ctx, store.TaskQuery{App: "orders", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.status == 201]; len(tasks) != want {
				t.Fatalf("after the failure: %d tasks, want %d (nothing partial)", len(tasks), want)
			}
			if len(tasks) == 0 {
				if intents, err := base.ListIntents(ctx, store.IntentPending, 0, 10); err != nil || len(intents) != 0 {
					t.Fatalf("a callback without its task: %+v %v", intents, err)
				}
			}
			retry := e.call("tok", "POST", "/v1/tasks", "k-1", body)
			if retry.status != 201 || (tc.status == 201 && retry.header.Get("Idempotent-Replayed") != "true") {
				t.Fatalf("retry %d %v %s", retry.status, retry.header, retry.raw)
			}
			if tasks, _ = base.ListTasks(ctx, store.TaskQuery{App: "orders", Limit: 10}); len(tasks) != 1 {
				t.Fatalf("%d tasks after the retry, want 1", len(tasks))
			}
			exec := retry.str("execution", "id")
			evs, err := base.ListEvents(ctx, "orders", exec, 0, 10)
			if err != nil || len(evs) != 2 {
				t.Fatalf("events %+v %v", evs, err)
			}
			steps, err := base.ListSteps(ctx, "orders", exec)
			if err != nil || len(steps) != 1 {
				t.Fatalf("steps %+v %v", steps, err)
			}
			if intents, err := base.ListIntents(ctx, store.IntentPending, 0, 10); err != nil || len(intents) != 2 {
				t.Fatalf("callbacks %d (%v), want one per event", len(intents), err)
			}
		})
	}
}
