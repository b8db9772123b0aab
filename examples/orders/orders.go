package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"

	"github.com/idemhq/idem/event"
	"github.com/idemhq/idem/inbox"
	"github.com/idemhq/idem/order"
	"github.com/idemhq/idem/signature"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/webhook"
)

// The shop's side of the contract: who sends, what, signed with what.
const (
	// source is the CloudEvents source of every order event; the endpoints
	// refuse any other (403 event-not-owned).
	source = "https://shop.example/orders"
	// typeState is a snapshot event: its data is the whole order (state).
	typeState = "example.shop.order.state"
	// typeChange is a delta event: its data is one change (change).
	typeChange = "example.shop.order.change"
	// secret is the signing secret the shop and this service share
	// (SchemeIdem: its bytes as given, at least 16).
	secret = "orders-demo-signing-secret-2030"

	// The two endpoints. Each has its own processor: one orders its
	// streams as snapshots, the other as deltas.
	pathSnapshot = "/events/snapshot"
	pathDelta    = "/events/delta"
)

// ordersSchema is the business side, in the same SQLite file as idem's
// tables so that an event's effect commits with its inbox row.
//
// orders is the projection: one row per order. order_log has one row per
// event applied, written by the same apply call; it deliberately has no
// UNIQUE constraint, so that an event applied twice would show as two rows
// instead of failing (the only thing that keeps it to one is idem).
const ordersSchema = `
CREATE TABLE IF NOT EXISTS orders (
	order_id TEXT    PRIMARY KEY,
	mode     TEXT    NOT NULL, -- snapshot or delta: which events keep this order
	status   TEXT    NOT NULL,
	paid     INTEGER NOT NULL,
	seq      INTEGER NOT NULL  -- the sequence of the last event applied
);
CREATE TABLE IF NOT EXISTS order_log (
	id       INTEGER PRIMARY KEY, -- the order of application
	order_id TEXT    NOT NULL,
	seq      INTEGER NOT NULL,
	event_id TEXT    NOT NULL,
	add_paid INTEGER NOT NULL,    -- what the event added to paid
	status   TEXT    NOT NULL,    -- the status after it
	paid     INTEGER NOT NULL     -- paid after it
);
CREATE INDEX IF NOT EXISTS order_log_order ON order_log (order_id, id);`

// openOrders opens (creating) the SQLite file at path, applies idem's
// migrations, creates the business tables, and returns the handle with a
// store over it. Several processes may do this on one file in turn.
func openOrders(ctx context.Context, path string) (*sql.DB, *sqlitestore.Store, error) {
	db, err := sqlitestore.Open(path, nil)
	if err != nil {
		return nil, nil, err
	}
	if _, err := sqlitestore.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, nil, err
	}
	if _, err := db.ExecContext(ctx, ordersSchema); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("create orders: %w", err)
	}
	st, err := sqlitestore.New(db, nil)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, st, nil
}

// state is the data of a snapshot event: the whole order as the shop has
// it after the event.
type state struct {
	Status string `json:"status"`
	Paid   int64  `json:"paid"`
}

// change is the data of a delta event: what the event changes. Add is added
// to the paid amount; a non-empty Status replaces the status.
type change struct {
	Add    int64  `json:"add,omitempty"`
	Status string `json:"status,omitempty"`
}

// statuses are the statuses an order may have.
var statuses = []string{"CREATED", "PAYING", "PAID", "SHIPPED", "CANCELLED"}

// applyState applies a snapshot event in tx: the order becomes what the
// event says. The inbox has already dropped stale snapshots, so it never
// sees one older than the row.
func applyState(ctx context.Context, tx *sql.Tx, ev event.Event) error {
	var s state
	if err := decodeData(ev, typeState, &s); err != nil {
		return err
	}
	if !slices.Contains(statuses, s.Status) || s.Paid < 0 {
		return inbox.Invalid(fmt.Errorf("state %+v: status must be one of %v and paid >= 0", s, statuses))
	}
	cur, err := lockOrder(ctx, tx, ev.Subject, order.ModeSnapshot)
	if err != nil {
		return err
	}
	return writeOrder(ctx, tx, ev, s.Paid-cur.Paid, s)
}

// applyChange applies a delta event in tx: add to the paid amount, set the
// status. The inbox calls it once per event, in sequence order, so the row
// is the sum of the events.
func applyChange(ctx context.Context, tx *sql.Tx, ev event.Event) error {
	var c change
	if err := decodeData(ev, typeChange, &c); err != nil {
		return err
	}
	if (c.Add == 0 && c.Status == "") || (c.Status != "" && !slices.Contains(statuses, c.Status)) {
		return inbox.Invalid(fmt.Errorf("change %+v: add to paid, or set a status among %v", c, statuses))
	}
	cur, err := lockOrder(ctx, tx, ev.Subject, order.ModeDelta)
	if err != nil {
		return err
	}
	next := state{Status: cur.Status, Paid: cur.Paid + c.Add}
	if c.Status != "" {
		next.Status = c.Status
	}
	return writeOrder(ctx, tx, ev, c.Add, next)
}

