package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/key"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The request every client of the demo sends.
const (
	principal     = "shop"
	operation     = "POST /charges"
	defaultAmount = 1000
)

// chargesSchema is the business table, in the same SQLite file as idem's
// records so that a charge and the completion of its key commit together.
// There is deliberately no UNIQUE(order_id): the only thing that keeps a
// retry from adding a second row is idem.
const chargesSchema = `CREATE TABLE IF NOT EXISTS charges (
	id         INTEGER PRIMARY KEY,
	order_id   TEXT    NOT NULL,
	amount     INTEGER NOT NULL,
	charged_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)`

// openLedger opens (creating) the SQLite file at path, applies idem's
// migrations, creates the charges table and returns the handle with a store
// over it. cfg configures the store (nil: the real clock).
func openLedger(ctx context.Context, path string, cfg *sqlitestore.Config) (*sql.DB, *sqlitestore.Store, error) {
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return nil, nil, err
	}
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, nil, err
	}
	if _, err := db.ExecContext(ctx, chargesSchema); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("create charges: %w", err)
	}
	st, err := sqlitestore.New(db, cfg)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, st, nil
}

// chargeBody is the request body of POST /charges.
type chargeBody struct {
	Order  string `json:"order"`
	Amount int64  `json:"amount"`
}

// chargeResponse is what the operation answers, stored by idem and replayed
// byte for byte.
type chargeResponse struct {
	ChargeID string `json:"charge_id"`
	Order    string `json:"order"`
	Amount   int64  `json:"amount"`
	Status   string `json:"status"`
}

// chargeRequest is one HTTP-like request: who sends it, its
// Idempotency-Key, and its body.
type chargeRequest struct {
	Principal string
	Key       string
	Body      []byte
}

// newCharge returns the request that charges amount for order, with the
// idempotency key "charge-<order>".
func newCharge(order string, amount int64) chargeRequest {
	body, err := json.Marshal(chargeBody{Order: order, Amount: amount})
	if err != nil {
		panic(err) // a struct of a string and an int always encodes
	}
	return chargeRequest{Principal: principal, Key: "charge-" + order, Body: body}
}

// keyRequest is what the guard sees: the scope, and a fingerprint of the
// body, so that the same key with another body is a conflict.
func (r chargeRequest) keyRequest() key.Request {
	return key.Request{
		Scope:       key.Scope{Principal: r.Principal, Operation: operation, Key: r.Key},
		Fingerprint: key.FingerprintOf(r.Body),
	}
}

// Crash points: where a child process kills itself (see crash.go).
const (
	afterClaim  = "after-claim"  // inside the operation, before the business write
	afterWrite  = "after-write"  // after the business insert, before the commit
	afterCommit = "after-commit" // after DoTx returned, before replying
)

// chargeOp returns the operation that DoTx runs: insert the charge in tx and
// answer with its id. at is called at each crash point inside the operation
// (nil: no hooks).
func chargeOp(body []byte, at func(point string)) func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
	if at == nil {
		at = func(string) {}
	}
	return func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		var in chargeBody
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, fmt.Errorf("charge: bad body: %w", err)
		}
		at(afterClaim)
		res, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, amount) VALUES (?, ?)`, in.Order, in.Amount)
		if err != nil {
			return nil, fmt.Errorf("charge: insert: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, fmt.Errorf("charge: insert: %w", err)
		}
		at(afterWrite)
		return json.Marshal(chargeResponse{ChargeID: fmt.Sprintf("ch_%d", id), Order: in.Order, Amount: in.Amount, Status: "succeeded"})
	}
}

// Retry limits of a client.
const (
	maxAttempts = 50
	// retryPause is the pause after an answer that says the charge was
	// not recorded (an HTTP 5xx): a store that could not answer, or an
	// execution whose writes were rolled back.
	retryPause = 20 * time.Millisecond
)

// client sends charges and retries them as an HTTP client would: after a
// 409 "in flight" answer it waits the Retry-After, after a 5xx a short
// pause, and it stops at a final answer.
type client struct {
	guard *key.TxGuard[*sql.Tx]
	// wait waits d before the next attempt: a timer in the program, a
	// clock advance or a signal in tests.
	wait func(ctx context.Context, d time.Duration) error
}

// sleep waits d, or until ctx ends: a real client honouring Retry-After.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send sends req until it gets a final answer: Executed without error,
// Replayed or Conflict. InFlight and Unknown are retried after
// Result.RetryAfter; Unavailable and Executed with an error (the charge ran
// but was rolled back, e.g. because its lease ended and another caller took
// the key over) after retryPause. It returns every answer's outcome, in
// order, and the last result and error.
func (c *client) send(ctx context.Context, req chargeRequest) ([]key.Outcome, key.Result, error) {
	var (
		answers []key.Outcome
		res     key.Result
		err     error
	)
	for range maxAttempts {
		res, err = c.guard.DoTx(ctx, req.keyRequest(), chargeOp(req.Body, nil))
		answers = append(answers, res.Outcome)
		var pause time.Duration
		switch {
		case res.Outcome == key.OutcomeInFlight || res.Outcome == key.OutcomeUnknown:
			pause = res.RetryAfter
		case res.Outcome == key.OutcomeUnavailable || (res.Outcome == key.OutcomeExecuted && err != nil):
			pause = retryPause
		default:
			return answers, res, err
		}
		if werr := c.wait(ctx, max(pause, time.Millisecond)); werr != nil {
			return answers, res, werr
		}
	}
	return answers, res, fmt.Errorf("key %s: no final answer after %d attempts (last: %v, %v)", req.Key, maxAttempts, res.Outcome, err)
}

// ledgerRows returns the ids of order's charges.
func ledgerRows(ctx context.Context, db *sql.DB, order string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT id FROM charges WHERE order_id = ? ORDER BY id`, order)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, fmt.Sprintf("ch_%d", id))
	}
	return ids, rows.Err()
}

