package sqlitestore

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Synchronous is a value of SQLite's PRAGMA synchronous: how often SQLite
// waits for the disk.
type Synchronous string

const (
	// SynchronousFull syncs the write-ahead log at every commit: a commit
	// that returned survives a power loss. The default.
	SynchronousFull Synchronous = "FULL"
	// SynchronousExtra is FULL plus a sync of the directory after a
	// rollback journal is deleted. As durable as FULL in WAL mode.
	SynchronousExtra Synchronous = "EXTRA"
	// SynchronousNormal syncs the WAL only at checkpoints: the last commits
	// before a power loss (not a process crash) may roll back, so a key that
	// was answered may be claimed again. Needs AllowWeakDurability.
	SynchronousNormal Synchronous = "NORMAL"
	// SynchronousOff never syncs: a power loss may lose commits or corrupt
	// the file. Needs AllowWeakDurability.
	SynchronousOff Synchronous = "OFF"
)

// JournalMode is a value of SQLite's PRAGMA journal_mode.
type JournalMode string

const (
	// JournalWAL is write-ahead logging: readers never block the writer and
	// the writer never blocks readers. The default.
	JournalWAL JournalMode = "WAL"
	// JournalDelete, JournalTruncate and JournalPersist are rollback
	// journals: as durable as WAL with SynchronousFull, but every write
	// blocks all readers. They need AllowWeakDurability.
	JournalDelete   JournalMode = "DELETE"
	JournalTruncate JournalMode = "TRUNCATE"
	JournalPersist  JournalMode = "PERSIST"
	// JournalMemory and JournalOff keep no journal on disk: a crash in the
	// middle of a write may corrupt the file. They need AllowWeakDurability.
	JournalMemory JournalMode = "MEMORY"
	JournalOff    JournalMode = "OFF"
)

// OpenConfig configures Open. A nil *OpenConfig means all defaults: WAL,
// synchronous=FULL, a 10 s busy timeout.
type OpenConfig struct {
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection or process before it fails with SQLITE_BUSY. Defaults to
	// 10 seconds.
	BusyTimeout time.Duration

	// Synchronous is PRAGMA synchronous on every connection. Values weaker
	// than SynchronousFull are refused unless AllowWeakDurability is set.
	// Defaults to SynchronousFull.
	Synchronous Synchronous

	// JournalMode is PRAGMA journal_mode. Values other than JournalWAL are
	// refused unless AllowWeakDurability is set. Defaults to JournalWAL.
	JournalMode JournalMode

	// AllowWeakDurability permits a Synchronous weaker than FULL and a
	// JournalMode other than WAL. Pass the same choice in Config, or New
	// refuses the handle. With synchronous=NORMAL a power loss may undo the
	// last commits: keys that were answered may run again. Defaults to
	// false.
	AllowWeakDurability bool

	// MaxOpenConns caps the pool (sql.DB.SetMaxOpenConns); as many
	// connections are kept idle, because opening one costs a file open and
	// the pragmas above. Readers run in parallel in WAL mode; writers take
	// turns whatever the size. Defaults to 8.
	MaxOpenConns int
}

func (c *OpenConfig) withDefaults() OpenConfig {
	var out OpenConfig
	if c != nil {
		out = *c
	}
	if out.BusyTimeout == 0 {
		out.BusyTimeout = 10 * time.Second
	}
	if out.Synchronous == "" {
		out.Synchronous = SynchronousFull
	}
	if out.JournalMode == "" {
		out.JournalMode = JournalWAL
	}
	if out.MaxOpenConns == 0 {
		out.MaxOpenConns = 8
	}
	return out
}

// validate checks a config with defaults applied.
func (c *OpenConfig) validate() error {
	if c.BusyTimeout < time.Millisecond {
		return fmt.Errorf("OpenConfig.BusyTimeout is %v, must be at least 1ms", c.BusyTimeout)
	}
	switch c.Synchronous {
	case SynchronousFull, SynchronousExtra:
	case SynchronousNormal, SynchronousOff:
		if !c.AllowWeakDurability {
			return fmt.Errorf("OpenConfig.Synchronous is %s, weaker than FULL: set AllowWeakDurability to accept losing commits on power loss", c.Synchronous)
		}
	default:
		return fmt.Errorf("OpenConfig.Synchronous is %q, must be FULL, EXTRA, NORMAL or OFF", c.Synchronous)
	}
	switch c.JournalMode {
	case JournalWAL:
	case JournalDelete, JournalTruncate, JournalPersist, JournalMemory, JournalOff:
		if !c.AllowWeakDurability {
			return fmt.Errorf("OpenConfig.JournalMode is %s, not WAL: set AllowWeakDurability to accept it", c.JournalMode)
		}
	default:
		return fmt.Errorf("OpenConfig.JournalMode is %q, must be WAL, DELETE, TRUNCATE, PERSIST, MEMORY or OFF", c.JournalMode)
	}
	if c.MaxOpenConns < 1 {
		return fmt.Errorf("OpenConfig.MaxOpenConns is %d, must be at least 1", c.MaxOpenConns)
	}
	return nil
}

// Config configures New. A nil *Config means all defaults.
type Config struct {
	// AllowWeakDurability lets New accept a handle whose journal mode is not
	// WAL or whose synchronous setting is below FULL (see OpenConfig).
	// Capabilities then reports Durable false. Defaults to false: such a
	// handle is refused with an error naming the setting.
	AllowWeakDurability bool

	// Logger receives the store's rare diagnostics (a rollback that failed,
	// weak durability accepted). Defaults to a logger that discards
	// everything.
	Logger *slog.Logger

	// Now is the store's clock, read once per operation, inside the write
	// lock for writes. Tests pass a settable clock to move leases and
	// expiry without sleeping. Every process sharing a file must use the
	// same clock. Defaults to time.Now.
	Now func() time.Time
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

// validatePath rejects names that Open would not treat as a plain file.
func validatePath(path string) error {
	switch {
	case path == "":
		return errors.New("path is empty")
	case path == ":memory:":
		return errors.New("in-memory databases are not supported: each pooled connection would get its own database")
	case strings.HasPrefix(path, "file:"):
		return fmt.Errorf("path %q is a URI: pass a plain file path", path)
	case strings.ContainsRune(path, '?'):
		return fmt.Errorf("path %q contains '?': pass a plain file path, Open adds the parameters", path)
	}
	return nil
}
