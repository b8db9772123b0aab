package store

import (
	"context"
	"time"
)

// SecretStore keeps applications' secrets: the values that workflows'
// headers name ("{{ secrets.NAME }}") and that only the requests to their
// targets carry. A secret's value is written and used, never read back
// through the service's API: SecretNames lists names only. Experimental,
// like ExecutionStore.
type SecretStore interface {
	// PutSecret sets the application's secret name to value (a new one,
	// or a new value for one it has).
	PutSecret(ctx context.Context, app, name string, value []byte, at time.Time) error
	// GetSecret returns the value. ErrNotFound for a name the application
	// has not set (or another application's).
	GetSecret(ctx context.Context, app, name string) ([]byte, error)
	// SecretNames returns the names of the application's secrets, sorted.
	SecretNames(ctx context.Context, app string) ([]string, error)
	// DeleteSecret removes it. ErrNotFound when there is none.
	DeleteSecret(ctx context.Context, app, name string) error
}
