package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeDemo runs the README's first command in process: idem serve
// --demo on a fresh SQLite file. A task created with a key runs on the
// demo worker, its retry gets the same task, and its events are numbered
// from 1.
func TestServeDemo(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newLines(), newLines()
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"serve", "--demo", "--migrate", "--store", db, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, stdout, stderr)
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("idem serve exited with %d:\n%s", code, stderr)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("idem serve did not stop:\n%s", stderr)
		}
	}()
	var url, admin, token string
	tokenRE := regexp.MustCompile(`demo application token: (\S+)`)
	deadline := time.After(30 * time.Second)
	for url == "" || token == "" || admin == "" {
		select {
		case line := <-stdout.ch:
			if u, ok := strings.CutPrefix(line, "serve listening on "); ok {
				url = u
			}
			if u, ok := strings.CutPrefix(line, "admin listening on "); ok {
				admin = u
			}
			if m := tokenRE.FindStringSubmatch(line); m != nil {
				token = m[1]
			}
		case code := <-done:
			done <- code
			t.Fatalf("idem serve exited with %d:\n%s", code, stderr)
		case <-deadline:
			t.Fatalf("idem serve did not print its address and token:\n%s", stderr)
		}
	}
	post := func() (int, map[string]map[string]any, string) {
		req, _ := http.NewRequest("POST", url+"/v1/tasks", strings.NewReader(`{"type":"demo","input":{"order":"o-42"}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", "order-42")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var out map[string]map[string]any
		_ = json.Unmarshal(b, &out)
		return res.StatusCode, out, res.Header.Get("Idempotent-Replayed")
	}
	for path, want := range map[string]string{"/readyz": "ok", "/healthz": "ok", "/metrics": "idem_outbox_attempt_duration_seconds"} {
		res, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Fatalf("admin %s: %d %.200s", path, res.StatusCode, b)
		}
	}
	status, first, _ := post()
	if status != 201 {
		t.Fatalf("create: %d %v", status, first)
	}
	exec := first["execution"]["id"].(string)
	get := func(path string) map[string]any {
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(res.Body)
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&out); err != nil {
			t.Fatalf("GET %s: %s", path, b)
		}
		return out
	}
	for i := 0; ; i++ {
		if e := get("/v1/executions/" + exec); e["status"] == "SUCCEEDED" {
			break
		} else if i == 100 {
			t.Fatalf("the demo worker did not run the task: %v", e)
		}
		time.Sleep(50 * time.Millisecond)
	}
	status, again, replayed := post()
	if status != 201 || replayed != "true" || again["execution"]["id"] != exec {
		t.Fatalf("retry: %d %v replayed %q", status, again, replayed)
	}
	items, _ := get("/v1/executions/" + exec + "/events")["items"].([]any)
	if len(items) != 4 || items[3].(map[string]any)["type"] != "idem.execution.succeeded" || items[0].(map[string]any)["sequence"] != "1" {
		t.Fatalf("events %v", items)
	}
}

// TestAppCommands creates, lists, rotates and disables an application and
// makes a worker token, each printing one JSON object.
func TestAppCommands(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run("migrate", "--store", db); code != 0 {
		t.Fatalf("migrate: %d %s", code, out)
	}
	code, out := run("app", "create", "orders", "--callback", "https://orders.example/cb", "--store", db)
	var created map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil || created["token"] == "" || created["callbackSecret"] == "" || created["name"] != "orders" {
		t.Fatalf("app create: %d %s", code, out)
	}
	if code, out := run("app", "create", "orders", "--store", db); code != 1 || !strings.Contains(out, "exists already") {
		t.Fatalf("app create twice: %d %s", code, out)
	}
	if code, out := run("app", "create", "Orders!", "--store", db); code != 2 {
		t.Fatalf("bad name: %d %s", code, out)
	}
	if code, out := run("app", "rotate", "orders", "--store", db); code != 0 || !strings.Contains(out, `"token"`) {
		t.Fatalf("rotate: %d %s", code, out)
	}
	if code, out := run("app", "disable", "orders", "--store", db); code != 0 {
		t.Fatalf("disable: %d %s", code, out)
	}
	code, out = run("app", "list", "--store", db)
	if code != 0 || !strings.Contains(out, `"disabled":true`) || !strings.Contains(out, `"tokens":2`) || strings.Contains(out, created["token"]) {
		t.Fatalf("list: %d %s", code, out)
	}
	if code, out := run("worker-token", "create", "--store", db); code != 0 || !strings.Contains(out, `{"token":"`) {
		t.Fatalf("worker-token create: %d %s", code, out)
	}
	if code, out := run("serve", "--store", db, "--lease", "0s"); code != 2 || !strings.Contains(out, "--lease") {
		t.Fatalf("serve with no lease: %d %s", code, out)
	}
}
