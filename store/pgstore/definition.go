package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.DefinitionStore = (*Store)(nil)

// The definitions' statements are short and rare (an operator's put, an
// execution's start), so they are written here rather than in sql/.
const (
	definitionLatestSQL = `SELECT version, body, created_at FROM idem_definitions
WHERE app = $1 AND kind = $2 AND name = $3 ORDER BY version DESC LIMIT 1`
	definitionGetSQL = `SELECT version, body, created_at FROM idem_definitions
WHERE app = $1 AND kind = $2 AND name = $3 AND version = $4`
	definitionInsertSQL = `INSERT INTO idem_definitions (app, kind, name, version, body, created_at)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`
	definitionsLatestSQL = `SELECT DISTINCT ON (app, name) app, name, version, body, created_at FROM idem_definitions
WHERE kind = $1 ORDER BY app, name, version DESC`
)

// LatestDefinitions implements store.DefinitionStore.
func (s *Store) LatestDefinitions(ctx context.Context, kind string) ([]store.Definition, error) {
	if err := checkText(map[string]string{"kind": kind}); err != nil {
		return nil, fmt.Errorf("idem/pgstore: latest definitions: %w", err)
	}
	rows, err := s.pool.Query(ctx, definitionsLatestSQL, kind)
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: latest definitions: %w", interpretError(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Definition, error) {
		d := store.Definition{DefinitionKey: store.DefinitionKey{Kind: kind}}
		err := r.Scan(&d.App, &d.Name, &d.Version, &d.Body, &d.CreatedAt)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: latest definitions: %w", interpretError(err))
	}
	if out == nil {
		out = []store.Definition{}
	}
	return out, nil
}

// putAttempts bounds PutDefinition's tries: each lost race means another
// put of the key committed, so n concurrent puts need at most n.
const putAttempts = 64

// PutDefinition implements store.DefinitionStore. It reads the latest
// version and inserts the next one; a concurrent put that took that number
// first makes the insert do nothing (after waiting for its commit), and
// the put is tried again on what is then the latest.
func (s *Store) PutDefinition(ctx context.Context, k store.DefinitionKey, body []byte, at time.Time) (store.Definition, bool, error) {
	if k.App == "" || k.Kind == "" || k.Name == "" {
		return store.Definition{}, false, errors.New("idem/pgstore: put definition: app, kind and name are required")
	}
	if err := checkText(map[string]string{"app": k.App, "kind": k.Kind, "name": k.Name}); err != nil {
		return store.Definition{}, false, fmt.Errorf("idem/pgstore: put definition: %w", err)
	}
	for range putAttempts {
		var d store.Definition
		var created bool
		err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			latest, err := scanDefinition(tx.QueryRow(ctx, definitionLatestSQL, k.App, k.Kind, k.Name), k)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return err
			case bytes.Equal(latest.Body, body):
				d = latest
				return nil
			}
			d = store.Definition{DefinitionKey: k, Version: latest.Version + 1, Body: bytes.Clone(body), CreatedAt: at}
			created = true
			return insertOnce(ctx, tx, definitionInsertSQL, k.App, k.Kind, k.Name, d.Version, body, at)
		})
		if errors.Is(err, store.ErrDuplicate) {
			continue // another put took the number: read again
		}
		if err != nil {
			return store.Definition{}, false, fmt.Errorf("idem/pgstore: put %s %q: %w", k.Kind, k.Name, err)
		}
		return d, created, nil
	}
	return store.Definition{}, false, fmt.Errorf("idem/pgstore: put %s %q: lost the race for a version %d times", k.Kind, k.Name, putAttempts)
}

// GetDefinition implements store.DefinitionStore.
func (s *Store) GetDefinition(ctx context.Context, k store.DefinitionKey, version int) (store.Definition, error) {
	if err := checkText(map[string]string{"app": k.App, "kind": k.Kind, "name": k.Name}); err != nil {
		return store.Definition{}, fmt.Errorf("idem/pgstore: get definition: %w", err)
	}
	var row pgx.Row
	if version == 0 {
		row = s.pool.QueryRow(ctx, definitionLatestSQL, k.App, k.Kind, k.Name)
	} else {
		row = s.pool.QueryRow(ctx, definitionGetSQL, k.App, k.Kind, k.Name, version)
	}
	d, err := scanDefinition(row, k)
	if err != nil {
		return store.Definition{}, fmt.Errorf("idem/pgstore: %s %q version %d: %w", k.Kind, k.Name, version, interpretError(err))
	}
	return d, nil
}

func scanDefinition(row pgx.Row, k store.DefinitionKey) (store.Definition, error) {
	d := store.Definition{DefinitionKey: k}
	if err := row.Scan(&d.Version, &d.Body, &d.CreatedAt); err != nil {
		return store.Definition{}, err
	}
	return d, nil
}
