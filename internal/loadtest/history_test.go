package loadtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadTornTail: a recorder killed mid-line leaves a torn last line,
// which readers drop; a bad line elsewhere is an error.
func TestReadTornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inv := `{"type":"invoke","op":1,"client":0,"key":"k","principal":"p0","body_hash":"A","t":1}` + "\n"

	recs, err := ReadHistory(write("torn.jsonl", inv+`{"type":"ok","op":1,"cli`))
	if err != nil || len(recs) != 1 || recs[0].Key != "k" {
		t.Fatalf("torn history: %+v, %v", recs, err)
	}
	if _, err := ReadHistory(write("bad.jsonl", "{oops\n"+inv)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad line: %v, want an error naming line 1", err)
	}
	eff := `{"seq":1,"kind":"effect","id":"e1","principal":"p0","key":"k","body_hash":"A"}` + "\n"
	effects, err := ReadEffectsFile(write("effects.jsonl", eff+`{"seq":2,"ki`))
	if err != nil || len(effects) != 1 || effects[0].ID != "e1" {
		t.Fatalf("torn effects: %+v, %v", effects, err)
	}
	effects, err = ReadEffectsFile(write("effects.json", "\n[\n  "+strings.TrimSpace(eff)+"\n]\n"))
	if err != nil || len(effects) != 1 {
		t.Fatalf("effects array: %+v, %v", effects, err)
	}
}
