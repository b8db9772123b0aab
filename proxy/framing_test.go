package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemhq/idem/problem"
)

// smuggled is a request hidden in a body that a hop in front of the proxy
// reads by its Content-Length and net/http by its Transfer-Encoding.
const (
	smuggled     = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	smuggledBody = "0\r\n\r\n" + smuggled
)

var smuggledLength = strconv.Itoa(len(smuggledBody))

// TestRequestSmuggling: a request with both Content-Length and
// Transfer-Encoding gets 400 request-framing-ambiguous and its connection is
// closed; neither it nor the request in its body reaches the upstream.
func TestRequestSmuggling(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, request string }{
		{"LengthFirst", "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\nIdempotency-Key: s-1\r\n" +
			"Content-Length: " + smuggledLength + "\r\nTransfer-Encoding: chunked\r\n\r\n" + smuggledBody},
		{"EncodingFirstLowerCase", "POST /charges HTTP/1.1\r\nhost: x\r\nauthorization: Bearer alice\r\nidempotency-key: s-1\r\n" +
			"transfer-encoding: Chunked\r\ncontent-length: " + smuggledLength + "\r\n\r\n" + smuggledBody},
		{"Unguarded", "GET /charges HTTP/1.1\r\nHost: x\r\n" +
			"Content-Length: " + smuggledLength + "\r\nTransfer-Encoding: chunked\r\n\r\n" + smuggledBody},
		{"HTTP10", "POST /charges HTTP/1.0\r\nConnection: keep-alive\r\nAuthorization: Bearer alice\r\n" +
			"Content-Length: " + smuggledLength + "\r\nTransfer-Encoding: chunked\r\n\r\n" + smuggledBody},
		// Pipelined after a harmless request: once the connection shows an
		// ambiguous request, nothing more on it is served.
		{"Pipelined", "GET /first HTTP/1.1\r\nHost: x\r\n\r\n" +
			"POST /charges HTTP/1.1\r\nHost: x\r\nContent-Length: " + smuggledLength + "\r\nTransfer-Encoding: chunked\r\n\r\n" + smuggledBody},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, up, _, _ := setup(t, "Memory", nil)
			c := f.dial(t)
			r := c.exchange(t, tt.request).expect(t, http.StatusBadRequest, problem.SlugFramingAmbiguous)
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("Content-Type %q", ct)
			}
			c.expectClosed(t)
			if n := up.calls.Load(); n != 0 {
				t.Fatalf("the upstream saw %d requests, the last %s %s", n, up.last().method, up.last().path)
			}
		})
	}

	t.Run("AfterOthers", func(t *testing.T) {
		t.Parallel()
		// Bodies of every framing on one connection are followed to the
		// next request, and a body that only looks like headers is a body.
		f, up, _, _ := setup(t, "Memory", nil)
		c := f.dial(t)
		looksLike := "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
		c.exchange(t, "POST /a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\nIdempotency-Key: a-1\r\n"+
			"Content-Length: "+strconv.Itoa(len(looksLike))+"\r\n\r\n"+looksLike).expect(t, http.StatusCreated, "")
		c.exchange(t, "POST /b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\nIdempotency-Key: b-1\r\n"+
			"Transfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n").expect(t, http.StatusCreated, "")
		c.exchange(t, "GET /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc").expect(t, http.StatusCreated, "")
		c.exchange(t, "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice\r\n"+
			"Content-Length: "+smuggledLength+"\r\nTransfer-Encoding: chunked\r\n\r\n"+smuggledBody).expect(t, http.StatusBadRequest, problem.SlugFramingAmbiguous)
		c.expectClosed(t)
		up.mu.Lock()
		defer up.mu.Unlock()
		var got []string
		for _, s := range up.seen {
			got = append(got, s.method+" "+s.path+" "+string(s.body))
		}
		want := []string{"POST /a " + looksLike, "POST /b hello world", "GET /c abc"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("the upstream saw %q, want %q", got, want)
		}
	})
}

// TestFramingFollows: the scanner reads a stream the same whether it comes
// whole or a byte at a time, ends between requests after complete ones, and
// refuses what it cannot follow.
func TestFramingFollows(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, stream string
		want         *framingError
	}{
		{"NoBody", "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n\r\n", nil},
		{"BareLF", "GET / HTTP/1.1\nHost: x\n\n", nil},
		{"Length", "POST / HTTP/1.1\r\nContent-Length:  0005 \r\n\r\nhello", nil},
		{"LengthTwiceSame", "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", nil},
		{"Chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nA;x=\"y\"\r\n0123456789\r\n0\r\n\r\n", nil},
		{"ChunkedTrailers", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nA: 1\r\n b\r\n\r\n", nil},
		{"HTTP10IgnoresEncoding", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\nGET / HTTP/1.1\r\n\r\n", nil},
		{"FoldedOther", "GET / HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n", nil},
		{"HTTP2Preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04", nil},
		{"Both", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", errAmbiguous},
		{"BothSecond", "GET / HTTP/1.1\r\n\r\nPOST / HTTP/1.1\r\nTransfer-Encoding: x\r\nContent-Length: 0\r\n\r\n", errAmbiguous},
		{"FoldedLength", "POST / HTTP/1.1\r\nContent-Length: 1\r\n 0\r\n\r\n", errLost},
		{"FoldedEncoding", "POST / HTTP/1.1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", errLost},
		{"LengthsDiffer", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", errLost},
		{"LengthNotNumber", "POST / HTTP/1.1\r\nContent-Length: 1,1\r\n\r\n", errLost},
		{"LengthTooLarge", "POST / HTTP/1.1\r\nContent-Length: 9223372036854775808\r\n\r\n", errLost},
		{"ChunkSizeBareLF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n", errLost},
		{"ChunkDataUnterminated", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n", errLost},
		{"ChunkSizeNotHex", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\ng\r\n", errLost},
		{"ChunkSizeTooLong", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n", errLost},
		{"LineWithoutColon", "GET / HTTP/1.1\r\nHost\r\n\r\n", errLost},
		{"EmptyRequestLine", "\r\nGET / HTTP/1.1\r\n\r\n", errLost},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var whole, bytewise framing
			whole.startRequest()
			bytewise.startRequest()
			got := whole.feed([]byte(tt.stream))
			var gotBytewise *framingError
			for i := 0; i < len(tt.stream) && gotBytewise == nil; i++ {
				gotBytewise = bytewise.feed([]byte(tt.stream[i : i+1]))
			}
			if got != tt.want || gotBytewise != tt.want {
				t.Fatalf("whole: %v, a byte at a time: %v; want %v", got, gotBytewise, tt.want)
			}
			if tt.want == nil && (whole.state != bytewise.state || whole.state != stRequestLine && whole.state != stDone) {
				t.Fatalf("ended in state %d (a byte at a time: %d), want between requests", whole.state, bytewise.state)
			}
		})
	}
}
