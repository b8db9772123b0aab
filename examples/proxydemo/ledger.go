package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ledger is the demo's upstream: a deliberately non-idempotent API that
// records every POST it gets as a new effect (a charge) and answers 201
// with it. Each call takes 50 ms, as a real API's work would, so that
// concurrent duplicates overlap at the proxy; any duplicate that got
// through would show in Effects.
type ledger struct {
	srv *http.Server
	url string

	mu      sync.Mutex
	effects []effect
}

// effect is one call the ledger recorded, and the JSON body of its answer.
type effect struct {
	ID        string `json:"effect_id"`
	Seq       int    `json:"seq"`
	Principal string `json:"principal"` // Authorization without "Bearer "
	Key       string `json:"key"`       // the Idempotency-Key the proxy forwarded
	BodyHash  string `json:"body_hash"` // hex SHA-256 of the request body
}

// startLedger serves a ledger on addr (port 0 picks a free one).
func startLedger(addr string) (*ledger, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &ledger{url: "http://" + ln.Addr().String()}
	l.srv = &http.Server{Handler: l, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = l.srv.Serve(ln) }()
	return l, nil
}

// URL is the ledger's base URL.
func (l *ledger) URL() string { return l.url }

// Close stops serving.
func (l *ledger) Close() error { return l.srv.Close() }

// Effects returns the effects recorded so far, in order.
func (l *ledger) Effects() []effect {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.effects)
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	time.Sleep(50 * time.Millisecond) // the work; it goes on if the client leaves
	sum := sha256.Sum256(body)
	e := effect{
		Principal: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
		Key:       r.Header.Get("Idempotency-Key"),
		BodyHash:  hex.EncodeToString(sum[:]),
	}
	l.mu.Lock()
	e.Seq = len(l.effects) + 1
	e.ID = "e-" + strconv.Itoa(e.Seq)
	l.effects = append(l.effects, e)
	l.mu.Unlock()
	b, _ := json.Marshal(e) // strings and an int always marshal
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(append(b, '\n'))
}