// decodeData checks the event's type and decodes its JSON data into v,
// strictly: a payload that does not fit is invalid for good (dead-lettered).
func decodeData(ev event.Event, typ string, v any) error {
	if ev.Type != typ {
		return inbox.Invalid(fmt.Errorf("type %q: this endpoint takes %q", ev.Type, typ))
	}
	if ev.Subject == "" {
		return inbox.Invalid(errors.New("no subject: it names the order"))
	}
	dec := json.NewDecoder(bytes.NewReader(ev.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return inbox.Invalid(fmt.Errorf("data: %w", err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return inbox.Invalid(errors.New("data: more than one JSON value"))
	}
	return nil
}

// orderRow is one row of orders.
type orderRow struct {
	ID     string
	Mode   string
	Status string
	Paid   int64
	Seq    int64
}

// lockOrder returns the order's row, creating it (CREATED, nothing paid) on
// its first event. An order kept by the other mode's events is refused:
// one order is one stream, in one mode.
func lockOrder(ctx context.Context, tx *sql.Tx, id string, mode order.Mode) (orderRow, error) {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (order_id, mode, status, paid, seq) VALUES (?, ?, 'CREATED', 0, 0)
		ON CONFLICT (order_id) DO NOTHING`, id, mode.String()); err != nil {
		return orderRow{}, err
	}
	r := orderRow{ID: id}
	err := tx.QueryRowContext(ctx, `SELECT mode, status, paid, seq FROM orders WHERE order_id = ?`, id).
		Scan(&r.Mode, &r.Status, &r.Paid, &r.Seq)
	if err != nil {
		return orderRow{}, err
	}
	if r.Mode != mode.String() {
		return orderRow{}, inbox.Invalid(fmt.Errorf("order %s is kept from %s events, not %s", id, r.Mode, mode))
	}
	return r, nil
}

// writeOrder stores the order's new state and logs the event's application.
func writeOrder(ctx context.Context, tx *sql.Tx, ev event.Event, added int64, s state) error {
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = ?, paid = ?, seq = ? WHERE order_id = ?`,
		s.Status, s.Paid, ev.Sequence, ev.Subject); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO order_log (order_id, seq, event_id, add_paid, status, paid) VALUES (?, ?, ?, ?, ?, ?)`,
		ev.Subject, ev.Sequence, ev.ID, added, s.Status, s.Paid)
	return err
}

// readOrder returns the order's row; ok is false when there is none.
func readOrder(ctx context.Context, db *sql.DB, id string) (r orderRow, ok bool, err error) {
	r.ID = id
	err = db.QueryRowContext(ctx, `SELECT mode, status, paid, seq FROM orders WHERE order_id = ?`, id).
		Scan(&r.Mode, &r.Status, &r.Paid, &r.Seq)
	if errors.Is(err, sql.ErrNoRows) {
		return orderRow{ID: id}, false, nil
	}
	return r, err == nil, err
}

// readOrders returns every row of orders, by id.
func readOrders(ctx context.Context, db *sql.DB) ([]orderRow, error) {
	rows, err := db.QueryContext(ctx, `SELECT order_id, mode, status, paid, seq FROM orders ORDER BY order_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []orderRow
	for rows.Next() {
		var r orderRow
		if err := rows.Scan(&r.ID, &r.Mode, &r.Status, &r.Paid, &r.Seq); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// loggedSeqs returns the sequences applied to the order, in the order they
// were applied.
func loggedSeqs(ctx context.Context, db *sql.DB, id string) ([]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT seq FROM order_log WHERE order_id = ? ORDER BY id`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// newEndpoint returns the processor and the webhook handler of one endpoint
// over st: events signed with secret, from source only, ordered per order in
// mode, applied by apply in the inbox's transaction. log receives idem's
// log lines (gaps, dead letters); tune, if set, changes the rest of the
// processor's configuration.
func newEndpoint(st *sqlitestore.Store, mode order.Mode, apply inbox.ApplyFunc[*sql.Tx], log *slog.Logger, tune func(*inbox.Config)) (*inbox.Processor[*sql.Tx], http.Handler, error) {
	cfg := &inbox.Config{Mode: mode, Logger: log}
	if tune != nil {
		tune(cfg)
	}
	p, err := inbox.New[*sql.Tx](st, apply, cfg)
	if err != nil {
		return nil, nil, err
	}
	v, err := signature.NewVerifier(signature.SchemeIdem, []string{secret}, nil)
	if err != nil {
		return nil, nil, err
	}
	h, err := webhook.New(p, &webhook.Config{
		Verifier: v,
		Event:    &event.Config{Owner: event.SourcePrefixes(source)},
		Logger:   log,
	})
	if err != nil {
		return nil, nil, err
	}
	return p, h, nil
}
