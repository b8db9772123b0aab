package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.AppTxStore[*sql.Tx] = (*Store)(nil)

// The application statements are short and rare (a command, a cache miss
// of the server), so they are written here rather than in sql/.
const (
	appInsertSQL = `INSERT INTO idem_apps (name, callback_url, scheme, secrets, disabled, created_at)
VALUES (:name, :callback_url, :scheme, :secrets, :disabled, :created_at) ON CONFLICT DO NOTHING`
	appUpdateSQL = `UPDATE idem_apps SET callback_url = :callback_url, scheme = :scheme, secrets = :secrets, disabled = :disabled
WHERE name = :name`
	// appSelectSQL reads each application with its token hashes, as a
	// JSON array of hex strings in hash order: one statement where a
	// query per application's tokens made two for a request's lookup.
	appSelectSQL = `SELECT name, callback_url, scheme, secrets, disabled, created_at,
(SELECT json_group_array(hex(hash) ORDER BY hash) FROM idem_app_tokens WHERE app = idem_apps.name)
FROM idem_apps`
	appTokenSQL     = `INSERT INTO idem_app_tokens (hash, app) VALUES (:hash, :app) ON CONFLICT DO NOTHING`
	workerInsertSQL = `INSERT INTO idem_worker_tokens (hash, created_at) VALUES (:hash, :created_at) ON CONFLICT DO NOTHING`
)

func appError(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlitestore: %s (app %q): %w", op, name, err)
}