// checkLedger reports whether order was charged exactly once, by the charge
// that resp names. It returns the number of rows found.
func checkLedger(ctx context.Context, db *sql.DB, order string, resp []byte) (int, error) {
	ids, err := ledgerRows(ctx, db, order)
	if err != nil {
		return 0, err
	}
	if len(ids) != 1 {
		return len(ids), fmt.Errorf("order %s has %d ledger rows, want 1", order, len(ids))
	}
	var r chargeResponse
	if err := json.Unmarshal(resp, &r); err != nil {
		return 1, fmt.Errorf("order %s: response %q: %w", order, resp, err)
	}
	if r.ChargeID != ids[0] {
		return 1, fmt.Errorf("order %s: response names %s, the ledger holds %s", order, r.ChargeID, ids[0])
	}
	return 1, nil
}

// outcomeCounts counts outcomes.
type outcomeCounts map[key.Outcome]int

// String lists the non-zero counts in the outcomes' order.
func (c outcomeCounts) String() string {
	var parts []string
	for o := key.OutcomeExecuted; o <= key.OutcomeUnavailable; o++ {
		if c[o] > 0 {
			parts = append(parts, fmt.Sprintf("%v %d", o, c[o]))
		}
	}
	return strings.Join(parts, ", ")
}

// togetherReport is what n clients sending one request at once got.
type togetherReport struct {
	First, Final outcomeCounts // each client's first and last answer
	RolledBack   int           // Executed answers with an error: writes undone, retried
	Response     []byte        // the Executed response
	Identical    int           // final responses byte-identical to Response
	Errors       []error       // clients that got no final answer
}

// sendTogether has n clients send req at the same instant (a barrier
// releases them together), each retrying until terminal.
func sendTogether(ctx context.Context, c *client, n int, req chargeRequest) togetherReport {
	type answer struct {
		outcomes []key.Outcome
		res      key.Result
		err      error
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-start
			a := &answers[i]
			a.outcomes, a.res, a.err = c.send(ctx, req)
		})
	}
	close(start)
	wg.Wait()

	rep := togetherReport{First: outcomeCounts{}, Final: outcomeCounts{}}
	for _, a := range answers {
		if len(a.outcomes) > 0 {
			rep.First[a.outcomes[0]]++
		}
		rep.Final[a.res.Outcome]++
		for _, o := range a.outcomes[:max(len(a.outcomes)-1, 0)] {
			if o == key.OutcomeExecuted {
				rep.RolledBack++
			}
		}
		if a.err != nil {
			rep.Errors = append(rep.Errors, a.err)
		}
		if a.res.Outcome == key.OutcomeExecuted && a.err == nil && rep.Response == nil {
			rep.Response = a.res.Response
		}
	}
	for _, a := range answers {
		if a.err == nil && rep.Response != nil && string(a.res.Response) == string(rep.Response) {
			rep.Identical++
		}
	}
	return rep
}

// check returns an error naming every failed invariant of a report of n
// clients on a fresh key.
func (r togetherReport) check(n int) error {
	var errs []error
	errs = append(errs, r.Errors...)
	if r.Final[key.OutcomeExecuted] != 1 {
		errs = append(errs, fmt.Errorf("%d clients got Executed, want exactly 1", r.Final[key.OutcomeExecuted]))
	}
	if r.Identical != n {
		errs = append(errs, fmt.Errorf("%d of %d final responses are byte-identical to the executed one", r.Identical, n))
	}
	return errors.Join(errs...)
}
