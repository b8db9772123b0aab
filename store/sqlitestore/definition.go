package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.DefinitionStore = (*Store)(nil)

const (
	definitionLatestSQL = `SELECT version, body, created_at FROM idem_definitions
WHERE app = :app AND kind = :kind AND name = :name ORDER BY version DESC LIMIT 1`
	definitionGetSQL = `SELECT version, body, created_at FROM idem_definitions
WHERE app = :app AND kind = :kind AND name = :name AND version = :version`
	definitionInsertSQL = `INSERT INTO idem_definitions (app, kind, name, version, body, created_at)
VALUES (:app, :kind, :name, :version, :body, :created_at)`
	definitionsLatestSQL = `SELECT d.app, d.name, d.version, d.body, d.created_at FROM idem_definitions d
WHERE d.kind = :kind AND d.version = (SELECT max(version) FROM idem_definitions m WHERE m.app = d.app AND m.kind = d.kind AND m.name = d.name)
ORDER BY d.app, d.name`
)

// LatestDefinitions implements store.DefinitionStore.
func (s *Store) LatestDefinitions(ctx context.Context, kind string) ([]store.Definition, error) {
	rows, err := s.db.QueryContext(ctx, definitionsLatestSQL, sql.Named("kind", kind))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: latest definitions: %w", interpretError(err))
	}
	defer rows.Close()
	out := []store.Definition{}
	for rows.Next() {
		d := store.Definition{DefinitionKey: store.DefinitionKey{Kind: kind}}
		var at int64
		if err := rows.Scan(&d.App, &d.Name, &d.Version, &d.Body, &at); err != nil {
			return nil, fmt.Errorf("sqlitestore: latest definitions: %w", interpretError(err))
		}
		d.CreatedAt = fromMicros(at)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: latest definitions: %w", interpretError(err))
	}
	return out, nil
}

func definitionArgs(k store.DefinitionKey) []any {
	return []any{sql.Named("app", k.App), sql.Named("kind", k.Kind), sql.Named("name", k.Name)}
}

// scanDefinition reads a row of definitionLatestSQL or definitionGetSQL.
func scanDefinition(row *sql.Row, k store.DefinitionKey) (store.Definition, error) {
	d := store.Definition{DefinitionKey: k}
	var at int64
	if err := row.Scan(&d.Version, &d.Body, &at); err != nil {
		return store.Definition{}, err
	}
	d.CreatedAt = fromMicros(at)
	return d, nil
}

// PutDefinition implements store.DefinitionStore, in one transaction of
// the database's one writer: the latest version is read and the next one
// written with no other writer between.
func (s *Store) PutDefinition(ctx context.Context, k store.DefinitionKey, body []byte, at time.Time) (store.Definition, bool, error) {
	if k.App == "" || k.Kind == "" || k.Name == "" {
		return store.Definition{}, false, errors.New("sqlitestore: put definition: app, kind and name are required")
	}
	var d store.Definition
	var created bool
	err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		latest, err := scanDefinition(tx.QueryRowContext(ctx, definitionLatestSQL, definitionArgs(k)...), k)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return interpretError(err)
		case bytes.Equal(latest.Body, body):
			d = latest
			return nil
		}
		d = store.Definition{DefinitionKey: k, Version: latest.Version + 1, Body: bytes.Clone(body), CreatedAt: at}
		created = true
		_, err = tx.ExecContext(ctx, definitionInsertSQL, append(definitionArgs(k), sql.Named("version", d.Version),
			sql.Named("body", body), sql.Named("created_at", toMicros(at)))...)
		return interpretError(err)
	})
	if err != nil {
		return store.Definition{}, false, fmt.Errorf("sqlitestore: put %s %q: %w", k.Kind, k.Name, err)
	}
	return d, created, nil
}

// GetDefinition implements store.DefinitionStore.
func (s *Store) GetDefinition(ctx context.Context, k store.DefinitionKey, version int) (store.Definition, error) {
	var row *sql.Row
	if version == 0 {
		row = s.db.QueryRowContext(ctx, definitionLatestSQL, definitionArgs(k)...)
	} else {
		row = s.db.QueryRowContext(ctx, definitionGetSQL, append(definitionArgs(k), sql.Named("version", version))...)
	}
	d, err := scanDefinition(row, k)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Definition{}, fmt.Errorf("sqlitestore: %s %q version %d: %w", k.Kind, k.Name, version, store.ErrNotFound)
	case err != nil:
		return store.Definition{}, fmt.Errorf("sqlitestore: get %s %q: %w", k.Kind, k.Name, interpretError(err))
	}
	return d, nil
}
