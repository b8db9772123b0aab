package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Secrets is the in-memory reference model of store.SecretStore.
type Secrets struct {
	mu sync.Mutex
	m  map[[2]string][]byte // by app and name
}

var _ store.SecretStore = (*Secrets)(nil)

// NewSecrets returns an empty secret store.
func NewSecrets() *Secrets { return &Secrets{m: map[[2]string][]byte{}} }

// PutSecret implements store.SecretStore.
func (s *Secrets) PutSecret(ctx context.Context, app, name string, value []byte, at time.Time) error {
	if app == "" || name == "" {
		return fmt.Errorf("memstore: put secret: app and name are required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[[2]string{app, name}] = slices.Clone(value)
	return nil
}

// GetSecret implements store.SecretStore.
func (s *Secrets) GetSecret(ctx context.Context, app, name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[[2]string{app, name}]
	if !ok {
		return nil, fmt.Errorf("memstore: secret %q: %w", name, store.ErrNotFound)
	}
	return slices.Clone(v), nil
}

// SecretNames implements store.SecretStore.
func (s *Secrets) SecretNames(ctx context.Context, app string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []string{}
	for k := range s.m {
		if k[0] == app {
			out = append(out, k[1])
		}
	}
	slices.Sort(out)
	return out, nil
}

// DeleteSecret implements store.SecretStore.
func (s *Secrets) DeleteSecret(ctx context.Context, app, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{app, name}
	if _, ok := s.m[k]; !ok {
		return fmt.Errorf("memstore: secret %q: %w", name, store.ErrNotFound)
	}
	delete(s.m, k)
	return nil
}
