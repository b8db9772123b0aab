package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.AppTxStore[pgx.Tx] = (*Store)(nil)

// The application statements are short and rare (a command, a cache miss
// of the server), so they are written here rather than in sql/.
const (
	appInsertSQL = `INSERT INTO idem_apps (name, callback_url, scheme, secrets, disabled, created_at)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`
	appUpdateSQL = `UPDATE idem_apps SET callback_url = $2, scheme = $3, secrets = $4, disabled = $5 WHERE name = $1`
	// appSelectSQL reads applications with their token hashes; $1 filters.
	appSelectSQL = `SELECT a.name, a.callback_url, a.scheme, a.secrets, a.disabled, a.created_at,
       coalesce((SELECT array_agg(t.hash ORDER BY t.hash) FROM idem_app_tokens t WHERE t.app = a.name), '{}')
FROM idem_apps a`
	appTokenSQL = `INSERT INTO idem_app_tokens (hash, app) VALUES ($1, $2) ON CONFLICT DO NOTHING`
)

func appError(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("idem/pgstore: %s (app %q): %w", op, name, err)
}

func checkApp(a store.App) error {
	fields := map[string]string{"name": a.Name, "callback url": a.CallbackURL, "scheme": a.Scheme}
	for i, s := range a.Secrets {
		fields[fmt.Sprintf("secret %d", i)] = s
	}
	return checkText(fields)
}

// putTokens replaces the application's token hashes in tx; a hash another
// application has is ErrDuplicate.
func putTokens(ctx context.Context, tx pgx.Tx, a store.App) error {
	if _, err := tx.Exec(ctx, `DELETE FROM idem_app_tokens WHERE app = $1`, a.Name); err != nil {
		return err
	}
	for _, h := range a.TokenHashes {
		if err := insertOnce(ctx, tx, appTokenSQL, h, a.Name); err != nil {
			return fmt.Errorf("token: %w", err)
		}
	}
	return nil
}

// CreateApp implements store.AppStore.
func (s *Store) CreateApp(ctx context.Context, a store.App) error {
	if a.Name == "" {
		return errors.New("idem/pgstore: create app: a name is required")
	}
	if err := checkApp(a); err != nil {
		return appError("create app", a.Name, err)
	}
	return appError("create app", a.Name, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := insertOnce(ctx, tx, appInsertSQL, a.Name, a.CallbackURL, a.Scheme, orEmptyStrings(a.Secrets), a.Disabled, a.CreatedAt); err != nil {
			return err
		}
		return putTokens(ctx, tx, a)
	}))
}

// UpdateApp implements store.AppStore.
func (s *Store) UpdateApp(ctx context.Context, a store.App) error {
	if err := checkApp(a); err != nil {
		return appError("update app", a.Name, err)
	}
	return appError("update app", a.Name, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, appUpdateSQL, a.Name, a.CallbackURL, a.Scheme, orEmptyStrings(a.Secrets), a.Disabled)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		return putTokens(ctx, tx, a)
	}))
}

func orEmptyStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// readApps reads the applications appSelectSQL finds with where.
func (s *Store) readApps(ctx context.Context, where string, args ...any) ([]store.App, error) {
	return readApps(ctx, s.pool, where, args...)
}

// readApps reads with q (the pool, or a transaction).
func readApps(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, where string, args ...any) ([]store.App, error) {
	rows, err := q.Query(ctx, appSelectSQL+" "+where+" ORDER BY a.name", args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.App, error) {
		var a store.App
		err := r.Scan(&a.Name, &a.CallbackURL, &a.Scheme, &a.Secrets, &a.Disabled, &a.CreatedAt, &a.TokenHashes)
		if len(a.TokenHashes) == 0 {
			a.TokenHashes = nil
		}
		return a, err
	})
}

// GetApp implements store.AppStore.
func (s *Store) GetApp(ctx context.Context, name string) (store.App, error) {
	return getApp(ctx, s.pool, name)
}

// GetAppTx implements store.AppTxStore.
func (s *Store) GetAppTx(ctx context.Context, tx pgx.Tx, name string) (store.App, error) {
	return getApp(ctx, tx, name)
}

func getApp(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, name string) (store.App, error) {
	if !storable(name) {
		return store.App{}, appError("get app", name, store.ErrNotFound)
	}
	a, err := oneApp(readApps(ctx, q, "WHERE a.name = $1", name))
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
	a, err := oneApp(s.readApps(ctx, "WHERE a.name = (SELECT app FROM idem_app_tokens WHERE hash = $1)", hash))
	if err != nil {
		return store.App{}, fmt.Errorf("idem/pgstore: app by token: %w", err)
	}
	return a, nil
}

// ListApps implements store.AppStore.
func (s *Store) ListApps(ctx context.Context) ([]store.App, error) {
	apps, err := s.readApps(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("idem/pgstore: list apps: %w", err)
	}
	return apps, nil
}

// AddWorkerToken implements store.AppStore.
func (s *Store) AddWorkerToken(ctx context.Context, hash []byte, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO idem_worker_tokens (hash, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING`, hash, at)
	if err != nil {
		return fmt.Errorf("idem/pgstore: worker token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("idem/pgstore: worker token: %w", store.ErrDuplicate)
	}
	return nil
}

// WorkerToken implements store.AppStore.
func (s *Store) WorkerToken(ctx context.Context, hash []byte) (bool, error) {
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM idem_worker_tokens WHERE hash = $1`, hash).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("idem/pgstore: worker token: %w", err)
	}
	return true, nil
}
