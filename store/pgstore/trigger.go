package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.TriggerStore[pgx.Tx] = (*Store)(nil)

const (
	// The insert of a second take of one identity waits on the primary
	// key for the first one's transaction, and then does nothing (or, if
	// that rolled back, inserts). The read then locks the record until tx
	// ends, so that what the caller decides on it holds.
	triggerInsertSQL = `INSERT INTO idem_triggers (app, workflow, key, fingerprint, execution_id, generation, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, 1, $6, $7) ON CONFLICT DO NOTHING`
	triggerGetSQL = `SELECT fingerprint, execution_id, generation, created_at, expires_at FROM idem_triggers
WHERE app = $1 AND workflow = $2 AND key = $3 FOR UPDATE`
	triggerReplaceSQL = `UPDATE idem_triggers SET fingerprint = $4, execution_id = $5, generation = $6, created_at = $7, expires_at = $8
WHERE app = $1 AND workflow = $2 AND key = $3 AND generation = $6 - 1`
)

// TakeTriggerTx implements store.TriggerStore.
func (s *Store) TakeTriggerTx(ctx context.Context, tx pgx.Tx, t store.Trigger) (store.Trigger, bool, error) {
	if t.App == "" || t.Workflow == "" || len(t.Key) == 0 || len(t.Fingerprint) == 0 || t.ExecutionID == "" {
		return store.Trigger{}, false, errors.New("idem/pgstore: take trigger: app, workflow, key, fingerprint and execution id are required")
	}
	if err := checkText(map[string]string{"app": t.App, "workflow": t.Workflow, "execution id": t.ExecutionID}); err != nil {
		return store.Trigger{}, false, fmt.Errorf("idem/pgstore: take trigger: %w", err)
	}
	tag, err := tx.Exec(ctx, triggerInsertSQL, t.App, t.Workflow, t.Key, t.Fingerprint, t.ExecutionID, t.CreatedAt, t.ExpiresAt)
	if err != nil {
		return store.Trigger{}, false, fmt.Errorf("idem/pgstore: take trigger: %w", err)
	}
	if tag.RowsAffected() == 1 {
		t.Generation = 1
		return t, true, nil
	}
	cur := store.Trigger{App: t.App, Workflow: t.Workflow, Key: t.Key}
	if err := tx.QueryRow(ctx, triggerGetSQL, t.App, t.Workflow, t.Key).Scan(&cur.Fingerprint, &cur.ExecutionID, &cur.Generation,
		&cur.CreatedAt, &cur.ExpiresAt); err != nil {
		return store.Trigger{}, false, fmt.Errorf("idem/pgstore: take trigger: %w", interpretError(err))
	}
	return cur, false, nil
}

// ReplaceTriggerTx implements store.TriggerStore.
func (s *Store) ReplaceTriggerTx(ctx context.Context, tx pgx.Tx, t store.Trigger) (bool, error) {
	if err := checkText(map[string]string{"app": t.App, "workflow": t.Workflow, "execution id": t.ExecutionID}); err != nil {
		return false, fmt.Errorf("idem/pgstore: replace trigger: %w", err)
	}
	tag, err := tx.Exec(ctx, triggerReplaceSQL, t.App, t.Workflow, t.Key, t.Fingerprint, t.ExecutionID, t.Generation, t.CreatedAt, t.ExpiresAt)
	if err != nil {
		return false, fmt.Errorf("idem/pgstore: replace trigger: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
