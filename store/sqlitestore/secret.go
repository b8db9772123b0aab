package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.SecretStore = (*Store)(nil)

const (
	secretPutSQL = `INSERT INTO idem_secrets (app, name, value, updated_at) VALUES (:app, :name, :value, :at)
ON CONFLICT (app, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`
	secretGetSQL    = `SELECT value FROM idem_secrets WHERE app = :app AND name = :name`
	secretNamesSQL  = `SELECT name FROM idem_secrets WHERE app = :app ORDER BY name`
	secretDeleteSQL = `DELETE FROM idem_secrets WHERE app = :app AND name = :name`
)

// PutSecret implements store.SecretStore.
func (s *Store) PutSecret(ctx context.Context, app, name string, value []byte, at time.Time) error {
	if app == "" || name == "" {
		return errors.New("sqlitestore: put secret: app and name are required")
	}
	if value == nil {
		value = []byte{}
	}
	return s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, secretPutSQL, sql.Named("app", app), sql.Named("name", name), sql.Named("value", value), sql.Named("at", toMicros(at)))
		if err != nil {
			return fmt.Errorf("sqlitestore: put secret %q: %w", name, interpretError(err))
		}
		return nil
	})
}

// GetSecret implements store.SecretStore.
func (s *Store) GetSecret(ctx context.Context, app, name string) ([]byte, error) {
	var v []byte
	if err := s.db.QueryRowContext(ctx, secretGetSQL, sql.Named("app", app), sql.Named("name", name)).Scan(&v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			err = store.ErrNotFound
		}
		return nil, fmt.Errorf("sqlitestore: secret %q: %w", name, interpretError(err))
	}
	return v, nil
}

// SecretNames implements store.SecretStore.
func (s *Store) SecretNames(ctx context.Context, app string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, secretNamesSQL, sql.Named("app", app))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: secret names: %w", interpretError(err))
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("sqlitestore: secret names: %w", interpretError(err))
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: secret names: %w", interpretError(err))
	}
	return out, nil
}

// DeleteSecret implements store.SecretStore.
func (s *Store) DeleteSecret(ctx context.Context, app, name string) error {
	return s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, secretDeleteSQL, sql.Named("app", app), sql.Named("name", name))
		if err != nil {
			return fmt.Errorf("sqlitestore: delete secret %q: %w", name, interpretError(err))
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("sqlitestore: secret %q: %w", name, store.ErrNotFound)
		}
		return nil
	})
}
