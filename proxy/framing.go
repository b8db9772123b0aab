package proxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// Listener returns ln with every connection it accepts watched for request
// framing that the proxy and a hop in front of it could read differently
// (request smuggling): a request with both Content-Length and
// Transfer-Encoding. net/http reads such a request by its
// Transfer-Encoding and drops its Content-Length before any handler runs,
// so only the bytes show it: each connection follows its requests' framing
// as the server reads them and scans every header block. Serve the Proxy
// on it with ConnContext as the http.Server's ConnContext; the Proxy then
// answers 400 request-framing-ambiguous and closes the connection (RFC 9112
// §6.1), so that a request hidden in the body is never read.
//
// The connections must carry cleartext HTTP/1.x, as `idem proxy` serves
// (the HTTP/2 preface, and a tunnel after 101 Switching Protocols, end the
// scanning). Served without a Listener, the
// Proxy works but cannot see the two headers together.
func Listener(ln net.Listener) net.Listener { return &listener{Listener: ln} }

// ConnContext is an http.Server ConnContext for a server on a Listener: it
// lets the Proxy find the connection a request came on. A connection from
// another listener leaves ctx as it is.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if wc, ok := c.(*watchedConn); ok {
		return context.WithValue(ctx, connKey{}, wc)
	}
	return ctx
}

type listener struct{ net.Listener }

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	wc := &watchedConn{Conn: c}
	wc.scan.startRequest()
	return wc, nil
}

type connKey struct{}

func connFrom(ctx context.Context) *watchedConn {
	c, _ := ctx.Value(connKey{}).(*watchedConn)
	return c
}

// framingError says why requests on a connection are refused.
type framingError struct{ detail string }

func (e *framingError) Error() string { return e.detail }

var (
	// errAmbiguous: a request had both Content-Length and
	// Transfer-Encoding.
	errAmbiguous = &framingError{"The request has both Content-Length and Transfer-Encoding: " +
		"a hop in front of the proxy may have read its body differently. The connection is closed."}
	// errLost: the scanner could not follow the framing. net/http closes
	// the connection after such bytes too; if it ever did not, the
	// requests that follow could not be vouched for, so they are refused.
	errLost = &framingError{"The request framing on this connection could not be followed. The connection is closed."}
)

// watchedConn is a connection accepted by a Listener. The server reads it
// from one goroutine at a time; the handler reads refused from its own.
type watchedConn struct {
	net.Conn
	mu      sync.Mutex
	scan    framing
	refused atomic.Pointer[framingError]
	// tunnel ends the scanning: the connection switched protocols.
	tunnel atomic.Bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.refused.Load() == nil && !c.tunnel.Load() {
		c.mu.Lock()
		if ferr := c.scan.feed(p[:n]); ferr != nil {
			c.refused.Store(ferr)
		}
		c.mu.Unlock()
	}
	return n, err
}

// CloseWrite half-closes the connection when the underlying one can (a
// *net.TCPConn can): net/http's server sends its FIN that way before it
// closes a connection, so that the client reads the last response instead
// of a reset, and httputil.ReverseProxy passes a tunnel's half-close on.
func (c *watchedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// framing states.
const (
	stRequestLine = iota // in a request line
	stLineStart          // at the start of a header (or trailer) line
	stLineCR             // a line began with CR: only LF may follow
	stName               // in a field name
	stValue              // in a field value that does not matter
	stLength             // in a Content-Length value
	stBody               // in a body of known length
	stChunkSize          // in a chunk-size
	stChunkRest          // in the rest of a chunk-size line
	stSizeLF             // at the LF that ends a chunk-size line
	stChunkData          // in a chunk's data
	stChunkCR            // after a chunk's data: CR
	stChunkLF            // after a chunk's data: LF
	stDone               // HTTP/2: nothing more to follow
)

// The fields whose values matter.
const (
	fieldOther = iota
	fieldLength
	fieldEncoding
)

const (
	nameLength   = "content-length"
	nameEncoding = "transfer-encoding"
)

// framing follows requests on one connection as net/http's server reads
// them (RFC 9112): request line, header block, then a body by
// Transfer-Encoding: chunked (ignored in HTTP/1.0 requests, as net/http
// does), by Content-Length, or none. It keeps no more than a few bytes.
// Where it could read the bytes otherwise than net/http (a folded
// Content-Length, a bad chunk), it gives up with errLost: the requests on
// the connection are refused, rather than served unchecked. Most such
// bytes net/http refuses too, and closes the connection; what net/http
// refuses, it may accept.
type framing struct {
	state int
	// n is what remains of a body or a chunk, or a chunk-size being read.
	n uint64
	// digits counts the chunk-size's hex digits, or whether a
	// Content-Length value has any (and its trailing whitespace, as 2).
	digits int

	// The request line: spaces seen; the method (up to 4 bytes) and the
	// version (up to 10) for the HTTP/1.0 and HTTP/2 preface checks.
	spaces   int
	method   []byte
	version  []byte
	lineLen  int // bytes in the request line but CR
	http10   bool
	trailers bool // reading a chunked body's trailer section

	name      []byte // the field name so far, lower-cased, up to 17 bytes
	field     int    // the field of the last line (for obs-fold)
	hasLength bool
	length    uint64
	encodings int
	buf       [32]byte
}

// feed follows p, the next bytes read from the connection. It returns
// errAmbiguous or errLost once, after which it is not called again.
func (f *framing) feed(p []byte) *framingError {
	for i := 0; i < len(p); {
		switch f.state {
		case stBody, stChunkData:
			k := uint64(len(p) - i)
			if f.n < k {
				k = f.n
			}
			f.n -= k
			i += int(k)
			if f.n == 0 {
				if f.state == stBody {
					f.startRequest()
				} else {
					f.state = stChunkCR
				}
			}
			continue
		case stValue:
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				return nil
			}
			i += j + 1
			f.state = stLineStart
			continue
		case stDone:
			return nil
		}
		if err := f.step(p[i]); err != nil {
			return err
		}
		i++
	}
	return nil
}

