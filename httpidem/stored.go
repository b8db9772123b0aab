package httpidem

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
)

// The stored response, version 1, is binary:
//
//	byte    version (1)
//	byte    kind: 1 response, 2 "not stored" marker
//	uint16  status, big-endian
//	uvarint number of header lines (0 for a marker)
//	        each: uvarint name length, name, uvarint value length, value
//	        names in sorted order, one line per value in the order written
//	rest    body (empty for a marker)
//
// A decoder that meets another version refuses it, so a record written by
// a newer idem is never replayed wrongly by an older one.
const (
	encodingV1 byte = 1

	kindResponse byte = 1
	kindMarker   byte = 2
)

// maxStoredHeaderLines bounds what a decoder accepts.
const maxStoredHeaderLines = 1024

var errBadStored = errors.New("httpidem: stored response is malformed or of an unknown version")

// storedResponse is a decoded record.
type storedResponse struct {
	marker bool
	status int
	header http.Header
	body   []byte
}

// encodeResponse encodes status, the header lines of h named in keep
// (sorted) and body.
func encodeResponse(status int, h http.Header, keep []string, body []byte) []byte {
	n, size := 0, 0
	for _, name := range keep {
		for _, v := range h[name] {
			n++
			size += len(name) + len(v) + 2*binary.MaxVarintLen16
		}
	}
	b := make([]byte, 0, 4+binary.MaxVarintLen32+size+len(body))
	b = append(b, encodingV1, kindResponse)
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	b = binary.AppendUvarint(b, uint64(n))
	for _, name := range keep {
		for _, v := range h[name] {
			b = binary.AppendUvarint(b, uint64(len(name)))
			b = append(b, name...)
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, body...)
}

// encodeMarker encodes the "not stored" marker of a response with status.
func encodeMarker(status int) []byte {
	b := []byte{encodingV1, kindMarker}
	b = binary.BigEndian.AppendUint16(b, uint16(status))
	return append(b, 0)
}

// decodeResponse decodes what encodeResponse or encodeMarker wrote.
func decodeResponse(b []byte) (storedResponse, error) {
	if len(b) < 5 || b[0] != encodingV1 || (b[1] != kindResponse && b[1] != kindMarker) {
		return storedResponse{}, errBadStored
	}
	sr := storedResponse{marker: b[1] == kindMarker, status: int(binary.BigEndian.Uint16(b[2:4]))}
	if sr.status < 100 || sr.status > 999 {
		return storedResponse{}, errBadStored
	}
	b = b[4:]
	n, w := binary.Uvarint(b)
	if w <= 0 || n > maxStoredHeaderLines {
		return storedResponse{}, errBadStored
	}
	b = b[w:]
	if n > 0 {
		sr.header = make(http.Header, n)
	}
	prev := ""
	for range n {
		var name, value []byte
		if name, b = field(b); name == nil || len(name) == 0 {
			return storedResponse{}, errBadStored
		}
		if value, b = field(b); value == nil {
			return storedResponse{}, errBadStored
		}
		if string(name) < prev {
			return storedResponse{}, errBadStored
		}
		prev = string(name)
		sr.header[prev] = append(sr.header[prev], string(value))
	}
	if sr.marker {
		if n != 0 || len(b) != 0 {
			return storedResponse{}, errBadStored
		}
		return sr, nil
	}
	sr.body = b
	return sr, nil
}

// field reads a uvarint length and that many bytes. It returns nil (and
// not an empty slice) when b is too short.
func field(b []byte) ([]byte, []byte) {
	l, w := binary.Uvarint(b)
	if w <= 0 || l > uint64(len(b)-w) {
		return nil, b
	}
	b = b[w:]
	return b[:l:l], b[l:]
}

// storable reports whether a response with this status is stored: 2xx; 3xx
// (a redirect after a POST, 303 See Other above all, answers an effect that
// happened: running the request again would repeat it); and 4xx except 408,
// 409, 425 and 429 (the client may well succeed by sending the same request
// again).
func storable(status int) bool {
	switch {
	case status >= 200 && status <= 399:
		return true
	case status >= 400 && status <= 499:
		return !slices.Contains([]int{http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests}, status)
	}
	return false
}
