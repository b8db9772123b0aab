// Command exports runs durable executions end to end, on embedded SQLite:
//
//	go run ./examples/exports
//
// An order application asks idem serve for an export of order o-42 with an
// Idempotency-Key, loses the answer to a timeout and asks again: it gets
// the same task and execution, not a second export. A worker claims the
// step over HTTP, reports progress and completes it. The application
// receives the execution's events as signed callbacks into its own inbox
// (its own SQLite file) and projects the export's status, in order, once
// each. Then it reruns the export: the new run's events win over a late
// event of the old run, which its inbox answers superseded.
//
// It prints what happens and exits non-zero if anything differs from the
// promises.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/execution"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/webhook"
)

const secret = "exports-demo-callback-secret-2030"

func main() {
	dir := flag.String("dir", "", "where the two SQLite files go (default: a new temporary directory)")
	flag.Parse()
	if err := run(context.Background(), *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "exports:", err)
		os.Exit(1)
	}
}

// open opens (and migrates) a SQLite file.
func open(ctx context.Context, path string) (*sql.DB, *sqlitestore.Store, error) {
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return nil, nil, err
	}
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, nil, err
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, st, nil
}

// listen serves h on a free loopback port and returns its URL.
func listen(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

func run(ctx context.Context, dir string, out io.Writer) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "idem-exports")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The order application's side: its inbox and projection in its own
	// file. Its apply writes the export's status with the inbox row.
	appDB, appStore, err := open(ctx, filepath.Join(dir, "orders-app.db"))
	if err != nil {
		return err
	}
	defer appDB.Close()
	if _, err := appDB.Exec(`CREATE TABLE export_log (run INTEGER NOT NULL, seq INTEGER NOT NULL, status TEXT NOT NULL)`); err != nil {
		return err
	}
	p, err := inbox.New[*sql.Tx](appStore, func(ctx context.Context, tx *sql.Tx, ev event.Event) error {
		var d struct{ Status string }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return inbox.Invalid(err)
		}
		if ev.Type == "idem.execution.progress" {
			d.Status = "progress"
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO export_log (run, seq, status) VALUES (?, ?, ?)`, execution.Rank(ev), ev.Sequence, d.Status)
		return err
	}, &inbox.Config{Mode: order.ModeDelta, ExecutionRank: execution.Rank, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		return err
	}
	receiver, err := webhook.New(p, &webhook.Config{Verifier: v})
	if err != nil {
		return err
	}
	// The network holds back the first run's last event (succeeded) until
	// the rerun's events have arrived, to show whose events win.
	var holdOld atomic.Bool
	holdOld.Store(true)
	var firstRun, lateAnswer atomic.Value
	firstRun.Store("")
	callbackURL, stopReceiver, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		late := r.Header.Get("Ce-Type") == "idem.execution.succeeded" && r.Header.Get("Ce-Executionid") == firstRun.Load().(string)
		if late && holdOld.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rec := &recorder{ResponseWriter: w}
		receiver.ServeHTTP(rec, r)
		if late {
			lateAnswer.Store(rec.body.String())
		}
	}))
	if err != nil {
		return err
	}
	defer stopReceiver()

	// idem serve, on its own file.
	svcDB, svc, err := open(ctx, filepath.Join(dir, "idem.db"))
	if err != nil {
		return err
	}
	defer svcDB.Close()
	if err := svc.CreateApp(ctx, store.App{Name: "orders", TokenHashes: [][]byte{serve.HashToken("orders-token")},
		CallbackURL: callbackURL, Scheme: "idem", Secrets: []string{secret}, CreatedAt: time.Now()}); err != nil {
		return err
	}
	if err := svc.AddWorkerToken(ctx, serve.HashToken("worker-token"), time.Now()); err != nil {
		return err
	}
	srv, err := serve.New[*sql.Tx](svc, &serve.Config{Types: map[string]execution.TypeConfig{"export": {}}})
	if err != nil {
		return err
	}
	go srv.RunRelay(ctx)
	go srv.RunExpirer(ctx)
	go srv.RunWakeups(ctx)
	go srv.RunWorkflows(ctx)
	api, stopAPI, err := listen(srv)
	if err != nil {
		return err
	}
	defer stopAPI()

	c := &client{base: api}
	// 1. The application asks for an export and loses the answer.
	body := `{"type":"export","input":{"order":"o-42","format":"csv"},"externalRef":"o-42"}`
	if _, _, err := c.call("orders-token", "POST", "/v1/tasks", "export-o-42", body, true); err == nil {
		return errors.New("the lost answer was not lost")
	}
	fmt.Fprintln(out, "1. POST /v1/tasks (Idempotency-Key: export-o-42): the answer is lost (timeout)")
	// 2. It retries with the same key: the same task, replayed.
	status, first, err := c.call("orders-token", "POST", "/v1/tasks", "export-o-42", body, false)
	if err != nil || status != 201 || first.header.Get("Idempotent-Replayed") != "true" {
		return fmt.Errorf("retry: %d %v %v", status, first.header, err)
	}
	taskID, execID := first.str("task", "id"), first.str("execution", "id")
	firstRun.Store(execID)
	fmt.Fprintf(out, "2. the retry: 201, Idempotent-Replayed: true, task %s, execution %s (one export, not two)\n", short(taskID), short(execID))

	// 3. A worker runs it over HTTP.
	work := func() error {
		_, claim, err := c.call("worker-token", "POST", "/v1/worker/claim", "", `{"types":["export"],"waitSeconds":5}`, false)
		if err != nil {
			return err
		}
		step, epoch := claim.str("step", "id"), claim.num("step", "epoch")
		for _, call := range []struct{ path, body string }{
			{"/progress", fmt.Sprintf(`{"epoch":%d,"progress":50}`, epoch)},
			{"/complete", fmt.Sprintf(`{"epoch":%d,"output":{"url":"s3://exports/o-42.csv"}}`, epoch)},
		} {
			if status, a, err := c.call("worker-token", "POST", "/v1/worker/steps/"+step+call.path, "", call.body, false); err != nil || status != 200 {
				return fmt.Errorf("worker %s: %d %v %v", call.path, status, a.raw, err)
			}
		}
		fmt.Fprintf(out, "   a worker claimed the step (epoch %d, downstream key %s), reported 50%%, completed\n", epoch, short(claim.str("step", "idempotencyKey")))
		return nil
	}
	if err := work(); err != nil {
		return err
	}
	// 4. The callbacks reach the application's inbox, in order.
	if err := wait(func() bool { return count(appDB, 1) == 4 }); err != nil {
		return fmt.Errorf("the first run's callbacks: %w", err)
	}
	fmt.Fprintf(out, "3. the application's inbox applied run 1: %s (its last event is slow on the network)\n", strings.Join(log(appDB, 1), ", "))

	// 5. A rerun: its events win over the old run's late one.
	status, rr, err := c.call("orders-token", "POST", "/v1/tasks/"+taskID+"/rerun", "rerun-o-42", "", false)
	if err != nil || status != 201 {
		return fmt.Errorf("rerun: %d %v", status, err)
	}
	fmt.Fprintf(out, "4. POST /v1/tasks/%s/rerun: execution %s, number %d\n", short(taskID), short(rr.str("execution", "id")), rr.num("execution", "number"))
	if err := work(); err != nil {
		return err
	}
	if err := wait(func() bool { return count(appDB, 2) == 5 }); err != nil {
		return fmt.Errorf("the rerun's callbacks: %w", err)
	}
	fmt.Fprintf(out, "5. the inbox applied run 2: %s\n", strings.Join(log(appDB, 2), ", "))
	holdOld.Store(false)
	if err := wait(func() bool { return lateAnswer.Load() != nil }); err != nil {
		return fmt.Errorf("run 1's late event: %w", err)
	}
	late := lateAnswer.Load().(string)
	fmt.Fprintf(out, "6. run 1's late 'succeeded' finally arrives: the inbox answers %s\n", strings.TrimSpace(late))

	// 6. What the application saw, checked.
	var dup int
	if err := appDB.QueryRow(`SELECT count(*) FROM (SELECT run, seq FROM export_log GROUP BY run, seq HAVING count(*) > 1)`).Scan(&dup); err != nil {
		return err
	}
	run1, run2 := strings.Join(log(appDB, 1), ", "), strings.Join(log(appDB, 2), ", ")
	switch {
	case run1 != "created, queued, running, progress" || run2 != "created, queued, running, progress, succeeded" || dup != 0:
		return fmt.Errorf("applied run 1 %q, run 2 %q (duplicates %d)", run1, run2, dup)
	case !strings.Contains(late, `"superseded"`):
		return fmt.Errorf("run 1's late event was answered %s, want superseded", late)
	}
	fmt.Fprintln(out, "7. each event applied once and in order; the replaced run's late event did not overwrite the rerun's")
	return nil
}

// count is how many events of run the projection applied.
func count(db *sql.DB, run int) int {
	var n int
	_ = db.QueryRow(`SELECT count(*) FROM export_log WHERE run = ?`, run).Scan(&n)
	return n
}

// log is run's statuses as applied, in sequence order.
func log(db *sql.DB, run int) []string {
	rows, err := db.Query(`SELECT status FROM export_log WHERE run = ? ORDER BY seq`, run)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		out = append(out, strings.ToLower(s))
	}
	return out
}

func wait(cond func() bool) error {
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			return errors.New("not within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8] + "…"
	}
	return id
}

// recorder keeps the answer's body while passing it on.
type recorder struct {
	http.ResponseWriter
	mu   sync.Mutex
	body strings.Builder
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.body.Write(b)
	r.mu.Unlock()
	return r.ResponseWriter.Write(b)
}

// client calls idem serve.
type client struct{ base string }

type answer struct {
	header http.Header
	body   map[string]any
	raw    string
}

func (a answer) field(path ...string) any {
	var v any = a.body
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	return v
}

func (a answer) str(path ...string) string { s, _ := a.field(path...).(string); return s }
func (a answer) num(path ...string) int64  { f, _ := a.field(path...).(float64); return int64(f) }

// call sends one request; lose drops the answer after the server has
// handled the request, as a client timeout would.
func (c *client) call(token, method, path, key, body string, lose bool) (int, answer, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, answer{}, err
	}
	defer res.Body.Close()
	if lose {
		return 0, answer{}, errors.New("timeout: the answer never arrived")
	}
	b, _ := io.ReadAll(res.Body)
	a := answer{header: res.Header, raw: string(b)}
	_ = json.Unmarshal(b, &a.body)
	return res.StatusCode, a, nil
}
