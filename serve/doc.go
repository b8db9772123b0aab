// Package serve is the HTTP API of `idem serve`: applications create tasks
// and follow their executions, workers in any language claim steps and
// report on them. Every change goes through package execution's engine, in
// one transaction with the events that report it.
//
// Applications authenticate with `Authorization: Bearer <token>` (their
// tokens are stored hashed); everything they read is their own, and
// another application's id answers 404, never 403. Workers authenticate
// with a worker token and see only the task types they claim.
//
//	POST /v1/tasks                                 (Idempotency-Key required)
//	GET  /v1/tasks, /v1/tasks/{id}
//	POST /v1/tasks/{id}/rerun                      (Idempotency-Key required)
//	GET  /v1/executions/{id}, …/steps, …/events?after=N
//	POST /v1/executions/{id}/cancel
//	POST /v1/executions/{id}/steps/{stepId}/resolve
//	POST /v1/worker/claim, /v1/worker/steps/{id}/{heartbeat,progress,complete,fail}
//
// Creating a task and rerunning one go through the request-key middleware
// (package httpidem) in the store's transaction: the task, its execution,
// its first events and the stored answer commit together or not at all,
// so a retry with the same key gets the same task and execution, whatever
// crashed. Worker writes carry the claim's epoch: a write under a claim
// that was taken over answers 409 fenced and changes nothing.
//
// Errors are RFC 9457 problems; docs/http.md lists every slug.
package serve
