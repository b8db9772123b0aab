package cli

import (
	"fmt"
	"strings"
)

// storeKind is what a --store value names.
type storeKind string

const (
	kindSQLite   storeKind = "sqlite"
	kindPostgres storeKind = "postgres"
	kindRedis    storeKind = "redis"
	kindMemory   storeKind = "memory"
)

// parseStore splits a --store value: "sqlite:PATH", "postgres://..." (or
// "postgresql://..."), "redis://..." (or "rediss://..."), "memory:".
func parseStore(v string) (storeKind, string, error) {
	switch {
	case strings.HasPrefix(v, "sqlite:"):
		path := strings.TrimPrefix(v, "sqlite:")
		if path == "" {
			return "", "", usageError{fmt.Errorf("--store %q: sqlite needs a file path (sqlite:idem.db)", v)}
		}
		return kindSQLite, path, nil
	case strings.HasPrefix(v, "postgres://"), strings.HasPrefix(v, "postgresql://"):
		return kindPostgres, v, nil
	case strings.HasPrefix(v, "redis://"), strings.HasPrefix(v, "rediss://"):
		return kindRedis, v, nil
	case v == "memory:":
		return kindMemory, "", nil
	}
	return "", "", usageError{fmt.Errorf("--store %q: want sqlite:PATH, postgres://..., redis://... or memory:", v)}
}
