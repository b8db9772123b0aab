package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const checkoutYAML = `
vertices:
  - id: start
    type: ENTRY_POINT
    config: {idempotencyFields: order.id}
  - id: charge
    type: GATEWAY
    config:
      method: POST
      url: https://api.payments.example/v1/charges
      headers:
        Idempotency-Key: "= 'charge-' & payload.order.id"
        Authorization: "Bearer {{ secrets.PAYMENTS_KEY }}"
  - {id: done, type: END}
edges:
  - {from: start, to: charge}
  - {from: charge, to: done}
`

func TestWorkflowValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "checkout.yaml")
	if err := os.WriteFile(good, []byte(checkoutYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(checkoutYAML, "payload.order.id\"", "$now()\"", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string // a part of it
	}{
		{"Valid", "", []string{good}, 0, "valid (3 vertices, 2 edges)"},
		{"ValidWithItsSecret", "", []string{good, "--secret", "PAYMENTS_KEY"}, 0, "valid"},
		{"UndefinedSecret", "", []string{good, "--secret", "OTHER"}, 1, `/vertices/1/config/headers/Authorization: no secret "PAYMENTS_KEY"`},
		{"ReadsTheClock", "", []string{bad}, 1, "/vertices/1/config/headers/Idempotency-Key: keytemplate: not deterministic"},
		{"Stdin", checkoutYAML, []string{"-"}, 0, "valid"},
		{"NoSuchFile", "", []string{filepath.Join(dir, "none.yaml")}, 2, ""},
		{"NoFile", "", []string{}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runStdin(t, tc.stdin, append([]string{"workflow", "validate"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out, tc.stdout) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, errOut, tc.code, tc.stdout)
			}
		})
	}
}

// apply stores a checked definition as the application's workflow's next
// version, named after its file; the same definition again is no new one.
func TestWorkflowApply(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "idem.db")
	file := filepath.Join(dir, "checkout.yaml")
	if err := os.WriteFile(file, []byte(checkoutYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][]string{{"migrate", "--store", db}, {"app", "create", "shop", "--store", db}} {
		if code, out, errOut := runStdin(t, "", step...); code != 0 {
			t.Fatalf("%v: %d %s %s", step, code, out, errOut)
		}
	}
	apply := func(args ...string) (int, string, string) {
		return runStdin(t, "", append([]string{"workflow", "apply", "--store", db}, args...)...)
	}
	// Its secret first: a definition may name only the application's.
	if code, out, _ := apply(file, "--app", "shop"); code != 1 || !strings.Contains(out, `no secret "PAYMENTS_KEY"`) {
		t.Fatalf("before its secret is set: %d %s", code, out)
	}
	if code, out, errOut := runStdin(t, "sk_test_123\n", "secret", "set", "PAYMENTS_KEY", "--app", "shop", "--store", db); code != 0 || strings.Contains(out, "sk_test") {
		t.Fatalf("secret set: %d %s %s", code, out, errOut)
	}
	if code, out, _ := runStdin(t, "", "secret", "list", "--app", "shop", "--store", db); code != 0 || out != `{"names":["PAYMENTS_KEY"]}`+"\n" {
		t.Fatalf("secret list: %d %q", code, out)
	}
	if code, _, _ := runStdin(t, "", "secret", "set", "PAYMENTS_KEY", "--app", "shop", "--store", db); code != 2 {
		t.Fatalf("secret set with nothing on stdin: %d", code)
	}
	if code, out, errOut := apply(file, "--app", "shop"); code != 0 || !strings.Contains(out, `"created":true`) || !strings.Contains(out, `"name":"checkout"`) || !strings.Contains(out, `"version":1`) {
		t.Fatalf("first apply: %d %s %s", code, out, errOut)
	}
	if code, out, _ := apply(file, "--app", "shop"); code != 0 || !strings.Contains(out, `"created":false`) || !strings.Contains(out, `"version":1`) {
		t.Fatalf("the same again: %d %s", code, out)
	}
	changed := filepath.Join(dir, "changed.yaml")
	if err := os.WriteFile(changed, []byte(strings.Replace(checkoutYAML, "v1/charges", "v2/charges", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := apply(changed, "--app", "shop", "--name", "checkout"); code != 0 || !strings.Contains(out, `"version":2`) {
		t.Fatalf("a changed definition: %d %s", code, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(checkoutYAML, "payload.order.id\"", "$now()\"", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := apply(bad, "--app", "shop", "--name", "checkout"); code != 1 || !strings.Contains(out, "/vertices/1/config/headers/Idempotency-Key") {
		t.Fatalf("an invalid definition: %d %s", code, out)
	}
	if code, _, errOut := apply(file, "--app", "nobody"); code != 1 || !strings.Contains(errOut, "nobody") {
		t.Fatalf("an unknown application: %d %s", code, errOut)
	}
	if code, _, _ := apply(file); code != 2 {
		t.Fatalf("no --app: %d", code)
	}
	// A connection, and a workflow on it.
	conn := filepath.Join(dir, "payments.yaml")
	if err := os.WriteFile(conn, []byte("baseUrl: https://api.payments.example\nauth: {type: bearer, token: '{{ secrets.PAYMENTS_KEY }}'}\nidempotencyKey: '= payload.order.id'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	onConn := filepath.Join(dir, "pay.yaml")
	if err := os.WriteFile(onConn, []byte(strings.Replace(strings.Replace(checkoutYAML, "url: https://api.payments.example/v1/charges", "connection: payments\n      path: /v1/charges", 1),
		`        Idempotency-Key: "= 'charge-' & payload.order.id"`+"\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := apply(onConn, "--app", "shop"); code != 1 || !strings.Contains(out, `/vertices/1/config/connection: no connection "payments"`) {
		t.Fatalf("a workflow on a connection not stored: %d %s", code, out)
	}
	if code, out, errOut := runStdin(t, "", "connection", "apply", conn, "--app", "shop", "--store", db); code != 0 || !strings.Contains(out, `"name":"payments"`) {
		t.Fatalf("connection apply: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := apply(onConn, "--app", "shop"); code != 0 || !strings.Contains(out, `"name":"pay"`) {
		t.Fatalf("a workflow on a stored connection: %d %s %s", code, out, errOut)
	}
}
