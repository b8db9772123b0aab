package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemhq/idem/store"
)

var _ store.TriggerStore[*sql.Tx] = (*Store)(nil)

const (
	triggerInsertSQL = `INSERT INTO idem_triggers (app, workflow, key, fingerprint, execution_id, generation, created_at, expires_at)
VALUES (:app, :workflow, :key, :fingerprint, :execution_id, 1, :created_at, :expires_at) ON CONFLICT DO NOTHING`
	triggerGetSQL = `SELECT fingerprint, execution_id, generation, created_at, expires_at FROM idem_triggers
WHERE app = :app AND workflow = :workflow AND key = :key`
	triggerReplaceSQL = `UPDATE idem_triggers SET fingerprint = :fingerprint, execution_id = :execution_id, generation = :generation,
created_at = :created_at, expires_at = :expires_at
WHERE app = :app AND workflow = :workflow AND key = :key AND generation = :generation - 1`
)

func triggerArgs(t store.Trigger) []any {
	return []any{sql.Named("app", t.App), sql.Named("workflow", t.Workflow), sql.Named("key", t.Key),
		sql.Named("fingerprint", t.Fingerprint), sql.Named("execution_id", t.ExecutionID), sql.Named("generation", t.Generation),
		sql.Named("created_at", toMicros(t.CreatedAt)), sql.Named("expires_at", toMicros(t.ExpiresAt))}
}

// TakeTriggerTx implements store.TriggerStore: the database's one writer
// holds tx, so the insert and the read see no other.
func (s *Store) TakeTriggerTx(ctx context.Context, tx *sql.Tx, t store.Trigger) (store.Trigger, bool, error) {
	if tx == nil {
		return store.Trigger{}, false, errors.New("sqlitestore: take trigger: tx is nil")
	}
	if t.App == "" || t.Workflow == "" || len(t.Key) == 0 || len(t.Fingerprint) == 0 || t.ExecutionID == "" {
		return store.Trigger{}, false, errors.New("sqlitestore: take trigger: app, workflow, key, fingerprint and execution id are required")
	}
	res, err := s.stmts.on(tx).ExecContext(ctx, triggerInsertSQL, triggerArgs(t)...)
	if err != nil {
		return store.Trigger{}, false, fmt.Errorf("sqlitestore: take trigger: %w", interpretError(err))
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		t.Generation = 1
		return t, true, nil
	}
	cur := store.Trigger{App: t.App, Workflow: t.Workflow, Key: t.Key}
	var created, expires int64
	err = s.stmts.on(tx).QueryRowContext(ctx, triggerGetSQL, triggerArgs(t)...).Scan(&cur.Fingerprint, &cur.ExecutionID, &cur.Generation, &created, &expires)
	if err != nil {
		return store.Trigger{}, false, fmt.Errorf("sqlitestore: take trigger: %w", interpretError(err))
	}
	cur.CreatedAt, cur.ExpiresAt = fromMicros(created), fromMicros(expires)
	return cur, false, nil
}

// ReplaceTriggerTx implements store.TriggerStore.
func (s *Store) ReplaceTriggerTx(ctx context.Context, tx *sql.Tx, t store.Trigger) (bool, error) {
	if tx == nil {
		return false, errors.New("sqlitestore: replace trigger: tx is nil")
	}
	res, err := s.stmts.on(tx).ExecContext(ctx, triggerReplaceSQL, triggerArgs(t)...)
	if err != nil {
		return false, fmt.Errorf("sqlitestore: replace trigger: %w", interpretError(err))
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
