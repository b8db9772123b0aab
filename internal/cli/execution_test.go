package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/serve"
	"github.com/idemhq/idem/store/sqlitestore"
)

// An operator retries, cancels and starts over a workflow's run from a
// terminal, on the service's store; each action is in the run's events
// with who took it.
func TestExecutionActions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "idem.db")
	db := "sqlite:" + path
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity) // declined: the run fails
	}))
	defer target.Close()
	file := filepath.Join(dir, "checkout.yaml")
	def := strings.Replace(strings.Replace(checkoutYAML, "https://api.payments.example", target.URL, 1),
		`        Authorization: "Bearer {{ secrets.PAYMENTS_KEY }}"`+"\n", "", 1)
	if err := os.WriteFile(file, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	var created struct{ Token string }
	for _, step := range [][]string{{"migrate", "--store", db}, {"app", "create", "shop", "--store", db}, {"workflow", "apply", file, "--app", "shop", "--store", db}} {
		code, out, errOut := runStdin(t, "", step...)
		if code != 0 {
			t.Fatalf("%v: %d %s %s", step, code, out, errOut)
		}
		if step[0] == "app" {
			_ = json.Unmarshal([]byte(out), &created)
		}
	}
	// The service runs the trigger until it fails, then stops.
	sdb, err := sqlitestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	s, err := sqlitestore.New(sdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := serve.New(s, &serve.Config{ClaimPoll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.RunWorkflows(ctx) }()
	tok := created.Token
	hs := httptest.NewServer(srv)
	defer hs.Close()
	req, _ := http.NewRequest("POST", hs.URL+"/v1/workflows/checkout/trigger", strings.NewReader(`{"order": {"id": "o-1"}}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var trig struct{ Execution struct{ ID string } }
	_ = json.NewDecoder(res.Body).Decode(&trig)
	res.Body.Close()
	id := trig.Execution.ID
	if res.StatusCode != 201 || id == "" {
		t.Fatalf("trigger: %d", res.StatusCode)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e, err := s.GetExecution(ctx, "shop", id)
		if err == nil && e.Status == 5 { // FAILED
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not fail: %+v %v", e, err)
		}
	}
	cancel()
	<-done

	act := func(args ...string) (int, string, string) {
		return runStdin(t, "", append(append([]string{"execution"}, args...), "--store", db, "--operator", "alice")...)
	}
	if code, out, errOut := act("retry", id, "--app", "shop"); code != 0 || !strings.Contains(out, `"status":"QUEUED"`) {
		t.Fatalf("retry: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := act("cancel", id, "--app", "shop"); code != 0 || !strings.Contains(out, `"status":"CANCELED"`) {
		t.Fatalf("cancel: %d %s %s", code, out, errOut)
	}
	code, out, errOut := act("start-over", id, "--app", "shop", "--latest")
	if code != 0 || !strings.Contains(out, `"number":2`) || !strings.Contains(out, `"workflow":"checkout"`) {
		t.Fatalf("start over: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := act("start-over", id, "--app", "shop"); code != 1 || !strings.Contains(errOut, "illegal transition") {
		t.Fatalf("a second start over of the old run: %d %s", code, errOut)
	}
	if code, _, _ := act("retry", id, "--app", "nobody"); code != 1 {
		t.Fatalf("another application's run: %d", code)
	}
	evs, err := s.ListEvents(context.Background(), "shop", id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var audit []string
	for _, ev := range evs {
		if ev.Type == "idem.execution.operator" {
			var d struct{ Action, Actor string }
			_ = json.Unmarshal(ev.Data, &d)
			audit = append(audit, d.Action+" by "+d.Actor)
		}
	}
	if len(audit) != 3 || audit[0] != "retry by cli operator:alice" || audit[1] != "cancel by cli operator:alice" || !strings.HasPrefix(audit[2], "start-over:") {
		t.Fatalf("audit %q", audit)
	}
}
