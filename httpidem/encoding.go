package httpidem

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// A replay is sent in the content coding it was stored in, unless the
// retry's Accept-Encoding refuses that coding: then a gzip or deflate body
// is decoded and sent as identity, and any other coding is answered 406
// encoding-not-acceptable (the stored bytes are never re-run to get another
// encoding).

// acceptsEncoding reports whether a request whose Accept-Encoding lines are
// vals accepts the content coding (RFC 9110 §12.5.3): any coding when the
// header is absent; otherwise the coding's own q-value, or that of "*",
// must be above zero.
func acceptsEncoding(vals []string, coding string) bool {
	if len(vals) == 0 {
		return true
	}
	coding = canonicalCoding(coding)
	star, starSeen := false, false
	for _, v := range vals {
		for item := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(item, ";")
			name = canonicalCoding(name)
			if name == "" {
				continue
			}
			ok := qAboveZero(params)
			switch name {
			case coding:
				return ok
			case "*":
				star, starSeen = ok, true
			}
		}
	}
	return starSeen && star
}

func canonicalCoding(c string) string {
	c = strings.ToLower(strings.TrimSpace(c))
	switch c {
	case "x-gzip":
		return "gzip"
	case "x-compress":
		return "compress"
	}
	return c
}

// qAboveZero reads the q parameter of one Accept-Encoding item (absent is
// 1). A malformed q counts as 0: nothing is assumed acceptable.
func qAboveZero(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		name, val, _ := strings.Cut(p, "=")
		if !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		return err == nil && q > 0
	}
	return true
}

var errUndecodable = errors.New("httpidem: stored body's content coding cannot be undone here")

// decodeBody undoes a gzip or deflate content coding, refusing output
// longer than limit.
func decodeBody(coding string, body []byte, limit int64) ([]byte, error) {
	var (
		rd  io.Reader
		err error
	)
	switch canonicalCoding(coding) {
	case "gzip":
		rd, err = gzip.NewReader(bytes.NewReader(body))
	case "deflate":
		rd, err = zlib.NewReader(bytes.NewReader(body))
	default:
		return nil, errUndecodable
	}
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(out)) > limit {
		return nil, errUndecodable
	}
	return out, nil
}

// negotiate adapts a stored response to the retry's Accept-Encoding. It
// returns false when it cannot (the caller answers 406).
func (m *Middleware) negotiate(r *http.Request, sr *storedResponse) bool {
	codings := sr.header.Values("Content-Encoding")
	if len(codings) == 0 || acceptsEncoding(r.Header.Values("Accept-Encoding"), strings.Join(codings, ",")) {
		return true
	}
	if len(codings) != 1 || strings.Contains(codings[0], ",") {
		return false // stacked codings: not undone here
	}
	out, err := decodeBody(codings[0], sr.body, min(8*m.s.MaxResponse, MaxMaxResponse))
	if err != nil {
		return false
	}
	sr.body = out
	sr.header.Del("Content-Encoding")
	return true
}
