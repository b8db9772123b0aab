package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testutil/testdb"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// countingConn counts the writes a client makes on its connection: one
// per round trip, since pgx writes a statement or a whole pipeline at once
// and then waits for the answer.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// countedStore returns a store on a fresh migrated schema, with a table
// ledger(id int primary key, v int), whose one connection counts its round
// trips in the returned counter, and the pool.
func countedStore(t *testing.T) (*pgstore.Store, *pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	base := migratedPool(t)
	var schema string
	if err := base.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Exec(ctx, "CREATE TABLE ledger (id int PRIMARY KEY, v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 1
	writes := new(atomic.Int64)
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return newStore(t, pool, nil), pool, writes
}

// roundTrips returns how many round trips fn took, run twice first so
// that its statements are prepared on the connection.
func roundTrips(t *testing.T, writes *atomic.Int64, fn func() error) int64 {
	t.Helper()
	for range 2 {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
	}
	before := writes.Load()
	if err := fn(); err != nil {
		t.Fatal(err)
	}
	return writes.Load() - before
}

// TestTransactionRoundTrips counts what a transaction of the store costs:
// one round trip per statement, its BEGIN going out with the first one
// and a queued write (a stream's state, a request key's completion) with
// the COMMIT. pgx's own
// transaction takes two more.
func TestTransactionRoundTrips(t *testing.T) {
	s, pool, writes := countedStore(t)
	ctx := context.Background()
	n := 0
	write := func(ctx context.Context, tx pgx.Tx) error {
		n++
		_, err := tx.Exec(ctx, "INSERT INTO ledger (id, v) VALUES ($1, 1)", n)
		return err
	}
	stream := store.StreamKey{Source: "src", Subject: "s"}
	var refs []store.ExecutionRef
	for i := range 3 {
		ref := store.ExecutionRef{App: "app", ID: fmt.Sprintf("e%d", i)}
		refs = append(refs, ref)
		if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return s.CreateTaskTx(ctx, tx, store.NewTask{
				Task:        store.Task{App: "app", ID: fmt.Sprintf("t%d", i), Type: "export", Input: []byte(`{}`), CreatedAt: time.Now()},
				ExecutionID: ref.ID, Status: store.ExecutionCreated,
				Event: store.Event{Type: "idem.execution.created", Data: []byte(`{}`), Time: time.Now()},
			})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// Three claimed keys, one for each run of the completion's row.
	var fences []store.Fence
	for i := range 3 {
		k := fmt.Sprintf("rt-key-%d", i)
		res, err := s.Claim(ctx, store.ClaimParams{Key: k, Fingerprint: []byte("fp"), Owner: "o", Lease: time.Minute, Retention: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		fences = append(fences, store.Fence{Key: k, Epoch: res.Record.Epoch, Owner: "o"})
	}
	// Six claimed steps of their own type, two for each run of the
	// settle's row.
	for i := range 6 {
		id := fmt.Sprintf("settle-%d", i)
		if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return s.CreateTaskTx(ctx, tx, store.NewTask{
				Task:        store.Task{App: "app", ID: id, Type: "settle", Input: []byte(`{}`), CreatedAt: time.Now()},
				ExecutionID: id, Status: store.ExecutionRunning,
				Event: store.Event{Type: "idem.execution.created", Data: []byte(`{}`), Time: time.Now()},
				Step: &store.Step{App: "app", ID: id, ExecutionID: id, Name: "settle", Type: "settle", Status: store.StepDispatched,
					DueAt: time.Now(), CreatedAt: time.Now()},
			})
		}); err != nil {
			t.Fatal(err)
		}
	}
	var settling []store.Step
	if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		settling, err = s.ClaimStepsTx(ctx, tx, store.StepClaim{Types: []string{"settle"}, Owner: "w", Now: time.Now(), Lease: time.Minute, Limit: 6})
		return err
	}); err != nil || len(settling) != 6 {
		t.Fatal(settling, err)
	}
	for _, c := range []struct {
		name string
		want int64
		fn   func() error
	}{
		{"a worker's settle of two steps: their updates and their executions' transitions, then the commit", 2, func() error {
			two := settling[:2]
			settling = settling[2:]
			var us []store.StepUpdate
			var ts []store.Transition
			for _, st := range two {
				us = append(us, store.StepUpdate{App: st.App, ID: st.ID, From: store.StepExecuting, Epoch: st.Epoch, Owner: st.Owner,
					Status: store.StepCompleted, Output: []byte(`{}`), ClearClaim: true})
				ts = append(ts, store.Transition{App: st.App, ID: st.ExecutionID, From: store.ExecutionRunning, To: store.ExecutionSucceeded,
					FinishedAt: time.Now(), Event: store.Event{Type: "idem.execution.succeeded", Data: []byte(`{}`), Time: time.Now()}})
			}
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				_, stepsApplied, _, moved, err := s.SettleStepsTx(ctx, tx, us, ts, []int{0, 1})
				if err == nil && (!stepsApplied[0] || !stepsApplied[1] || !moved[0] || !moved[1]) {
					err = fmt.Errorf("applied %v, moved %v", stepsApplied, moved)
				}
				return err
			})
		}},
		{"a business write and a request key's completion, which goes with the COMMIT", 2, func() error {
			f := fences[0]
			fences = fences[1:]
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				if err := write(ctx, tx); err != nil {
					return err
				}
				return s.CompleteTx(ctx, tx, store.CompleteParams{Fence: f, Response: []byte("ok"), Retention: time.Hour})
			})
		}},
		{"an event of no order applied, then recorded with the COMMIT", 2, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				if err := write(ctx, tx); err != nil {
					return err
				}
				return s.RecordEventAtCommitTx(ctx, tx, store.EventKey{Source: "src", ID: time.Now().String()}, time.Now())
			})
		}},
		{"pgx's own transaction, one write", 3, func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return write(ctx, tx) })
		}},
		{"one write", 2, func() error { return s.InTx(ctx, write) }},
		{"nothing", 0, func() error { return s.InTx(ctx, func(context.Context, pgx.Tx) error { return nil }) }},
		{"a stream's state alone", 1, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				return s.PutStreamTx(ctx, tx, stream, []byte("{}"), time.Time{})
			})
		}},
		{"an ordered event: record and lock, the business write, the stream's state", 3, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				key := store.EventKey{Source: "src", ID: time.Now().String()}
				if _, _, _, err := s.RecordEventLockStreamTx(ctx, tx, key, time.Now(), stream); err != nil {
					return err
				}
				if err := write(ctx, tx); err != nil {
					return err
				}
				return s.PutStreamTx(ctx, tx, stream, []byte("{}"), time.Time{})
			})
		}},
		{"an ordered event on a remembered stream: its record and the stream's compare and set go out with the business write, then the commit", 2, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				key := store.EventKey{Source: "src", ID: time.Now().String()}
				failed, err := s.RecordEventSetStreamLaterTx(ctx, tx, key, time.Now(), stream, []byte("{}"), []byte("{}"))
				if err != nil {
					return err
				}
				if err := write(ctx, tx); err != nil {
					return err
				}
				return failed()
			})
		}},
		{"an ordered event on a remembered stream whose apply writes nothing: the compare and set goes with the commit", 1, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				key := store.EventKey{Source: "src", ID: time.Now().String()}
				_, err := s.RecordEventSetStreamLaterTx(ctx, tx, key, time.Now(), stream, []byte("{}"), []byte("{}"))
				return err
			})
		}},
		{"an ordered event on a new stream: the stream's placeholder goes with the lock", 3, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				n++
				key, fresh := store.EventKey{Source: "src", ID: time.Now().String()}, store.StreamKey{Source: "src", Subject: fmt.Sprintf("new-%d", n)}
				if _, _, st, err := s.RecordEventLockStreamTx(ctx, tx, key, time.Now(), fresh); err != nil || st != nil {
					return fmt.Errorf("a new stream read %q, %v", st, err)
				}
				if err := write(ctx, tx); err != nil {
					return err
				}
				return s.PutStreamTx(ctx, tx, fresh, []byte("{}"), time.Time{})
			})
		}},
		{"three executions and their tasks read, then the commit", 2, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				execs, tasks, err := s.GetExecutionsTx(ctx, tx, refs)
				if err == nil && (len(execs) != 3 || tasks[2].ID != "t2" || execs[2].TaskID != "t2") {
					err = fmt.Errorf("read %+v %+v", execs, tasks)
				}
				return err
			})
		}},
		{"a task, its execution, two events and its first step, then the commit", 2, func() error {
			n++
			id := fmt.Sprintf("c%d", n)
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				return s.CreateTaskTx(ctx, tx, store.NewTask{
					Task:        store.Task{App: "app", ID: id, Type: "export", Input: []byte(`{}`), CreatedAt: time.Now()},
					ExecutionID: id, Status: store.ExecutionQueued,
					Event: store.Event{Type: "idem.execution.created", Data: []byte(`{}`), Time: time.Now()},
					More:  []store.Event{{Type: "idem.execution.queued", Data: []byte(`{}`), Time: time.Now()}},
					Step: &store.Step{App: "app", ID: id, ExecutionID: id, Name: "export", Type: "export", Status: store.StepDispatched,
						DueAt: time.Now(), CreatedAt: time.Now()},
				})
			})
		}},
		{"a claim of steps with their executions and tasks, then the commit", 2, func() error {
			return s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				_, _, _, err := s.ClaimStepsReadTx(ctx, tx, store.StepClaim{Types: []string{"export"}, Owner: "w", Now: time.Now(), Lease: time.Minute, Limit: 8})
				return err
			})
		}},
		{"a rollback before anything was sent", 0, func() error {
			tx, err := s.BeginTx(ctx)
			if err != nil {
				return err
			}
			return s.RollbackTx(ctx, tx)
		}},
	} {
		if got := roundTrips(t, writes, c.fn); got != c.want {
			t.Errorf("%s: %d round trips, want %d", c.name, got, c.want)
		}
	}
}

