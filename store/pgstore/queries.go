package pgstore

import _ "embed"

// The store's statements, one file each; every file says what it does and
// which parameters it takes.
var (
	//go:embed sql/claim.sql
	claimSQL string
	//go:embed sql/get.sql
	getSQL string
	//go:embed sql/complete.sql
	completeSQL string
	//go:embed sql/complete_tx.sql
	completeTxSQL string
	//go:embed sql/release.sql
	releaseSQL string
	//go:embed sql/extend.sql
	extendSQL string
	//go:embed sql/mark_unknown.sql
	markUnknownSQL string
	//go:embed sql/sweep.sql
	sweepSQL string

	// The inbox's (inbox.go).

	//go:embed sql/inbox_record.sql
	inboxRecordSQL string
	//go:embed sql/inbox_record_set_stream.sql
	inboxRecordSetStreamSQL string
	//go:embed sql/inbox_insert.sql
	inboxInsertSQL string
	//go:embed sql/stream_lock.sql
	streamLockSQL string
	//go:embed sql/stream_put.sql
	streamPutSQL string
	//go:embed sql/park.sql
	parkSQL string
	//go:embed sql/unpark.sql
	unparkSQL string
	//go:embed sql/drop_parked.sql
	dropParkedSQL string
	//go:embed sql/gap_record.sql
	gapRecordSQL string
	//go:embed sql/dead_letter_insert.sql
	deadLetterSQL string
	//go:embed sql/dead_letter_take.sql
	takeDeadLetterSQL string
	//go:embed sql/dead_letters_list.sql
	listDeadLettersSQL string
	//go:embed sql/gaps_list.sql
	listGapsSQL string
	//go:embed sql/gaps_list_stream.sql
	listStreamGapsSQL string
	//go:embed sql/overdue_streams.sql
	overdueStreamsSQL string
	//go:embed sql/inbox_sweep.sql
	sweepInboxSQL string

	// The outbox's (outbox.go).

	//go:embed sql/outbox_enqueue.sql
	outboxEnqueueSQL string
	//go:embed sql/outbox_claim.sql
	outboxClaimSQL string
	//go:embed sql/outbox_complete.sql
	outboxCompleteSQL string
	//go:embed sql/outbox_retry.sql
	outboxRetrySQL string
	//go:embed sql/outbox_kill.sql
	outboxKillSQL string
	//go:embed sql/outbox_get.sql
	outboxGetSQL string
	//go:embed sql/outbox_list.sql
	outboxListSQL string
	//go:embed sql/outbox_requeue.sql
	outboxRequeueSQL string
	//go:embed sql/outbox_disable.sql
	outboxDisableSQL string
	//go:embed sql/outbox_enable.sql
	outboxEnableSQL string
	//go:embed sql/outbox_disabled.sql
	outboxDisabledSQL string
	//go:embed sql/outbox_sweep.sql
	outboxSweepSQL string
)
