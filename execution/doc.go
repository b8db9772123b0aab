// Package execution runs durable executions: the states of an execution
// and of its steps, which action moves which state where, and the engine
// that applies them on the execution store family (store.ExecutionStore
// and store.StepStore), on which `idem serve` builds.
//
// A task is an application's request to do work of a type; an execution
// is one run of it (a rerun is a new execution of the same task); a step
// is the unit a worker runs, claimed atomically with a lease and an epoch.
// Next draws the execution's state machine and NextStep the step's. Every
// transition is applied by its store as a conditional update from the
// state it was decided on, so two writers never both move one row; the
// terminal states (an execution's SUCCEEDED, FAILED, TIMED_OUT, CANCELED;
// a step's COMPLETED, FAILED) are final.
//
// # Engine
//
// Engine's *Tx methods each make one change in the caller's transaction,
// with the events that report it (numbered per execution, with no gap)
// and, through Config.OnEventTx, whatever must commit with them (idem
// serve's callbacks): CreateTx a task next to the caller's business rows;
// ClaimTx and ClaimManyTx a worker's steps; HeartbeatTx, ProgressTx,
// CompleteTx and FailTx under the claim's epoch (an older one is
// ErrFenced); CancelTx, ResolveTx and RerunTx for operators. Expire settles
// deadlines and lost leases.
//
// # Workers
//
// Engine.NewWorker runs Go handlers by task type in process. A handler's
// context is cancelled, with ErrFenced as its cause, when its claim is
// lost; its Result's Writes commit in the transaction that completes its
// step. A Worker runs WorkerConfig.Concurrency steps at once, claims as
// many as it has room for in one transaction and settles the steps that
// end together in one (group commit); a batch in which one step fails is
// rolled back and each of its steps settled alone.
package execution
