package store

import (
	"context"
	"time"
)

// App is an application: the principal of `idem serve`. Everything it
// reads or writes is scoped to its Name.
type App struct {
	// Name identifies the application (unique).
	Name string
	// TokenHashes are the SHA-256 hashes of its API tokens (several while
	// one is being rotated out). The tokens themselves are never stored.
	TokenHashes [][]byte
	// CallbackURL receives its executions' events.
	CallbackURL string
	// Scheme signs the callbacks: "idem" or "standard" (Standard Webhooks).
	Scheme string
	// Secrets sign the callbacks, the first one for new signatures (the
	// others are kept for rotation). They are stored as given: signing
	// needs them.
	Secrets   []string
	Disabled  bool
	CreatedAt time.Time
}

// AppStore is the storage of applications and worker tokens.
// Experimental, like ExecutionStore.
type AppStore interface {
	// CreateApp writes a. A name already used, or a token hash another
	// application has, is ErrDuplicate.
	CreateApp(ctx context.Context, a App) error
	// UpdateApp replaces the application's token hashes, callback URL,
	// scheme, secrets and disabled flag (rotate, disable). ErrNotFound for
	// an unknown name; ErrDuplicate for a token hash another application
	// has.
	UpdateApp(ctx context.Context, a App) error
	// GetApp: ErrNotFound for an unknown name.
	GetApp(ctx context.Context, name string) (App, error)
	// AppByToken returns the application one of whose tokens hashes to
	// hash (disabled ones too: the caller refuses them). ErrNotFound when
	// none does.
	AppByToken(ctx context.Context, hash []byte) (App, error)
	// ListApps returns every application, by name.
	ListApps(ctx context.Context) ([]App, error)

	// AddWorkerToken stores a worker token's hash; ErrDuplicate if known.
	AddWorkerToken(ctx context.Context, hash []byte, at time.Time) error
	// WorkerToken reports whether hash is a worker token's.
	WorkerToken(ctx context.Context, hash []byte) (bool, error)
}

// AppTxStore reads applications inside the caller's transaction: code
// that holds a transaction must not wait for a second connection of a
// bounded pool (every holder waiting for one deadlocks the pool).
type AppTxStore[TX any] interface {
	AppStore
	// GetAppTx is GetApp in tx.
	GetAppTx(ctx context.Context, tx TX, name string) (App, error)
}
