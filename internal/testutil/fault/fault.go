// Package fault wraps a store so that tests can make any call fail, before
// it reaches the store (the store never saw it) or after (the store applied
// it, but the caller saw an error, as with a timeout after the commit).
package fault

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// Op names a store call.
type Op string

const (
	Claim       Op = "claim"
	Complete    Op = "complete"
	CompleteTx  Op = "complete_tx"
	Release     Op = "release"
	Extend      Op = "extend"
	MarkUnknown Op = "mark_unknown"
	Get         Op = "get"
	Sweep       Op = "sweep"
	InTx        Op = "in_tx"
	BeginTx     Op = "begin_tx"
	CommitTx    Op = "commit_tx"
	RollbackTx  Op = "rollback_tx"
)

// Mode says how a call fails.
type Mode uint8

const (
	// Pass lets the call through.
	Pass Mode = iota
	// Before fails the call without calling the store.
	Before
	// After calls the store, then discards its answer and fails.
	After
)

// ErrInjected is the error injected calls return.
var ErrInjected = errors.New("fault: injected store failure")

// Plan decides the fate of each call. It is called once per call.
type Plan func(op Op) Mode

// Store wraps a store.Store with a Plan. Set the plan with SetPlan; a nil
// plan passes every call.
type Store struct {
	inner store.Store
	mu    sync.Mutex
	plan  Plan
	calls map[Op]int
}

var _ store.Store = (*Store)(nil)

// Wrap returns s behind a fault plan that passes everything.
func Wrap(s store.Store) *Store { return &Store{inner: s, calls: map[Op]int{}} }

// SetPlan replaces the plan.
func (s *Store) SetPlan(p Plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan = p
}

// Calls returns how many times op reached the wrapper.
func (s *Store) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *Store) mode(op Op) Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	if s.plan == nil {
		return Pass
	}
	return s.plan(op)
}

// call applies the plan around fn.
func call[T any](s *Store, op Op, fn func() (T, error)) (T, error) {
	var zero T
	switch s.mode(op) {
	case Before:
		return zero, ErrInjected
	case After:
		if _, err := fn(); err != nil {
			return zero, err
		}
		return zero, ErrInjected
	}
	return fn()
}

func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	return call(s, Claim, func() (store.ClaimResult, error) { return s.inner.Claim(ctx, p) })
}

func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	_, err := call(s, Complete, func() (struct{}, error) { return struct{}{}, s.inner.Complete(ctx, p) })
	return err
}

func (s *Store) Release(ctx context.Context, f store.Fence) error {
	_, err := call(s, Release, func() (struct{}, error) { return struct{}{}, s.inner.Release(ctx, f) })
	return err
}

func (s *Store) Extend(ctx context.Context, f store.Fence, lease time.Duration) (time.Time, error) {
	return call(s, Extend, func() (time.Time, error) { return s.inner.Extend(ctx, f, lease) })
}

func (s *Store) MarkUnknown(ctx context.Context, f store.Fence) error {
	_, err := call(s, MarkUnknown, func() (struct{}, error) { return struct{}{}, s.inner.MarkUnknown(ctx, f) })
	return err
}

func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	return call(s, Get, func() (store.Record, error) { return s.inner.Get(ctx, key) })
}

func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	return call(s, Sweep, func() (int, error) { return s.inner.Sweep(ctx, limit) })
}

func (s *Store) Capabilities() store.Capabilities { return s.inner.Capabilities() }

// TxStore wraps a store.TxStore with a Plan; InTx and CommitTx with After
// commit, then fail, as a lost answer to COMMIT does. BeginTx with After
// begins and rolls back, then fails.
type TxStore[TX any] struct {
	*Store
	inner store.TxStore[TX]
}

var _ store.TxStore[any] = (*TxStore[any])(nil)

// WrapTx returns s behind a fault plan that passes everything.
func WrapTx[TX any](s store.TxStore[TX]) *TxStore[TX] {
	return &TxStore[TX]{Store: Wrap(s), inner: s}
}

func (s *TxStore[TX]) InTx(ctx context.Context, fn func(ctx context.Context, tx TX) error) error {
	_, err := call(s.Store, InTx, func() (struct{}, error) { return struct{}{}, s.inner.InTx(ctx, fn) })
	return err
}

func (s *TxStore[TX]) BeginTx(ctx context.Context) (TX, error) {
	var zero TX
	switch s.Store.mode(BeginTx) {
	case Before:
		return zero, ErrInjected
	case After:
		tx, err := s.inner.BeginTx(ctx)
		if err == nil {
			_ = s.inner.RollbackTx(ctx, tx)
		}
		return zero, ErrInjected
	}
	return s.inner.BeginTx(ctx)
}

func (s *TxStore[TX]) CommitTx(ctx context.Context, tx TX) error {
	m := s.Store.mode(CommitTx)
	if m == Before {
		// The transaction must still end: roll it back, as a COMMIT that
		// never reached the server leaves it to.
		_ = s.inner.RollbackTx(ctx, tx)
		return ErrInjected
	}
	if err := s.inner.CommitTx(ctx, tx); err != nil {
		return err
	}
	if m == After {
		return ErrInjected
	}
	return nil
}

func (s *TxStore[TX]) RollbackTx(ctx context.Context, tx TX) error {
	_, err := call(s.Store, RollbackTx, func() (struct{}, error) { return struct{}{}, s.inner.RollbackTx(ctx, tx) })
	return err
}

func (s *TxStore[TX]) CompleteTx(ctx context.Context, tx TX, p store.CompleteParams) error {
	_, err := call(s.Store, CompleteTx, func() (struct{}, error) { return struct{}{}, s.inner.CompleteTx(ctx, tx, p) })
	return err
}

// Always returns a plan that fails every call to one of ops in mode m.
func Always(m Mode, ops ...Op) Plan {
	return func(op Op) Mode {
		for _, o := range ops {
			if o == op {
				return m
			}
		}
		return Pass
	}
}

// Once returns a plan that fails the first call to op in mode m.
func Once(m Mode, op Op) Plan {
	var mu sync.Mutex
	done := false
	return func(o Op) Mode {
		mu.Lock()
		defer mu.Unlock()
		if o != op || done {
			return Pass
		}
		done = true
		return m
	}
}