// ledgerRows returns the ledger's ids and values.
func ledgerRows(t *testing.T, pool *pgxpool.Pool) map[int]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT id, v FROM ledger")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	var id, v int
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTransactionQueuedWriteFails: a queued write that fails fails the
// statement or the commit it goes out with, nothing of the transaction
// commits, the commit's error says the outcome is known (rolled back), and
// the connection serves the next transaction.
func TestTransactionQueuedWriteFails(t *testing.T) {
	s, pool, _ := countedStore(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "INSERT INTO ledger (id, v) VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	dup := "INSERT INTO ledger (id, v) VALUES (1, 2)" // the primary key refuses it

	// Out with the commit.
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO ledger (id, v) VALUES (2, 2)"); err != nil {
			return err
		}
		return pgstore.Later(ctx, tx, dup)
	})
	var pgErr *pgconn.PgError
	if !errors.Is(err, pgx.ErrTxCommitRollback) || !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("commit after a failing queued write: %v, want ErrTxCommitRollback with the unique violation", err)
	}
	// Out with the next statement, which does not run.
	err = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := pgstore.Later(ctx, tx, dup); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO ledger (id, v) VALUES (3, 3)")
		if !errors.Is(err, pgstore.ErrQueued) || !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Errorf("statement after a failing queued write: %v, want ErrQueued with the unique violation", err)
		}
		return err
	})
	if err == nil {
		t.Fatal("the transaction committed")
	}
	if got := ledgerRows(t, pool); len(got) != 1 || got[1] != 1 {
		t.Fatalf("ledger %v, want only the first row: nothing of the failed transactions", got)
	}
	// The one connection is clean: the next transaction commits.
	if err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return pgstore.Later(ctx, tx, "INSERT INTO ledger (id, v) VALUES (4, 4)")
	}); err != nil {
		t.Fatal(err)
	}
	if got := ledgerRows(t, pool); len(got) != 2 || got[4] != 4 {
		t.Fatalf("ledger %v, want rows 1 and 4", got)
	}
}