// putTokens replaces the application's token hashes in tx; a hash another
// application has is ErrDuplicate.
func putTokens(ctx context.Context, tx *sql.Tx, a store.App) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM idem_app_tokens WHERE app = :app`, sql.Named("app", a.Name)); err != nil {
		return interpretError(err)
	}
	for _, h := range a.TokenHashes {
		if err := insertOnce(ctx, tx, appTokenSQL, sql.Named("hash", h), sql.Named("app", a.Name)); err != nil {
			return fmt.Errorf("token: %w", err)
		}
	}
	return nil
}

func appArgs(a store.App) ([]any, error) {
	secrets, err := json.Marshal(a.Secrets)
	if err != nil {
		return nil, err
	}
	return []any{sql.Named("name", a.Name), sql.Named("callback_url", a.CallbackURL), sql.Named("scheme", a.Scheme),
		sql.Named("secrets", string(secrets)), sql.Named("disabled", a.Disabled), sql.Named("created_at", toMicros(a.CreatedAt))}, nil
}

// CreateApp implements store.AppStore.
func (s *Store) CreateApp(ctx context.Context, a store.App) error {
	if a.Name == "" {
		return errors.New("sqlitestore: create app: a name is required")
	}
	args, err := appArgs(a)
	if err != nil {
		return appError("create app", a.Name, err)
	}
	return appError("create app", a.Name, s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := insertOnce(ctx, tx, appInsertSQL, args...); err != nil {
			return err
		}
		return putTokens(ctx, tx, a)
	}))
}

// UpdateApp implements store.AppStore.
func (s *Store) UpdateApp(ctx context.Context, a store.App) error {
	args, err := appArgs(a)
	if err != nil {
		return appError("update app", a.Name, err)
	}
	return appError("update app", a.Name, s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, appUpdateSQL, args...)
		if err != nil {
			return interpretError(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return interpretError(err)
		} else if n == 0 {
			return store.ErrNotFound
		}
		return putTokens(ctx, tx, a)
	}))
}

// readApps reads the applications a query of appSelectSQL finds, with
// their token hashes.
func (s *Store) readApps(ctx context.Context, where string, args ...any) ([]store.App, error) {
	return readApps(ctx, s.stmts.on(nil), where, args...)
}

// The WHERE clauses readApps is called with; appsQuery(where) of each is
// prepared (preparedByText).
const (
	appsByName  = "WHERE name = :name"
	appsByToken = "WHERE name = (SELECT app FROM idem_app_tokens WHERE hash = :hash)"
)

// appsQuery is the query readApps runs for where.
func appsQuery(where string) string { return appSelectSQL + " " + where + " ORDER BY name" }

// readApps reads with q (the pool, or a transaction).
func readApps(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, where string, args ...any) ([]store.App, error) {
	rows, err := q.QueryContext(ctx, appsQuery(where), args...)
	if err != nil {
		return nil, interpretError(err)
	}
	defer rows.Close()
	var out []store.App
	for rows.Next() {
		var a store.App
		var secrets, tokens string
		var disabled, created int64
		if err := rows.Scan(&a.Name, &a.CallbackURL, &a.Scheme, &secrets, &disabled, &created, &tokens); err != nil {
			return nil, interpretError(err)
		}
		if err := json.Unmarshal([]byte(secrets), &a.Secrets); err != nil {
			return nil, fmt.Errorf("app %q: stored secrets unreadable: %w", a.Name, err)
		}
		var hexes []string
		if err := json.Unmarshal([]byte(tokens), &hexes); err != nil {
			return nil, fmt.Errorf("app %q: token hashes unreadable: %w", a.Name, err)
		}
		for _, h := range hexes {
			b, err := hex.DecodeString(h)
			if err != nil {
				return nil, fmt.Errorf("app %q: token hash unreadable: %w", a.Name, err)
			}
			a.TokenHashes = append(a.TokenHashes, b)
		}
		a.Disabled, a.CreatedAt = disabled != 0, fromMicros(created)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError(err)
	}
	return out, nil
}

// GetApp implements store.AppStore.
func (s *Store) GetApp(ctx context.Context, name string) (store.App, error) {
	a, err := oneApp(s.readApps(ctx, appsByName, sql.Named("name", name)))
	if err != nil {
		return store.App{}, appError("get app", name, err)
	}
	return a, nil
}

// GetAppTx implements store.AppTxStore.
func (s *Store) GetAppTx(ctx context.Context, tx *sql.Tx, name string) (store.App, error) {
	if tx == nil {
		return store.App{}, appError("get app", name, errors.New("tx is nil"))
	}
	a, err := oneApp(readApps(ctx, s.stmts.on(tx), appsByName, sql.Named("name", name)))
	if err != nil {
		return store.App{}, appError("get app", name, err)
	}
	return a, nil
}

// oneApp is the application a read found, or store.ErrNotFound.
func oneApp(apps []store.App, err error) (store.App, error) {
	if err == nil && len(apps) == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.App{}, err
	}
	return apps[0], nil
}

// AppByToken implements store.AppStore.
func (s *Store) AppByToken(ctx context.Context, hash []byte) (store.App, error) {
	a, err := oneApp(s.readApps(ctx, appsByToken, sql.Named("hash", hash)))
	if err != nil {
		return store.App{}, fmt.Errorf("sqlitestore: app by token: %w", err)
	}
	return a, nil
}

// ListApps implements store.AppStore.
func (s *Store) ListApps(ctx context.Context) ([]store.App, error) {
	apps, err := s.readApps(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list apps: %w", err)
	}
	return apps, nil
}

// AddWorkerToken implements store.AppStore.
func (s *Store) AddWorkerToken(ctx context.Context, hash []byte, at time.Time) error {
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := insertOnce(ctx, tx, workerInsertSQL, sql.Named("hash", hash), sql.Named("created_at", toMicros(at))); err != nil {
			return fmt.Errorf("sqlitestore: worker token: %w", err)
		}
		return nil
	})
}

// WorkerToken implements store.AppStore.
func (s *Store) WorkerToken(ctx context.Context, hash []byte) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM idem_worker_tokens WHERE hash = :hash`, sql.Named("hash", hash)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sqlitestore: worker token: %w", interpretError(err))
	}
	return true, nil
}
