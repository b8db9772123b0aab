package key

import (
	"bytes"
	"testing"
)

func TestFingerprintOf(t *testing.T) {
	t.Parallel()
	a := FingerprintOf([]byte("POST"), []byte("/charges"), []byte(`{"amount":100}`))
	if a.Version() != FingerprintV1 || len(a) != 33 {
		t.Fatalf("version %d len %d", a.Version(), len(a))
	}
	// Stable: a change here breaks every stored key, so it is pinned.
	const want = "v1:"
	if s := a.String(); s[:3] != want || len(s) != 3+64 {
		t.Fatalf("String() = %q", s)
	}
	if !bytes.Equal(a, FingerprintOf([]byte("POST"), []byte("/charges"), []byte(`{"amount":100}`))) {
		t.Fatal("not deterministic")
	}
	// Moving a byte between parts changes it.
	if bytes.Equal(FingerprintOf([]byte("ab"), []byte("c")), FingerprintOf([]byte("a"), []byte("bc"))) {
		t.Fatal("part boundaries are not part of the fingerprint")
	}
	if bytes.Equal(FingerprintOf([]byte("a")), FingerprintOf([]byte("a"), nil)) {
		t.Fatal("an empty trailing part is not part of the fingerprint")
	}
}

func TestFingerprintPinned(t *testing.T) {
	t.Parallel()
	// A change here would turn every stored key into a conflict, so the
	// algorithm is pinned: SHA-256("3:abc,"), from printf '3:abc,' | sha256sum.
	got := FingerprintOf([]byte("abc")).String()
	want := "v1:d7863618cccd3bb7b6a1e37bb28ab7d01db8c49467a3e497e630f325b4fabf74"
	if got != want {
		t.Fatalf("FingerprintOf(abc) = %s, want %s", got, want)
	}
}

func FuzzFingerprint(f *testing.F) {
	f.Add([]byte("POST"), []byte(`{"a":1}`), "v1:00ff")
	f.Add([]byte(""), []byte(""), "v0:")
	f.Add([]byte("a:b"), []byte(","), "v256:ab")
	f.Fuzz(func(t *testing.T, a, b []byte, s string) {
		fp := FingerprintOf(a, b)
		back, err := ParseFingerprint(fp.String())
		if err != nil || !bytes.Equal(back, fp) {
			t.Fatalf("round trip of %v: %v, %v", fp, back, err)
		}
		if len(a) > 0 {
			moved := FingerprintOf(a[:len(a)-1], append([]byte{a[len(a)-1]}, b...))
			if bytes.Equal(moved, fp) {
				t.Fatalf("moving a byte across parts kept the fingerprint")
			}
		}
		if p, err := ParseFingerprint(s); err == nil {
			if p.String() != s && p.String() != lowerHex(s) {
				t.Fatalf("ParseFingerprint(%q) = %v, which prints as %q", s, p, p.String())
			}
		}
	})
}

func lowerHex(s string) string { return string(bytes.ToLower([]byte(s))) }
