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
