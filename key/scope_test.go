package key

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestScopeEncodingIsInjective(t *testing.T) {
	t.Parallel()
	// Triples that collide under naive concatenation with a separator.
	scopes := []Scope{
		{"a", "b", "c"},
		{"a:b", "", "c"},
		{"a", "b:c", ""},
		{"a,1:b", "c", "d"},
		{"a", "1:b,c", "d"},
		{"ab", "c", "d"},
		{"a", "bc", "d"},
		{"", "", ""},
		{"a\x00", "b", "c"},
	}
	seen := map[string]Scope{}
	for _, s := range scopes {
		id := s.StoreKey()
		if len(id) != 32 {
			t.Fatalf("store key of %+v is %d bytes", s, len(id))
		}
		if prev, ok := seen[id]; ok {
			t.Fatalf("%+v and %+v share a store key", prev, s)
		}
		seen[id] = s
		got, err := DecodeScope(s.Encode())
		if err != nil || got != s {
			t.Fatalf("round trip of %+v: %+v, %v", s, got, err)
		}
	}
}

func TestScopeValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		s    Scope
		ok   bool
	}{
		{"Valid", Scope{"alice", "POST /charges", "k"}, true},
		{"MaxLen", Scope{"alice", "op", strings.Repeat("k", MaxKeyLen)}, true},
		{"TooLong", Scope{"alice", "op", strings.Repeat("k", MaxKeyLen+1)}, false},
		{"NoKey", Scope{"alice", "op", ""}, false},
		{"NoPrincipal", Scope{"", "op", "k"}, false},
		{"NoOperation", Scope{"alice", "", "k"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidScope)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestDecodeScopeRejectsMalformed(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"", "idem.scope.v1", "idem.scope.v2" + "1:a,1:b,1:c,", "idem.scope.v11:a,1:b,1:c",
		"idem.scope.v11:a,1:b,1:c,x", "idem.scope.v101:a,1:b,1:c,", "idem.scope.v1-1:a,1:b,1:c,",
		"idem.scope.v19:a,1:b,1:c,", "idem.scope.v1:a,1:b,1:c,", "idem.scope.v11:ab1:b,1:c,",
		"idem.scope.v199999999999:a,1:b,1:c,",
	} {
		if s, err := DecodeScope([]byte(in)); err == nil {
			t.Errorf("DecodeScope(%q) = %+v, want error", in, s)
		}
	}
}

// FuzzScopeEncoding: Encode is injective (it round-trips through
// DecodeScope), and DecodeScope accepts only what Encode produces.
func FuzzScopeEncoding(f *testing.F) {
	f.Add("alice", "POST /charges", "k1", []byte("idem.scope.v15:alice,13:POST /charges,2:k1,"))
	f.Add("a:b", "", "c", []byte("idem.scope.v11:a,1:b,1:c,"))
	f.Add("", "1:x,", "\x00", []byte("idem.scope.v1"))
	f.Fuzz(func(t *testing.T, p, o, k string, raw []byte) {
		s := Scope{Principal: p, Operation: o, Key: k}
		got, err := DecodeScope(s.Encode())
		if err != nil || got != s {
			t.Fatalf("round trip of %+v: %+v, %v", s, got, err)
		}
		if d, err := DecodeScope(raw); err == nil && !bytes.Equal(d.Encode(), raw) {
			t.Fatalf("DecodeScope accepted %q, which Encode writes as %q", raw, d.Encode())
		}
	})
}
