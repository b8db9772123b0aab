package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/idemhq/idem/store"
)

// triggerKey is a trigger's identity in the model.
type triggerKey struct{ app, workflow, key string }

func cloneTrigger(t store.Trigger) store.Trigger {
	t.Key, t.Fingerprint = slices.Clone(t.Key), slices.Clone(t.Fingerprint)
	return t
}

var _ store.TriggerStore[*Tx] = (*Executions)(nil)

// TakeTriggerTx implements store.TriggerStore.
func (x *Executions) TakeTriggerTx(ctx context.Context, tx *Tx, t store.Trigger) (store.Trigger, bool, error) {
	if err := tx.check(); err != nil {
		return store.Trigger{}, false, err
	}
	if t.App == "" || t.Workflow == "" || len(t.Key) == 0 || len(t.Fingerprint) == 0 || t.ExecutionID == "" {
		return store.Trigger{}, false, fmt.Errorf("memstore: take trigger: app, workflow, key, fingerprint and execution id are required")
	}
	k := triggerKey{t.App, t.Workflow, string(t.Key)}
	if cur, ok := x.triggers[k]; ok {
		return cloneTrigger(cur), false, nil
	}
	t = cloneTrigger(t)
	t.Generation = 1
	x.triggers[k] = t
	tx.OnRollback(func() { delete(x.triggers, k) })
	return cloneTrigger(t), true, nil
}

// ReplaceTriggerTx implements store.TriggerStore.
func (x *Executions) ReplaceTriggerTx(ctx context.Context, tx *Tx, t store.Trigger) (bool, error) {
	if err := tx.check(); err != nil {
		return false, err
	}
	k := triggerKey{t.App, t.Workflow, string(t.Key)}
	cur, ok := x.triggers[k]
	if !ok || cur.Generation != t.Generation-1 || !bytes.Equal(cur.Key, t.Key) {
		return false, nil
	}
	x.triggers[k] = cloneTrigger(t)
	tx.OnRollback(func() { x.triggers[k] = cur })
	return true, nil
}
