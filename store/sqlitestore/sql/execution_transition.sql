-- TransitionTx: the conditional update. It applies only while the
-- execution is in the status the change was decided on (:from), moves
-- last_seq for the event written next, and returns the row as it now is.
-- :reopen clears finished_at, output and error (an operator's retry).
UPDATE idem_executions
SET status      = :to,
    last_seq    = last_seq + 1,
    started_at  = CASE WHEN :started_at <> 0 THEN :started_at ELSE started_at END,
    finished_at = CASE WHEN :finished_at <> 0 THEN :finished_at WHEN :reopen THEN 0 ELSE finished_at END,
    output      = CASE WHEN :has_output THEN :output WHEN :reopen THEN NULL ELSE output END,
    error       = CASE WHEN :error <> '' THEN :error WHEN :reopen THEN '' ELSE error END,
    progress    = CASE WHEN :progress <> 0 THEN :progress ELSE progress END
WHERE app = :app AND id = :id AND status = :from
RETURNING task_id, number, status, last_seq, created_at, started_at, finished_at, output, error, progress, workflow, version
