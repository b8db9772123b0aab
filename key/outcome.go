package key

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// Outcome says what Do did with a request.
type Outcome uint8

const (
	// OutcomeExecuted: this call claimed the key and ran the operation. When Do also
	// returns an error, the operation ran (or started) but its result was not
	// recorded; the error says why.
	OutcomeExecuted Outcome = iota + 1
	// OutcomeReplayed: the key was completed earlier with the same fingerprint; the
	// stored response is returned and the operation did not run.
	OutcomeReplayed
	// OutcomeInFlight: another caller holds a live lease on the key. Retry after
	// Result.RetryAfter.
	OutcomeInFlight
	// OutcomeUnknown: the holder ran the operation but does not know whether it
	// took effect (an external call whose answer was lost). The key stays
	// claimed until its lease ends; then the next caller runs it again.
	OutcomeUnknown
	// OutcomeConflict: the key was used with another fingerprint (other content).
	OutcomeConflict
	// OutcomeUnavailable: the store could not answer. The operation was not run:
	// idem fails closed.
	OutcomeUnavailable
)

var outcomeNames = [...]string{"", "Executed", "Replayed", "InFlight", "Unknown", "Conflict", "Unavailable"}

// String returns the outcome's name.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "Outcome(?)"
}

// Result is what Do answers.
type Result struct {
	// Outcome says what happened.
	Outcome Outcome
	// Response is the operation's response: the one it just returned
	// (OutcomeExecuted) or the stored one (OutcomeReplayed).
	Response []byte
	// Epoch is the claim's epoch (OutcomeExecuted) or the epoch that completed the
	// record (OutcomeReplayed), for logs and tests.
	Epoch int64
	// RetryAfter is how long the current lease has left (OutcomeInFlight, OutcomeUnknown).
	RetryAfter time.Duration
}

// Sentinel errors, matched with errors.Is.
var (
	// ErrInFlight is returned with OutcomeInFlight.
	ErrInFlight = errors.New("key: request with this key is in flight")
	// ErrOutcomeUnknown is returned with OutcomeUnknown. An operation
	// returns an error wrapping it (see MarkUnknown) to say that it cannot
	// tell whether it took effect: the claim is then kept until its lease
	// ends instead of being released.
	ErrOutcomeUnknown = errors.New("key: outcome of the first attempt is unknown")
	// ErrConflict is returned with OutcomeConflict.
	ErrConflict = errors.New("key: key reused with a different request")
	// ErrUnavailable is returned with OutcomeUnavailable, and wraps the
	// store's error.
	ErrUnavailable = errors.New("key: store unavailable")
	// ErrInvalidScope is returned when a Scope fails Validate; nothing is
	// stored.
	ErrInvalidScope = errors.New("key: invalid scope")
	// ErrInvalidRequest is returned for a request without a fingerprint.
	ErrInvalidRequest = errors.New("key: invalid request")
	// ErrFenced is returned when the operation ran but its claim was taken
	// over meanwhile (its lease ended), so its result was not recorded. In
	// a transaction (TxGuard) the business writes were rolled back too.
	// It wraps store.ErrFenced, so either sentinel matches.
	ErrFenced = fmt.Errorf("key: claim lost to a newer owner: %w", store.ErrFenced)
	// ErrBadConfig is wrapped by the error of New, NewTx and RunSweeper when
	// a Config field is out of range; the message names the field.
	ErrBadConfig = errors.New("key: bad config")
	// ErrRecording is wrapped (next to ErrUnavailable) in Do's error when the
	// operation ran but the store did not take its outcome: the guard keeps
	// the key held and keeps trying in the background (Config.RecordTimeout),
	// so a retry after the store recovers gets the replay. Result.Response
	// holds the operation's response; do not acknowledge it to a client
	// that would not retry.
	ErrRecording = errors.New("key: outcome not recorded yet; still trying")
)

// MarkUnknown wraps err so that Do keeps the claim until its lease ends
// instead of releasing it: use it when an external call may have taken
// effect but its answer was lost (timeout, connection reset after sending).
func MarkUnknown(err error) error {
	if err == nil {
		err = errors.New("outcome unknown")
	}
	return &unknownError{err}
}

type unknownError struct{ err error }

func (e *unknownError) Error() string   { return "outcome unknown: " + e.err.Error() }
func (e *unknownError) Unwrap() []error { return []error{e.err, ErrOutcomeUnknown} }
