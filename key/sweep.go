package key

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem/store"
)

// SweeperConfig configures RunSweeper. A nil *SweeperConfig means defaults.
type SweeperConfig struct {
	// Interval is the time between sweeps. Defaults to 1m.
	Interval time.Duration
	// BatchSize is how many records one store call deletes at most, so that
	// a sweep never holds locks for long. Defaults to 1000.
	BatchSize int
	// Logger receives sweep errors. Defaults to discarding.
	Logger *slog.Logger
}

// Sweep deletes expired records in batches of batchSize until a batch comes
// back short, and returns how many it deleted. Live claims are never
// touched (the store guarantees it).
func Sweep(ctx context.Context, s store.Store, batchSize int) (int, error) {
	if batchSize <= 0 {
		return 0, fmt.Errorf("key: sweep batch size %d must be positive", batchSize)
	}
	total := 0
	for {
		n, err := s.Sweep(ctx, batchSize)
		total += n
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		if n < batchSize {
			return total, nil
		}
	}
}

// RunSweeper sweeps s every Interval until ctx ends, and returns ctx's
// error. Errors from a sweep are logged and the next sweep tries again.
func RunSweeper(ctx context.Context, s store.Store, cfg *SweeperConfig) error {
	var c SweeperConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Interval < 0 || c.BatchSize < 0 {
		return fmt.Errorf("%w: SweeperConfig.Interval %v and BatchSize %d must be positive", ErrBadConfig, c.Interval, c.BatchSize)
	}
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		n, err := Sweep(ctx, s, c.BatchSize)
		if err != nil && ctx.Err() == nil {
			c.Logger.WarnContext(ctx, "key: sweep failed", "deleted", n, "err", err)
		} else if n > 0 {
			c.Logger.DebugContext(ctx, "key: swept expired keys", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
