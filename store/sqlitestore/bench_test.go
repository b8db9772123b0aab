package sqlitestore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/storetest/flowtest"
)

// The benchmarks below measure the store on the work of one request, and a
// raw baseline doing the same work with hand-written SQL on the same table
// and settings (WAL, synchronous=FULL), so that the store's overhead can be
// read off directly:
//
//   - New: a new key is claimed and completed (store: Claim + Complete;
//     raw: one INSERT-if-absent + one UPDATE).
//   - Replay: a completed key is asked for again (store: Claim answering
//     from the stored record; raw: one point SELECT).
//
// Each runs sequentially and with b.RunParallel. BenchmarkEngine runs the
// shared suite (key.Guard over this store).

var benchResponse = []byte(`{"id":"ch_123","amount":1000,"currency":"eur","status":"succeeded"}`)

const (
	benchFingerprint = "fingerprint-0123456789abcdef0123"
	benchOwner       = "owner-0123456789"
	benchRetention   = 24 * time.Hour
)

func benchStore(b *testing.B) (*Store, *sql.DB) {
	b.Helper()
	db, _ := openMigrated(b, nil)
	s, err := New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, db
}

func benchKey(i int64) string { return fmt.Sprintf("%032d", i) }

func BenchmarkEngine(b *testing.B) {
	flowtest.Bench(b, func(b *testing.B) store.Store {
		s, _ := benchStore(b)
		return s
	})
}

func BenchmarkStore(b *testing.B) {
	b.Run("New", func(b *testing.B) {
		s, _ := benchStore(b)
		var n atomic.Int64
		work := func() {
			key := benchKey(n.Add(1))
			res, err := s.Claim(context.Background(), store.ClaimParams{
				Key: key, Fingerprint: []byte(benchFingerprint), Owner: benchOwner,
				Lease: time.Minute, Retention: benchRetention,
			})
			if err != nil || !res.Claimed {
				b.Fatalf("Claim = %+v, %v", res, err)
			}
			if err := s.Complete(context.Background(), store.CompleteParams{Fence: fenceOf(res.Record), Response: benchResponse, Retention: benchRetention}); err != nil {
				b.Fatal(err)
			}
		}
		flowtest.RunSeqAndParallel(b, work)
	})

	b.Run("Replay", func(b *testing.B) {
		s, _ := benchStore(b)
		const keys = 1000
		p := store.ClaimParams{Fingerprint: []byte(benchFingerprint), Owner: benchOwner, Lease: time.Minute, Retention: benchRetention}
		for i := range int64(keys) {
			p.Key = benchKey(i)
			res, err := s.Claim(context.Background(), p)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(context.Background(), store.CompleteParams{Fence: fenceOf(res.Record), Response: benchResponse, Retention: benchRetention}); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		work := func() {
			p := p
			p.Key = benchKey(n.Add(1) % keys)
			res, err := s.Claim(context.Background(), p)
			if err != nil || res.Claimed || res.Record.State != store.StateDone {
				b.Fatalf("Claim = %+v, %v", res, err)
			}
		}
		flowtest.RunSeqAndParallel(b, work)
	})
}

// BenchmarkRaw is the baseline: the least SQL that does the same work,
// prepared once as the store's statements are, on the same table.
func BenchmarkRaw(b *testing.B) {
	prepare := func(b *testing.B, db *sql.DB, query string) *sql.Stmt {
		st, err := db.Prepare(query)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}

	b.Run("New", func(b *testing.B) {
		_, db := benchStore(b)
		insert := prepare(b, db, `INSERT INTO idem_keys (key, fingerprint, state, epoch, owner, lease_until, expires_at)
			VALUES (?, ?, 1, 1, ?, ?, ?) ON CONFLICT (key) DO NOTHING`)
		update := prepare(b, db, `UPDATE idem_keys SET state = 2, response = ?, lease_until = 0, expires_at = ?
			WHERE key = ? AND epoch = 1 AND owner = ? AND state = 1`)
		var n atomic.Int64
		work := func() {
			key := []byte(benchKey(n.Add(1)))
			now := time.Now().UnixMicro()
			res, err := insert.Exec(key, []byte(benchFingerprint), []byte(benchOwner), now+60e6, now+86400e6)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				b.Fatal("key existed")
			}
			if _, err := update.Exec(benchResponse, now+86400e6, key, []byte(benchOwner)); err != nil {
				b.Fatal(err)
			}
		}
		flowtest.RunSeqAndParallel(b, work)
	})

	b.Run("Replay", func(b *testing.B) {
		_, db := benchStore(b)
		const keys = 1000
		now := time.Now().UnixMicro()
		for i := range int64(keys) {
			if _, err := db.Exec(`INSERT INTO idem_keys (key, fingerprint, state, epoch, owner, expires_at, response) VALUES (?, ?, 2, 1, ?, ?, ?)`,
				[]byte(benchKey(i)), []byte(benchFingerprint), []byte(benchOwner), now+86400e6, benchResponse); err != nil {
				b.Fatal(err)
			}
		}
		get := prepare(b, db, `SELECT state, response FROM idem_keys WHERE key = ?`)
		var n atomic.Int64
		work := func() {
			var state int
			var resp []byte
			if err := get.QueryRow([]byte(benchKey(n.Add(1)%keys))).Scan(&state, &resp); err != nil || state != 2 {
				b.Fatalf("SELECT = %d, %v", state, err)
			}
		}
		flowtest.RunSeqAndParallel(b, work)
	})
}

// BenchmarkDiskSize fills a file with b.N completed records through the
// store (SHA-256 keys, as package key makes them, so they arrive in random
// order like real traffic) and reports the file's size per record, indexes
// included. Durability is off for speed; it does not change the layout.
// For the figure in the docs:
//
//	go test -run '^$' -bench DiskSize -benchtime 1000000x ./store/sqlitestore
func BenchmarkDiskSize(b *testing.B) {
	db, _ := openMigrated(b, &OpenConfig{Synchronous: SynchronousOff, AllowWeakDurability: true})
	s, err := New(db, &Config{AllowWeakDurability: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := store.ClaimParams{Fingerprint: make([]byte, 32), Owner: benchOwner, Lease: time.Minute, Retention: benchRetention}
	i := 0
	for b.Loop() {
		i++
		k := sha256.Sum256([]byte(strconv.Itoa(i)))
		p.Key = string(k[:])
		res, err := s.Claim(ctx, p)
		if err != nil || !res.Claimed {
			b.Fatalf("Claim = %+v, %v", res, err)
		}
		if err := s.Complete(ctx, store.CompleteParams{Fence: fenceOf(res.Record), Response: benchResponse, Retention: benchRetention}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	var pages, pageSize int64
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		b.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(pages*pageSize)/float64(i), "disk-B/record")
}