// startRequest gets ready for the next request line.
func (f *framing) startRequest() {
	*f = framing{state: stRequestLine, method: f.buf[:0:4], version: f.buf[4:4:14], name: f.buf[14:14:31]}
}

// step follows one byte in the states that look at each byte.
func (f *framing) step(b byte) *framingError {
	switch f.state {
	case stRequestLine:
		return f.requestLine(b)
	case stLineStart:
		switch b {
		case '\n':
			return f.endOfBlock()
		case '\r':
			f.state = stLineCR
		case ' ', '\t':
			// obs-fold: net/http joins the line to the previous field's
			// value, which for the two that matter changes it.
			if f.field != fieldOther {
				return errLost
			}
			f.state = stValue
		default:
			f.name = append(f.name[:0], lower(b))
			f.state = stName
		}
	case stLineCR:
		if b != '\n' {
			return errLost
		}
		return f.endOfBlock()
	case stName:
		switch {
		case b == ':':
			f.field = fieldOther
			switch {
			case f.trailers:
			case string(f.name) == nameLength:
				f.field, f.digits, f.n = fieldLength, 0, 0
				f.state = stLength
				return nil
			case string(f.name) == nameEncoding:
				f.field = fieldEncoding
				f.encodings++
			}
			f.state = stValue
		case b == '\n':
			return errLost // a line without a colon: net/http refuses it
		case len(f.name) < cap(f.name):
			f.name = append(f.name, lower(b))
		default:
			f.name = f.name[:cap(f.name)]
			f.name[0] = 0 // longer than any name that matters
		}
	case stLength:
		return f.lengthValue(b)
	case stChunkSize:
		if v, ok := unhex(b); ok {
			if f.digits == 16 {
				return errLost
			}
			f.n, f.digits = f.n<<4|v, f.digits+1
			return nil
		}
		if f.digits == 0 {
			return errLost
		}
		f.state = stChunkRest
		return f.step(b)
	case stChunkRest:
		// A chunk-size line ends in CRLF, with no other CR (as net/http
		// checks); the extension before it does not matter.
		switch b {
		case '\r':
			f.state = stSizeLF
		case '\n':
			return errLost
		}
	case stSizeLF:
		switch {
		case b != '\n':
			return errLost
		case f.n == 0: // the last chunk: trailer fields follow
			f.trailers = true
			f.state = stLineStart
		default:
			f.state = stChunkData
		}
	case stChunkCR:
		if b != '\r' {
			return errLost
		}
		f.state = stChunkLF
	case stChunkLF:
		if b != '\n' {
			return errLost
		}
		f.state, f.n, f.digits = stChunkSize, 0, 0
	}
	return nil
}

// requestLine follows "METHOD SP TARGET SP VERSION" up to its LF.
func (f *framing) requestLine(b byte) *framingError {
	switch {
	case b == '\n':
		if f.lineLen == 0 {
			return errLost
		}
		v := bytes.TrimSuffix(f.version, []byte{'\r'})
		if string(f.method) == "PRI" && string(v) == "HTTP/2.0" {
			f.state = stDone // the HTTP/2 preface: frames follow
			return nil
		}
		f.http10 = string(v) == "HTTP/1.0"
		f.state = stLineStart
		return nil
	case b == ' ' && f.spaces < 2:
		f.spaces++
	case f.spaces == 0:
		if len(f.method) < cap(f.method) {
			f.method = append(f.method, b)
		} else {
			f.method[0] = 0 // longer than "PRI"
		}
	case f.spaces == 2:
		if len(f.version) < cap(f.version) {
			f.version = append(f.version, b)
		} else {
			f.version[0] = 0 // longer than any version that matters
		}
	}
	if b != '\r' {
		f.lineLen++
	}
	return nil
}

// lengthValue follows a Content-Length value: OWS, decimal digits, OWS (as
// net/http, which also trims a CR).
func (f *framing) lengthValue(b byte) *framingError {
	switch {
	case b >= '0' && b <= '9' && f.digits < 2:
		if f.n > (1<<63-1-uint64(b-'0'))/10 {
			return errLost
		}
		f.n, f.digits = f.n*10+uint64(b-'0'), 1
	case b == ' ' || b == '\t' || b == '\r':
		if f.digits == 1 {
			f.digits = 2
		}
	case b == '\n':
		if f.digits == 0 || f.hasLength && f.length != f.n {
			return errLost // empty, or differing lengths: net/http refuses both
		}
		f.hasLength, f.length = true, f.n
		f.state = stLineStart
	default:
		return errLost
	}
	return nil
}

// endOfBlock ends a header block (or a trailer section): the body follows.
func (f *framing) endOfBlock() *framingError {
	switch {
	case f.trailers:
		f.startRequest()
	case f.hasLength && f.encodings > 0:
		return errAmbiguous
	case f.encodings > 0 && !f.http10:
		// net/http accepts only "chunked", once; anything else is
		// refused and the connection closed.
		f.state, f.n, f.digits = stChunkSize, 0, 0
	case f.hasLength && f.length > 0:
		f.state, f.n = stBody, f.length
	default:
		f.startRequest()
	}
	return nil
}

func lower(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

func unhex(b byte) (uint64, bool) {
	switch {
	case b >= '0' && b <= '9':
		return uint64(b - '0'), true
	case b >= 'a' && b <= 'f':
		return uint64(b-'a') + 10, true
	case b >= 'A' && b <= 'F':
		return uint64(b-'A') + 10, true
	}
	return 0, false
}
