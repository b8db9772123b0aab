package memstore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Apps is the in-memory reference model of store.AppStore.
type Apps struct {
	mu      sync.Mutex
	apps    map[string]store.App
	workers map[string]time.Time // by hash
}

var _ store.AppStore = (*Apps)(nil)

// NewApps returns an empty application store.
func NewApps() *Apps { return &Apps{apps: map[string]store.App{}, workers: map[string]time.Time{}} }

func cloneApp(a store.App) store.App {
	a.TokenHashes = slices.Clone(a.TokenHashes)
	for i, h := range a.TokenHashes {
		a.TokenHashes[i] = slices.Clone(h)
	}
	a.Secrets = slices.Clone(a.Secrets)
	return a
}

// tokenTaken reports whether another application than name has one of hashes.
func (s *Apps) tokenTaken(name string, hashes [][]byte) bool {
	for _, a := range s.apps {
		if a.Name == name {
			continue
		}
		for _, h := range a.TokenHashes {
			if slices.ContainsFunc(hashes, func(x []byte) bool { return bytes.Equal(x, h) }) {
				return true
			}
		}
	}
	return false
}

// CreateApp implements store.AppStore.
func (s *Apps) CreateApp(ctx context.Context, a store.App) error {
	if a.Name == "" {
		return fmt.Errorf("memstore: create app: a name is required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.apps[a.Name]; ok || s.tokenTaken(a.Name, a.TokenHashes) {
		return fmt.Errorf("memstore: app %q: %w", a.Name, store.ErrDuplicate)
	}
	s.apps[a.Name] = cloneApp(a)
	return nil
}

// UpdateApp implements store.AppStore.
func (s *Apps) UpdateApp(ctx context.Context, a store.App) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.apps[a.Name]
	if !ok {
		return fmt.Errorf("memstore: app %q: %w", a.Name, store.ErrNotFound)
	}
	if s.tokenTaken(a.Name, a.TokenHashes) {
		return fmt.Errorf("memstore: app %q: %w", a.Name, store.ErrDuplicate)
	}
	a.CreatedAt = old.CreatedAt
	s.apps[a.Name] = cloneApp(a)
	return nil
}

// GetApp implements store.AppStore.
func (s *Apps) GetApp(ctx context.Context, name string) (store.App, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.apps[name]
	if !ok {
		return store.App{}, fmt.Errorf("memstore: app %q: %w", name, store.ErrNotFound)
	}
	return cloneApp(a), nil
}

// AppByToken implements store.AppStore.
func (s *Apps) AppByToken(ctx context.Context, hash []byte) (store.App, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.apps {
		if slices.ContainsFunc(a.TokenHashes, func(h []byte) bool { return bytes.Equal(h, hash) }) {
			return cloneApp(a), nil
		}
	}
	return store.App{}, fmt.Errorf("memstore: app by token: %w", store.ErrNotFound)
}

// ListApps implements store.AppStore.
func (s *Apps) ListApps(ctx context.Context) ([]store.App, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.App
	for _, a := range s.apps {
		out = append(out, cloneApp(a))
	}
	slices.SortFunc(out, func(a, b store.App) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// AddWorkerToken implements store.AppStore.
func (s *Apps) AddWorkerToken(ctx context.Context, hash []byte, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.workers[string(hash)]; ok {
		return fmt.Errorf("memstore: worker token: %w", store.ErrDuplicate)
	}
	s.workers[string(hash)] = at
	return nil
}

// WorkerToken implements store.AppStore.
func (s *Apps) WorkerToken(ctx context.Context, hash []byte) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.workers[string(hash)]
	return ok, nil
}
