package pgstore

import (
	"strings"
	"time"
)

// ClaimSQL is the claim statement with its plain read (seen) blind, as a
// record that changed after the statement's snapshot would leave it: tests
// drive it to check the upsert's own conditions.
var ClaimSQL = blindSeen(claimSQL)

func blindSeen(sql string) string {
	const from = "FROM idem_keys AS k, clock\n    WHERE k.key = $1"
	if !strings.Contains(sql, from) {
		panic("claim.sql: its seen read is not where the tests look for it")
	}
	return strings.Replace(sql, from, "FROM idem_keys AS k, clock\n    WHERE false AND k.key = $1", 1)
}

// Migrations lets tests migrate down, which Migrate never does.
var Migrations = migrations

// HoldGroup takes every group turn, so that writes queue until release.
func HoldGroup(s *Store) (release func()) {
	s.group.turn <- struct{}{}
	for range cap(s.group.spare) {
		s.group.spare <- struct{}{}
	}
	return func() {
		for range cap(s.group.spare) {
			<-s.group.spare
		}
		<-s.group.turn
	}
}

// GroupQueued is the number of writes waiting for a turn.
func GroupQueued(s *Store) int {
	s.group.mu.Lock()
	defer s.group.mu.Unlock()
	return len(s.group.queue)
}

// GroupStats returns the number of group commits of more than one write,
// and the number of writes they held.
func GroupStats(s *Store) (commits, items int64) {
	return s.group.commits.Load(), s.group.items.Load()
}

// SetGroupLeaders sets how many groups may run at once, and returns the
// previous number. With as many as there are callers and no stall wait
// (SetGroupStall(0)), no write ever waits and groups never form: every
// write is its own autocommit.
func SetGroupLeaders(n int) (old int) { old, groupLeaders = groupLeaders, n; return old }

// SetGroupStall sets how long a write waits for a running group before it
// may lead a further one, and returns the old value.
func SetGroupStall(d time.Duration) (old time.Duration) { old, groupStall = groupStall, d; return old }

// OnGroupSent sets the hook run when a group's pipeline has been sent.
func OnGroupSent(f func(keys []string)) { groupSent = f }

// SweepSQL lets tests read the sweep statement's plan.
var SweepSQL = sweepSQL

// Later queues a write in a transaction of the store, as its own last
// writes are.
var Later = later

// ErrQueued is what a statement reports when a write queued before it
// failed.
var ErrQueued = errQueued

// LazyCommits is the number of groups and lone writes committed without
// waiting for the disk (transactional claims alone).
func LazyCommits(s *Store) int64 { return s.group.lazyCommits.Load() }

// LazyCommitSQL is the statement that makes a pipeline's commit lazy.
const LazyCommitSQL = lazyCommitSQL
