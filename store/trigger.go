package store

import (
	"context"
	"time"
)

// Trigger is the record that decides which execution a workflow trigger
// belongs to: one per identity (App, Workflow, Key), taken by a unique
// constraint in the transaction that creates the execution, so that
// concurrent triggers of one identity start one execution.
type Trigger struct {
	App      string
	Workflow string
	// Key is the identity's key (package workflow computes it).
	Key []byte
	// Fingerprint is the canonical payload's hash: a trigger of the same
	// identity with another one is refused by the caller.
	Fingerprint []byte
	// ExecutionID is the execution the identity names now.
	ExecutionID string
	// Generation counts the executions the identity has named: 1 for the
	// first, one more at each replacement.
	Generation int
	CreatedAt  time.Time
	// ExpiresAt ends the identity's window: a later trigger may replace
	// the record (the caller decides; the store does not read it).
	ExpiresAt time.Time
}

// TriggerStore keeps workflow triggers' identities, in the execution
// store's transactions. Experimental, like ExecutionStore.
type TriggerStore[TX any] interface {
	Transactor[TX]

	// TakeTriggerTx writes t (Generation 1; App, Workflow, Key,
	// Fingerprint and ExecutionID required) in tx unless its identity has
	// a record: then it changes nothing and returns that record with
	// taken=false. A concurrent take of one identity waits for the other
	// transaction's end and then finds its record (or, if it rolled back,
	// takes the identity itself). The record is locked until tx ends.
	TakeTriggerTx(ctx context.Context, tx TX, t Trigger) (cur Trigger, taken bool, err error)

	// ReplaceTriggerTx points the identity's record at t.ExecutionID with
	// t's Fingerprint, CreatedAt and ExpiresAt, when its generation is
	// still t.Generation-1 (a new window, or a reuse after a finished
	// execution). applied=false, and nothing changed, when another
	// replaced it first or there is no record.
	ReplaceTriggerTx(ctx context.Context, tx TX, t Trigger) (applied bool, err error)
}
