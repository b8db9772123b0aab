package sqlitestore

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

func TestDurabilitySettings(t *testing.T) {
	t.Parallel()

	t.Run("OpenRefusesWeak", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []*OpenConfig{
			{Synchronous: SynchronousNormal},
			{Synchronous: SynchronousOff},
			{JournalMode: JournalDelete},
			{JournalMode: JournalMemory},
		} {
			_, err := Open(filepath.Join(t.TempDir(), "x.db"), cfg)
			if err == nil || !strings.Contains(err.Error(), "AllowWeakDurability") {
				t.Fatalf("Open(%+v) = %v, want a refusal naming AllowWeakDurability", cfg, err)
			}
		}
	})

	t.Run("OpenRejectsBadValues", func(t *testing.T) {
		t.Parallel()
		for cfg, field := range map[*OpenConfig]string{
			{Synchronous: "full; ATTACH 'x' AS x"}: "OpenConfig.Synchronous",
			{JournalMode: "wal2"}:                  "OpenConfig.JournalMode",
			{BusyTimeout: -time.Second}:            "OpenConfig.BusyTimeout",
			{MaxOpenConns: -1}:                     "OpenConfig.MaxOpenConns",
		} {
			_, err := Open(filepath.Join(t.TempDir(), "x.db"), cfg)
			if err == nil || !strings.Contains(err.Error(), field) {
				t.Fatalf("Open(%+v) = %v, want an error naming %s", cfg, err, field)
			}
		}
		for _, path := range []string{"", ":memory:", "file:x.db", "x.db?mode=ro"} {
			if _, err := Open(path, nil); err == nil {
				t.Fatalf("Open(%q) succeeded, want a refusal", path)
			}
		}
	})

	t.Run("NewRefusesWeak", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			cfg     *OpenConfig
			setting string
		}{
			{&OpenConfig{Synchronous: SynchronousNormal, AllowWeakDurability: true}, "synchronous is NORMAL"},
			{&OpenConfig{Synchronous: SynchronousOff, AllowWeakDurability: true}, "synchronous is OFF"},
			{&OpenConfig{JournalMode: JournalDelete, AllowWeakDurability: true}, "journal_mode is delete"},
			{&OpenConfig{JournalMode: JournalTruncate, AllowWeakDurability: true}, "journal_mode is truncate"},
		} {
			db, _ := openMigrated(t, c.cfg)
			if _, err := New(db, nil); err == nil || !strings.Contains(err.Error(), c.setting) {
				t.Fatalf("New over %+v = %v, want a refusal naming %q", c.cfg, err, c.setting)
			}
			s, err := New(db, &Config{AllowWeakDurability: true})
			if err != nil {
				t.Fatalf("New with AllowWeakDurability over %+v: %v", c.cfg, err)
			}
			wantDurable := c.cfg.Synchronous == "" // rollback journal with FULL
			if got := s.Capabilities(); got.Durable != wantDurable || !got.Transactions || !got.Shared {
				t.Fatalf("Capabilities over %+v = %+v, want Durable %v", c.cfg, got, wantDurable)
			}
		}
	})

	t.Run("NewRefusesPlainHandle", func(t *testing.T) {
		t.Parallel()
		// A handle opened without Open's DSN: rollback journal.
		db, err := sql.Open(DriverName, filepath.Join(t.TempDir(), "plain.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if _, err := Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		if _, err := New(db, nil); err == nil || !strings.Contains(err.Error(), "journal_mode") {
			t.Fatalf("New = %v, want a refusal naming journal_mode", err)
		}
	})

	t.Run("DefaultIsDurable", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []*OpenConfig{nil, {Synchronous: SynchronousExtra}} {
			db, _ := openMigrated(t, cfg)
			s, err := New(db, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Capabilities(); got != (store.Capabilities{Durable: true, Transactions: true, Shared: true}) {
				t.Fatalf("Capabilities = %+v", got)
			}
			// Every pooled connection has the settings, not just the first.
			conns := make([]*sql.Conn, 3)
			for i := range conns {
				if conns[i], err = db.Conn(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i, c := range conns {
				var mode string
				var sync, busy, fk int
				for q, dst := range map[string]any{
					"PRAGMA journal_mode": &mode, "PRAGMA synchronous": &sync,
					"PRAGMA busy_timeout": &busy, "PRAGMA foreign_keys": &fk,
				} {
					if err := c.QueryRowContext(ctx, q).Scan(dst); err != nil {
						t.Fatal(err)
					}
				}
				if mode != "wal" || sync < 2 || busy != 10000 || fk != 1 {
					t.Fatalf("conn %d: journal_mode=%s synchronous=%d busy_timeout=%d foreign_keys=%d", i, mode, sync, busy, fk)
				}
				c.Close()
			}
		}
	})
}

func TestMigrations(t *testing.T) {
	t.Parallel()

	t.Run("NewRefusesPending", func(t *testing.T) {
		t.Parallel()
		db, err := Open(filepath.Join(t.TempDir(), "idem.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if _, err := New(db, nil); err == nil || !strings.Contains(err.Error(), "Migrate") {
			t.Fatalf("New on an empty file = %v, want a refusal telling to run Migrate", err)
		}
		res, err := Migrate(ctx, db)
		if err != nil || len(res) == 0 || res[0].Version != 1 {
			t.Fatalf("Migrate = %+v, %v; want version 1 applied", res, err)
		}
		if res, err := Migrate(ctx, db); err != nil || len(res) != 0 {
			t.Fatalf("second Migrate = %+v, %v; want nothing applied", res, err)
		}
		if _, err := New(db, nil); err != nil {
			t.Fatalf("New after Migrate: %v", err)
		}
	})

	t.Run("GetUsesKeyIndex", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		plan := queryPlan(t, b.db, getSQL, sql.Named("key", []byte("k")), sql.Named("now", int64(0)))
		if !strings.Contains(plan, "USING INDEX sqlite_autoindex_idem_keys_1 (key=?)") {
			t.Fatalf("get plan does not search the key index:\n%s", plan)
		}
	})
}
