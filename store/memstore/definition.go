package memstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Definitions is the in-memory reference model of store.DefinitionStore.
type Definitions struct {
	mu   sync.Mutex
	defs map[store.DefinitionKey][]store.Definition // by version - 1
}

var _ store.DefinitionStore = (*Definitions)(nil)

// NewDefinitions returns an empty definition store.
func NewDefinitions() *Definitions {
	return &Definitions{defs: map[store.DefinitionKey][]store.Definition{}}
}

func cloneDefinition(d store.Definition) store.Definition {
	d.Body = slices.Clone(d.Body)
	return d
}

// PutDefinition implements store.DefinitionStore.
func (s *Definitions) PutDefinition(ctx context.Context, k store.DefinitionKey, body []byte, at time.Time) (store.Definition, bool, error) {
	if k.App == "" || k.Kind == "" || k.Name == "" {
		return store.Definition{}, false, fmt.Errorf("memstore: put definition: app, kind and name are required")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.defs[k]
	if n := len(vs); n > 0 && bytes.Equal(vs[n-1].Body, body) {
		return cloneDefinition(vs[n-1]), false, nil
	}
	d := store.Definition{DefinitionKey: k, Version: len(vs) + 1, Body: slices.Clone(body), CreatedAt: at}
	s.defs[k] = append(vs, d)
	return cloneDefinition(d), true, nil
}

// LatestDefinitions implements store.DefinitionStore.
func (s *Definitions) LatestDefinitions(ctx context.Context, kind string) ([]store.Definition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []store.Definition{}
	for k, vs := range s.defs {
		if k.Kind == kind && len(vs) > 0 {
			out = append(out, cloneDefinition(vs[len(vs)-1]))
		}
	}
	slices.SortFunc(out, func(a, b store.Definition) int {
		if a.App != b.App {
			return strings.Compare(a.App, b.App)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// GetDefinition implements store.DefinitionStore.
func (s *Definitions) GetDefinition(ctx context.Context, k store.DefinitionKey, version int) (store.Definition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.defs[k]
	if version == 0 {
		version = len(vs)
	}
	if version < 1 || version > len(vs) {
		return store.Definition{}, fmt.Errorf("memstore: %s %q version %d: %w", k.Kind, k.Name, version, store.ErrNotFound)
	}
	return cloneDefinition(vs[version-1]), nil
}
