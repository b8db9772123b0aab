package loadtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// Record types, the "type" field of a history line.
const (
	// TypeInvoke is written before a request is sent.
	TypeInvoke = "invoke"
	// TypeOK means a response (status and whole body) was received.
	TypeOK = "ok"
	// TypeFail means the request definitely did not reach the target: no
	// request header was ever written (dial refused, dial timeout).
	TypeFail = "fail"
	// TypeInfo means the outcome is indeterminate: the request may have been
	// delivered and executed but its answer was lost (timeout, reset, cut
	// body, cancel after sending).
	TypeInfo = "info"
)

// Phases, the "phase" field of a history line.
const (
	PhaseMain  = "main"
	PhaseDrain = "drain"
)

// Record is one line of a history file. An operation is an invoke line and,
// later, one completion line (ok, fail or info) with the same Op. An invoke
// with no completion (the recorder died) is read as info.
//
// Zero-valued optional fields are left out of the JSON.
type Record struct {
	// Type is invoke, ok, fail or info.
	Type string `json:"type"`
	// Op pairs an invoke with its completion; unique within a history.
	Op int64 `json:"op"`
	// Client is the number of the client (goroutine) that sent it; a
	// client has at most one operation in flight.
	Client int `json:"client"`
	// Target is the index of the target URL it was sent to (RunConfig.Targets).
	Target int `json:"target,omitempty"`
	// Key is the Idempotency-Key sent.
	Key string `json:"key"`
	// Principal is the principal's name (p0, p1, ...), not the header value.
	Principal string `json:"principal"`
	// BodyHash is the hex SHA-256 of the request body.
	BodyHash string `json:"body_hash"`
	// T is monotonic nanoseconds since the run started: before sending
	// for invoke, after the body was read (or the error seen) otherwise.
	T int64 `json:"t"`
	// Status is the HTTP status (ok; sometimes info when the body was cut).
	Status int `json:"status,omitempty"`
	// RespHash is the hex SHA-256 of the response body.
	RespHash string `json:"resp_hash,omitempty"`
	// Replayed is true when the response carried Idempotent-Replayed: true.
	Replayed bool `json:"replayed,omitempty"`
	// ProblemType is the "type" member of an application/problem+json body.
	ProblemType string `json:"problem_type,omitempty"`
	// RetryAfter is the Retry-After header as received.
	RetryAfter string `json:"retry_after,omitempty"`
	// Effect is the "effect_id" member of a JSON response body (the ledger's
	// answer), used to detect responses that cross scopes.
	Effect string `json:"effect,omitempty"`
	// Truncated is true when the response body exceeded the run's limit:
	// RespHash then covers only the first MaxResponseBody bytes.
	Truncated bool `json:"truncated,omitempty"`
	// Phase is main or drain.
	Phase string `json:"phase,omitempty"`
	// Error describes a transport error (fail, info).
	Error string `json:"error,omitempty"`
}

// historyWriter appends records as JSON lines from one goroutine, so that
// clients only pay for a channel send. Close flushes and fsyncs.
type historyWriter struct {
	ch   chan Record
	done chan struct{}
	f    *os.File
	err  error // set by the loop, read after done
}

// historyBuffer is how many records may wait for the writer before clients
// block.
const historyBuffer = 4096

func newHistoryWriter(path string) (*historyWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	w := &historyWriter{ch: make(chan Record, historyBuffer), done: make(chan struct{}), f: f}
	go w.loop()
	return w, nil
}

func (w *historyWriter) loop() {
	defer close(w.done)
	bw := bufio.NewWriterSize(w.f, 64<<10)
	enc := json.NewEncoder(bw)
	for r := range w.ch {
		if w.err != nil {
			continue // keep draining so that senders never block forever
		}
		if err := enc.Encode(r); err != nil {
			w.err = err
			continue
		}
		// Flush when the queue is momentarily empty, so that a reader (or a
		// crash) sees recent lines without a write per record.
		if len(w.ch) == 0 {
			w.err = bw.Flush()
		}
	}
	if w.err == nil {
		w.err = bw.Flush()
	}
}

// add queues r. It must not be called after close.
func (w *historyWriter) add(r Record) { w.ch <- r }

// close stops the writer, flushes, fsyncs and closes the file.
func (w *historyWriter) close() error {
	close(w.ch)
	<-w.done
	err := w.err
	if serr := w.f.Sync(); err == nil {
		err = serr
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// ReadHistory reads a history file written by Run. A torn last line (the
// recorder was killed while writing it) is ignored; a bad line elsewhere is
// an error.
func ReadHistory(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	var recs []Record
	err = readJSONLines(f, func(line []byte) error {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", path, err)
	}
	return recs, nil
}

// errTorn marks a line that failed to parse; readJSONLines forgives it only
// when it is the last line and has no newline.
var errTorn = errors.New("torn line")

// readJSONLines calls fn for each non-empty line of r. A last line without a
// newline that fn rejects is dropped (torn by a crash).
func readJSONLines(r io.Reader, fn func(line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		complete := bytes.HasSuffix(line, []byte("\n"))
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if ferr := fn(trimmed); ferr != nil {
				if !complete {
					return nil // torn tail
				}
				return fmt.Errorf("line %d: %w", n, ferr)
			}
		}
		if err != nil { // io.EOF
			return nil
		}
	}
}

// syncLog appends lines to a file with group commit: one goroutine writes
// and fsyncs whatever accumulated, then wakes every waiter of that batch.
type syncLog struct {
	f       *os.File
	mu      sync.Mutex
	buf     []byte
	waiters []chan error
	closed  bool
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func openSyncLog(path string) (*syncLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	l := &syncLog{f: f, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.loop()
	return l, nil
}

// append queues line (which must end in a newline); the returned channel
// receives the result of its fsync.
func (l *syncLog) append(line []byte) <-chan error {
	ch := make(chan error, 1)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ch <- errLogClosed
		return ch
	}
	l.buf = append(l.buf, line...)
	l.waiters = append(l.waiters, ch)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return ch
}

func (l *syncLog) loop() {
	defer close(l.done)
	for {
		select {
		case <-l.kick:
			l.flush()
		case <-l.stop:
			l.flush()
			return
		}
	}
}

func (l *syncLog) flush() {
	l.mu.Lock()
	buf, waiters := l.buf, l.waiters
	l.buf, l.waiters = nil, nil
	l.mu.Unlock()
	if len(waiters) == 0 {
		return
	}
	_, err := l.f.Write(buf)
	if err == nil {
		err = l.f.Sync()
	}
	for _, w := range waiters {
		w <- err
	}
}

var errLogClosed = errors.New("effect log closed")

func (l *syncLog) close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	return l.f.Close()
}

// slug returns the last path segment of a problem type URI ("…/request-in-flight"
// gives "request-in-flight").
func slug(problemType string) string {
	if i := strings.LastIndexAny(problemType, "/#:"); i >= 0 {
		return problemType[i+1:]
	}
	return problemType
}

// Terminal reports whether an answer ends a request: the client would not
// retry it. 2xx, 3xx and 4xx are terminal except 408, 425, 429 and 409 (in
// flight, outcome unknown); a 409 response-not-stored is terminal (the key
// completed, its body was not kept). 5xx are not terminal.
func Terminal(status int, problemType string) bool {
	switch {
	case status == 409:
		return slug(problemType) == "response-not-stored"
	case status == 408 || status == 425 || status == 429:
		return false
	case status >= 500 || status < 100:
		return false
	default:
		return true
	}
}
