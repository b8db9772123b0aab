package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runStdin runs the idem command in-process with stdin (Main takes none:
// the real process's is cobra's default).
func runStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code, _ := execute(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

const seedIntent = `{"payload": {"order": {"id": "o-42"}}, "target": "payments"}`

func TestTemplateEval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, stdin string
		args        []string
		code        int
		stdout      string
		stderr      string // a part of it
	}{
		{"Seed", seedIntent, []string{"--template", "= 'charge-' & payload.order.id"}, 0, "charge-o-42\n", ""},
		{"WithoutMarker", seedIntent, []string{"--template", "'charge-' & payload.order.id"}, 0, "charge-o-42\n", ""},
		{"Operation", seedIntent, []string{"--template", "= payload.order.id", "--operation", "ship"}, 0, "ship-o-42\n", ""},
		{"OperationAndLiteral", seedIntent, []string{"--template", "= 'charge-' & payload.order.id", "--operation", "charge"}, 0, "charge-o-42\n", ""},
		{"ReadsTarget", seedIntent, []string{"--template", "= 'charge-' & target & '.' & payload.order.id"}, 0, "charge-payments.o-42\n", ""},
		{"MissingField", `{"payload": {"order": {}}}`, []string{"--template", "= 'charge-' & payload.order.id"}, 1, "", "missing field: payload.order.id is not in the input"},
		{"NullField", `{"payload": {"order": {"id": null}}}`, []string{"--template", "= 'charge-' & payload.order.id"}, 1, "", "payload.order.id is null"},
		{"NotString", `{"payload": {"order": {"id": ["a", "b"]}}}`, []string{"--template", "= 'charge-' & payload.order.id"}, 1, "", "not a string"},
		{"BadKey", `{"payload": {"order": {"id": "o 42"}}}`, []string{"--template", "= 'charge-' & payload.order.id"}, 1, "", "not a valid Idempotency-Key: space"},
		{"NotJSON", `{"payload":`, []string{"--template", "= 'charge-' & payload.order.id"}, 1, "", "bad input: not JSON"},
		{"EmptyStdin", ``, []string{"--template", "= 'charge-' & payload.order.id"}, 1, "", "bad input"},
		{"TooLarge", seedIntent, []string{"--template", "= 'charge-' & payload.order.id", "--max-input-bytes", "10"}, 1, "", "more than 10"},
		{"EvalError", seedIntent, []string{"--template", "= 'charge-' & $error('stop here')"}, 2, "", "reads nothing from the intent"},
		{"EvalErrorReading", seedIntent, []string{"--template", "= payload.order.id ? $error('stop here') : 'x'", "--operation", "charge"}, 1, "", "stop here"},
		// Refused when defined: exit 2, stdin unread.
		{"SyntaxError", seedIntent, []string{"--template", "= 'charge-' & (payload.order.id"}, 2, "", "syntax error: at byte"},
		{"Clock", seedIntent, []string{"--template", "= 'charge-' & payload.order.id & $now()"}, 2, "", "$now() reads the clock"},
		{"Random", seedIntent, []string{"--template", "= 'charge-' & $string($random())"}, 2, "", "$random() returns a random number"},
		{"ClockInLambda", seedIntent, []string{"--template", "= 'charge-' & $map([1], function($x){ $millis() })"}, 2, "", "$millis() reads the clock"},
		{"NowInStringIsData", seedIntent, []string{"--template", "= 'charge-$now-' & payload.order.id"}, 0, "charge-$now-o-42\n", ""},
		{"Constant", seedIntent, []string{"--template", "= 'charge-o-42'"}, 2, "", "reads nothing from the intent"},
		{"NoOperation", seedIntent, []string{"--template", "= payload.order.id"}, 2, "", "no operation given"},
		{"BadOperation", seedIntent, []string{"--template", "= payload.order.id", "--operation", "Charge"}, 2, "", "bad operation"},
		{"NoTemplate", seedIntent, nil, 2, "", "--template is required"},
		{"BadMaxInput", seedIntent, []string{"--template", "= payload.order.id", "--max-input-bytes", "0"}, 2, "", "--max-input-bytes 0"},
		{"UnknownFlag", seedIntent, []string{"--nope"}, 2, "", "unknown flag"},
		{"Argument", seedIntent, []string{"--template", "= payload.order.id", "extra"}, 2, "", "unexpected argument \"extra\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runStdin(t, tc.stdin, append([]string{"template", "eval"}, tc.args...)...)
			if code != tc.code || stdout != tc.stdout || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("code %d stdout %q stderr %q; want %d %q and stderr with %q", code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestTemplateEvalThroughMain: what needs no stdin goes through Main itself.
func TestTemplateEvalThroughMain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"template", "eval", "--template", "= $millis() & payload.id", "--operation", "charge"}, 2, "idem: --template: keytemplate: not deterministic: $millis() reads the clock"},
		{[]string{"template", "eval", "--template", "= 'x' & (payload.id"}, 2, "syntax error"},
		{[]string{"template", "eval"}, 2, "--template is required"},
		{[]string{"template"}, 2, "missing subcommand: eval"},
	} {
		if code, _, stderr := run(t, tc.args...); code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: code %d stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
	code, out, _ := run(t, "template", "eval", "--help")
	if code != 0 || !strings.Contains(out, "Exit codes:") {
		t.Fatalf("--help: code %d out %q", code, out)
	}
}
