package httpidem

import (
	"context"
	"errors"
	"net/http"
	"sync"
)

// stateKey is the context key of a guarded request's state.
type stateKey struct{}

// reqState is what a guarded handler shares with the middleware.
type reqState struct {
	tx any // set before the handler runs, never changed

	mu        sync.Mutex
	unknown   error
	notStored bool
}

func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

func (st *reqState) unknownCause() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.unknown
}

// MarkUnknown tells the middleware, from inside the handler, that the
// outcome of this request is unknown: an external call was sent and its
// answer lost, so the effect may or may not have happened. The handler
// still writes its response (a 502 or 504, say), which is delivered but not
// stored; the claim is kept until its lease ends, so retries meanwhile get
// 409 outcome-unknown with Retry-After, and the first retry after it runs
// the handler again (which must then send the same downstream key).
//
// It must be called before the response body outgrows Config.MaxResponse
// (the key is completed at that point). The first cause is kept. Outside a
// guarded request it does nothing. Safe for concurrent use.
func MarkUnknown(r *http.Request, cause error) {
	st := stateOf(r.Context())
	if st == nil {
		return
	}
	if cause == nil {
		cause = errors.New("outcome unknown")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.unknown == nil {
		st.unknown = cause
	}
}

// MarkNotStored tells the middleware, from inside the handler, that this
// response's body must not be stored although the effect happened: its
// integrity cannot be known (an upstream body delimited by closing the
// connection looks the same whole or cut). The response is delivered; if
// its status is one that is stored, the key is completed with the "not
// stored" marker, so retries get 409 response-not-stored, never a re-run
// nor a replay of a body that may be truncated.
//
// Like MarkUnknown, it must be called before the response body outgrows
// Config.MaxResponse. Outside a guarded request it does nothing. Safe for
// concurrent use.
func MarkNotStored(r *http.Request) {
	if st := stateOf(r.Context()); st != nil {
		st.mu.Lock()
		st.notStored = true
		st.mu.Unlock()
	}
}

func (st *reqState) bodyNotStored() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.notStored
}

// TxFrom returns the store's transaction that a handler behind NewTx runs
// in (*sql.Tx for sqlitestore, pgx.Tx for pgstore). Writes through it
// commit together with the stored response, or not at all. ok is false
// outside such a handler or when TX is not the store's transaction type.
//
// The transaction commits when the handler returns (or when its response
// body outgrows Config.MaxResponse): do not use it after that, nor after
// writing a body that may be that large.
func TxFrom[TX any](ctx context.Context) (TX, bool) {
	if st := stateOf(ctx); st != nil {
		tx, ok := st.tx.(TX)
		return tx, ok
	}
	var zero TX
	return zero, false
}
