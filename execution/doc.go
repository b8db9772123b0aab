// Package execution holds the rules of durable executions: the states of
// an execution and of its steps, and which action moves which state where.
// It decides; it stores nothing and knows no clock (the execution store
// family and `idem serve` build on it).
//
// A task is an application's request to do work of a type; an execution
// is one run of it (a rerun is a new execution of the same task); a step
// is the unit a worker runs, claimed atomically with a lease and an epoch.
// Next draws the execution's state machine and NextStep the step's. Every
// transition is applied by its store as a conditional update from the
// state it was decided on, so two writers never both move one row; the
// terminal states (an execution's SUCCEEDED, FAILED, TIMED_OUT, CANCELED;
// a step's COMPLETED, FAILED) are final.
package execution
