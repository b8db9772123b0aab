package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.SecretStore = (*Store)(nil)

// The secrets' statements are short and rare, written here as the
// definitions' are.
const (
	secretPutSQL = `INSERT INTO idem_secrets (app, name, value, updated_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (app, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`
	secretGetSQL    = `SELECT value FROM idem_secrets WHERE app = $1 AND name = $2`
	secretNamesSQL  = `SELECT name FROM idem_secrets WHERE app = $1 ORDER BY name`
	secretDeleteSQL = `DELETE FROM idem_secrets WHERE app = $1 AND name = $2`
)

// PutSecret implements store.SecretStore.
func (s *Store) PutSecret(ctx context.Context, app, name string, value []byte, at time.Time) error {
	if app == "" || name == "" {
		return errors.New("idem/pgstore: put secret: app and name are required")
	}
	if err := checkText(map[string]string{"app": app, "name": name}); err != nil {
		return fmt.Errorf("idem/pgstore: put secret: %w", err)
	}
	if value == nil {
		value = []byte{}
	}
	if _, err := s.pool.Exec(ctx, secretPutSQL, app, name, value, at); err != nil {
		return fmt.Errorf("idem/pgstore: put secret %q: %w", name, interpretError(err))
	}
	return nil
}

// GetSecret implements store.SecretStore.
func (s *Store) GetSecret(ctx context.Context, app, name string) ([]byte, error) {
	if !storable(app) || !storable(name) {
		return nil, fmt.Errorf("idem/pgstore: secret %q: %w", name, store.ErrNotFound)
	}
	var v []byte
	if err := s.pool.QueryRow(ctx, secretGetSQL, app, name).Scan(&v); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			err = store.ErrNotFound
		}
		return nil, fmt.Errorf("idem/pgstore: secret %q: %w", name, interpretError(err))
	}
	return v, nil
}

// SecretNames implements store.SecretStore.
func (s *Store) SecretNames(ctx context.Context, app string) ([]string, error) {
	if !storable(app) {
		return []string{}, nil
	}
	rows, err := s.pool.Query(ctx, secretNamesSQL, app)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: secret names: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: secret names: %w", interpretError(err))
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// DeleteSecret implements store.SecretStore.
func (s *Store) DeleteSecret(ctx context.Context, app, name string) error {
	if !storable(app) || !storable(name) {
		return fmt.Errorf("idem/pgstore: secret %q: %w", name, store.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, secretDeleteSQL, app, name)
	if err != nil {
		return fmt.Errorf("idem/pgstore: delete secret %q: %w", name, interpretError(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idem/pgstore: secret %q: %w", name, store.ErrNotFound)
	}
	return nil
}
