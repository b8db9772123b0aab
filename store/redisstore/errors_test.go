package redisstore

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/store"
)

func TestInterpretError(t *testing.T) {
	t.Parallel()
	other := errors.New("dial tcp: connection refused")
	for _, tc := range []struct {
		name string
		in   error
		want error
	}{
		{"Nil", nil, nil},
		{"NilReply", redis.Nil, store.ErrNotFound},
		{"Fenced", serverError(fencedPrefix + " fence does not match a held claim"), store.ErrFenced},
		{"OtherReply", serverError("OOM command not allowed"), nil},
		{"Network", other, other},
		{"Context", context.DeadlineExceeded, context.DeadlineExceeded},
	} {
		got := interpretError(tc.in)
		switch {
		case tc.in == nil && got != nil:
			t.Errorf("%s: interpretError(nil) = %v", tc.name, got)
		case tc.want != nil && !errors.Is(got, tc.want):
			t.Errorf("%s: interpretError(%v) = %v, want %v", tc.name, tc.in, got, tc.want)
		case tc.want == nil && tc.in != nil && (errors.Is(got, store.ErrFenced) || errors.Is(got, store.ErrNotFound)):
			t.Errorf("%s: interpretError(%v) = %v, want no sentinel", tc.name, tc.in, got)
		}
	}
}
