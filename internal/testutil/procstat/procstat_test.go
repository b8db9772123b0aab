package procstat

import "testing"

func TestRSSMiB(t *testing.T) {
	before, err := RSSMiB()
	if err != nil || before <= 0 {
		t.Fatalf("RSSMiB = %v, %v", before, err)
	}
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = 1
	}
	after, err := RSSMiB()
	if err != nil || after < before+32 {
		t.Fatalf("after touching 64 MiB: %.1f MiB, before %.1f", after, before)
	}
	_ = b[len(b)-1]
}