// TestTransactionBehavesAsPgx: the statements of a transaction run in the
// order they were issued, whatever the first one is, and everything a
// pgx.Tx offers works: multi-statement Exec, savepoints, the connection.
func TestTransactionBehavesAsPgx(t *testing.T) {
	s, pool, _ := countedStore(t)
	ctx := context.Background()
	t.Run("QueuedThenStatement", func(t *testing.T) {
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := pgstore.Later(ctx, tx, "INSERT INTO ledger (id, v) VALUES (10, 1)"); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, "UPDATE ledger SET v = v + 1 WHERE id = $1", 10)
			if err == nil && tag.RowsAffected() != 1 {
				t.Errorf("the update saw %d rows, want the queued insert's", tag.RowsAffected())
			}
			return err
		})
		if err != nil || ledgerRows(t, pool)[10] != 2 {
			t.Fatalf("%v, ledger %v", err, ledgerRows(t, pool))
		}
	})
	t.Run("FirstStatementQueries", func(t *testing.T) {
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			var v int
			if err := tx.QueryRow(ctx, "SELECT v FROM ledger WHERE id = $1", 99).Scan(&v); !errors.Is(err, pgx.ErrNoRows) {
				t.Errorf("QueryRow of no row first: %v, want ErrNoRows", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT g FROM generate_series(1, $1::int) AS g", 3)
			if err != nil {
				return err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err != nil || len(got) != 3 || got[2] != 3 {
				t.Errorf("Query first: %v, %v", got, err)
			}
			// The pipeline is closed with the rows: the connection answers.
			_, err = tx.Exec(ctx, "INSERT INTO ledger (id, v) VALUES (11, 1); UPDATE ledger SET v = 5 WHERE id = 11")
			return err
		})
		if err != nil || ledgerRows(t, pool)[11] != 5 {
			t.Fatalf("%v, ledger %v", err, ledgerRows(t, pool))
		}
	})
	t.Run("Savepoint", func(t *testing.T) {
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if err := pgstore.Later(ctx, tx, "INSERT INTO ledger (id, v) VALUES (12, 1)"); err != nil {
				return err
			}
			sp, err := tx.Begin(ctx) // sends the queued insert first
			if err != nil {
				return err
			}
			if _, err := sp.Exec(ctx, "INSERT INTO ledger (id, v) VALUES (13, 1)"); err != nil {
				return err
			}
			// Nothing is queued while a savepoint may be around: this
			// write runs now, inside the savepoint, and goes with it.
			if err := pgstore.Later(ctx, tx, "INSERT INTO ledger (id, v) VALUES (14, 1)"); err != nil {
				return err
			}
			if err := sp.Rollback(ctx); err != nil {
				return err
			}
			return pgstore.Later(ctx, tx, "UPDATE ledger SET v = 2 WHERE id = 12")
		})
		got := ledgerRows(t, pool)
		_, nested := got[13]
		_, queued := got[14]
		if err != nil || got[12] != 2 || nested || queued {
			t.Fatalf("%v, ledger %v: want 12 updated, and 13 and 14 rolled back with their savepoint", err, got)
		}
	})
	t.Run("Conn", func(t *testing.T) {
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if st := tx.Conn().PgConn().TxStatus(); st != 'T' {
				t.Errorf("the connection's transaction status is %q, want 'T': begun", st)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Closed", func(t *testing.T) {
		tx, err := s.BeginTx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CommitTx(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("Exec after commit: %v, want ErrTxClosed", err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, pgx.ErrTxClosed) {
			t.Errorf("Rollback after commit: %v, want ErrTxClosed", err)
		}
	})
}
