package store

import (
	"context"
	"time"
)

// DefinitionKey names a versioned definition of an application: a
// workflow or a connection of `idem serve`.
type DefinitionKey struct {
	App  string
	Kind string // "workflow" or "connection"
	Name string
}

// Definition is one stored version of a definition.
type Definition struct {
	DefinitionKey
	// Version counts from 1 per key.
	Version int
	// Body is the definition, as the caller canonicalised it (two puts of
	// one definition must give the same bytes).
	Body      []byte
	CreatedAt time.Time
}

// DefinitionStore keeps the versions of applications' definitions. A
// version, once stored, never changes: an execution pins the version it
// started on. Experimental, like ExecutionStore.
type DefinitionStore interface {
	// PutDefinition stores body as k's next version (1 for the first),
	// unless it equals the latest version's body byte for byte: then it
	// returns that version with created=false. Concurrent puts of one key
	// get distinct versions, and concurrent puts of one body one version.
	PutDefinition(ctx context.Context, k DefinitionKey, body []byte, at time.Time) (d Definition, created bool, err error)
	// GetDefinition returns k's version (0: the latest). ErrNotFound for a
	// key or version never stored, or another application's.
	GetDefinition(ctx context.Context, k DefinitionKey, version int) (Definition, error)
	// LatestDefinitions returns the latest version of every definition of
	// kind, of every application, by application and name (the service's
	// scheduler reads the workflows' schedules so).
	LatestDefinitions(ctx context.Context, kind string) ([]Definition, error)
}
