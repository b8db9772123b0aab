// Package sqlitestore is idem's embedded default store: request-key records
// in an SQLite file, through database/sql and modernc.org/sqlite (pure Go,
// no cgo). Nothing to run beside the application, and the records can live
// in the application's own database file, so that a business write and the
// fenced completion of its request key commit in one transaction (InTx,
// CompleteTx).
//
// # Opening
//
//	db, err := sqlitestore.Open("idem.db", nil) // WAL, synchronous=FULL
//	if err != nil { ... }
//	defer db.Close()
//	if _, err := sqlitestore.Migrate(ctx, db); err != nil { ... }
//	st, err := sqlitestore.New(db, nil)
//	if err != nil { ... }
//	defer st.Close() // its prepared statements; db stays open
//
// Open puts every setting in the DSN, so every pooled connection has it:
// journal_mode=WAL, synchronous=FULL, busy_timeout (10 s), foreign_keys=ON,
// and _txlock=immediate, so that read-write transactions take the write
// lock at BEGIN. Callers that build their own pool use DSN with sql.Open.
// New never migrates: it refuses a database with pending migrations, and
// Migrate (or `idem migrate`) applies them.
//
// # Durability
//
// With WAL and synchronous=FULL every commit is synced to disk before it
// returns: a claim or completion that returned survives a crash of the
// process and of the machine, and Capabilities reports Durable. Weaker
// settings (synchronous NORMAL or OFF, a journal mode other than WAL) are
// refused by both Open and New unless the caller sets AllowWeakDurability in
// OpenConfig and Config. With synchronous=NORMAL in WAL mode a process crash
// loses nothing, but a power loss may undo the last commits: a request
// whose answer was sent may run again. With OFF, or without a journal, a
// power loss may also corrupt the file. Capabilities reports Durable false
// for all of these.
//
// # One writer
//
// SQLite lets one connection write a file at a time; readers never wait in
// WAL mode. Every write of the store holds the write lock for one short
// statement (Claim: one upsert, plus a read when it grants nothing), so
// writes take turns: inside one Store they queue in order on a semaphore,
// and across processes (several idem processes may open one file) in
// SQLite's lock, for at most the busy timeout, after which the call fails
// with a plain error (the caller reports the store unavailable). Claims
// that find a completed record or a live lease are answered from a
// lock-free read, so replays do not queue behind writes. A transaction from
// InTx holds the write lock until it ends: keep it short.
//
// # Records
//
// One row per key in table idem_keys (see migrations/): key, fingerprint
// and owner as raw bytes; state, epoch and the Unknown flag as integers;
// lease_until and expires_at in microseconds since the Unix epoch on the
// store's clock (lease_until is 0 when no lease runs); the response. A
// completed record with a 70-byte response takes about 250 bytes on disk,
// indexes included. Every write by a holder is one UPDATE whose WHERE
// compares key, epoch, owner and state, so a holder that lost its claim
// changes nothing and gets store.ErrFenced. Sweep deletes expired records in
// batches, oldest first, through the expires_at index.
//
// The statements live in sql/*.sql. Those of the request keys run on the
// pool are prepared once by New (compiling is a third of a point read's CPU
// time with this driver); inside a transaction they run unprepared, so
// CompleteTx accepts a transaction from any handle on the file.
//
// # Inbox
//
// Store is also a store.InboxStore (migration 002): the inbox rows of
// events, the state of order streams, parked events, the gap log and dead
// letters, in tables idem_inbox, idem_streams, idem_parked, idem_gaps and
// idem_dead_letters. The *Tx methods run in the caller's transaction, which
// holds the database's write lock from BEGIN (InTx), so that reading a
// stream's state locks the stream; Savepoint nests SQLite savepoints so
// that one event's writes can be undone and the transaction kept. The
// sweep of done inbox rows and old gaps runs in batches through partial
// and time indexes, and dead inbox rows stay until their dead letter is
// taken. The inbox's statements run unprepared: those outside a
// transaction serve operators and sweepers, off the hot path.
//
// # Outbox
//
// Store is also a store.OutboxStore (migration 003): outbound intents in
// table idem_outbox, the last sequence of every stream in
// idem_outbox_streams (kept after the stream's rows are swept, so that a
// stream's sequences never repeat), and disabled targets in
// idem_outbox_targets. EnqueueTx writes the intent, and for a stream bumps
// its sequence, in the caller's transaction, from any handle on the file.
// A claim is one write transaction, so each row goes to one relay, across
// processes too: it walks a partial index of the claimable rows in id
// order and stops at its limit, so it costs the same with a million
// intents waiting. Rows it may not take for a while are held out of that
// walk (column hold, see migrations/003_idem_outbox.sql): rows waiting for
// a due time or a lease's end, which the claim moves in once their time
// came; rows behind an earlier row of their stream, released by a trigger
// when that row ends; rows of a disabled target, released by
// EnableTarget. The claim still checks every condition on the rows it
// takes (a stream's row only when no earlier row of the stream is pending
// or in flight), so the holds decide its cost, never its answer.
// Completions, retries and kills are single UPDATEs fenced by id, epoch,
// owner and the in-flight state; SweepIntents deletes done rows in batches
// through a partial index of their end times, and dead rows stay for the
// operator (ListIntents, RequeueIntent). Like the store's other non-Tx
// methods, the outbox's take this store's writer turn and must not be
// called inside InTx.
package sqlitestore
