// Package pgstore is the PostgreSQL store for idem's request keys, for its
// event inbox and per-stream order, and for its outbox, on pgx v5.
// Many idem processes may share one database: every state change is one
// atomic statement, and every write by a claim holder is fenced by its
// epoch and owner.
//
// # Opening
//
// The caller opens the pool, migrates once, and hands the pool to New:
//
//	pool, err := pgxpool.New(ctx, "postgres://idem@db/app")
//	...
//	if _, err := pgstore.Migrate(ctx, pool); err != nil { ... } // or `idem migrate`
//	s, err := pgstore.New(pool, nil)
//
// The store works in the first schema of the pool's search_path (set it
// with the search_path runtime parameter to keep idem's tables apart);
// Migrate puts the tables and its version table idem_migrations there too.
//
// New never migrates and never writes: on a schema that lacks any of the
// store's migrations it fails with ErrNotMigrated, because changing a shared
// database is the operator's decision. Migrate takes an advisory lock, so
// several processes starting together apply each migration once.
//
// # Clock
//
// Leases and expiry use one clock, the store's: by default the server's
// clock_timestamp(), so that processes whose clocks disagree still agree on
// who holds a key. Config.Now replaces it (tests pass a settable clock); the
// reading is sent with each statement. Times are kept to the microsecond.
//
// # Transactions
//
// Store implements store.TxStore[pgx.Tx]. InTx begins a transaction on the
// pool; the caller writes its business rows in it with the same pgx.Tx and
// calls CompleteTx, so the effect and the stored response commit together
// or not at all.
//
// The transaction costs one round trip per statement: its BEGIN goes out
// in one pipeline with its first statement (pgx's Batch.BeginTx), and the
// store's own last writes that need no answer (an ordered stream's new
// state) go out with its COMMIT. Statements run in the order they were
// issued; a queued write that fails fails the statement or the commit it
// went out with, and that commit reports pgx.ErrTxCommitRollback. A
// savepoint (Begin), Conn, CopyFrom, Prepare or LargeObjects sends what is
// pending first and stops the queueing. See lazytx.go.
//
// # Statements
//
// The SQL is in sql/*.sql, one file per operation, and the schema in
// migrations/. Claim is one statement: a replay or an in-flight duplicate
// is answered by a read alone, a grant is an INSERT ... ON CONFLICT DO
// UPDATE whose WHERE is the takeover rule, and a claim that loses a race
// reads the winner's row under the lock the upsert took (see sql/claim.sql).
// Sweep deletes expired records in batches with FOR UPDATE SKIP LOCKED, so
// sweepers in several processes never wait on each other or on a claim.
//
// # Inbox
//
// Store also implements store.InboxStore[pgx.Tx] on the tables of
// migrations/002_idem_inbox.sql; its *Tx methods run in the caller's
// transaction. Concurrent transactions are serialised by PostgreSQL's
// locks, never by the process: two recording one event wait on the inbox
// row's primary key, and LockStreamTx holds the stream row's lock (SELECT
// ... FOR UPDATE, or the insert of a placeholder row for a stream never
// seen, so that a new stream is locked too) until the transaction ends.
// SweepInbox deletes in batches with FOR UPDATE SKIP LOCKED, like Sweep.
//
// # Outbox
//
// Store also implements store.OutboxStore[pgx.Tx] and store.OutboxWaker on
// the tables of migrations/003_idem_outbox.sql. EnqueueTx runs one
// statement in the caller's transaction: the intent's insert, for a stream
// an upsert of the stream's row that takes the next sequence, and
// pg_notify. The stream's row stays locked until the transaction ends, so
// a stream's sequences are gapless and follow commit order; a transaction
// enqueuing to several streams should take them in a fixed order, or two
// such transactions may deadlock (PostgreSQL fails one of them).
//
// ClaimIntents is one statement: a CTE selects the due rows in id order,
// passing over rows of skipped targets and stream rows with an earlier
// live row of their stream, FOR UPDATE SKIP LOCKED, and an UPDATE puts them
// in flight with a new epoch. Relays in several processes claim side by
// side without waiting on each other; no row is claimed twice, and no two
// rows of a stream are in flight at once (the argument is in
// ClaimIntents's doc). Results are fenced UPDATEs, as for keys. The claim
// walks a partial index of the live rows keyed by id and the time each
// becomes claimable, so done and dead rows cost nothing, and rows not due
// yet or under a live lease are passed over in the index; rows of a
// skipped target and stream rows waiting behind their stream's head are
// read and rejected one by one, so a backlog of either (a target disabled
// for long, a long stream behind a failing head) slows every claim in
// proportion, about 0.3 ms and 8 ms per 1,000 rows on the machine
// measured.
//
// OutboxWakeups holds one pooled connection for as long as its context
// lasts, LISTENing on the channel idem_outbox; EnqueueTx notifies it with
// the schema as payload, so that stores in several schemas of one database
// do not wake each other. PostgreSQL delivers a notification only when the
// transaction commits, and serialises the commits of notifying
// transactions across the cluster, from the commit's start until its WAL
// is flushed: small enqueuing transactions, many at once, commit one at a
// time (about a quarter of the rate of the same transactions without
// pg_notify, on the machine measured). Config.OutboxNotifyAfterCommit
// leaves the NOTIFY out of EnqueueTx: the caller sends NotifyOutbox after
// its commit, in a transaction of its own that writes nothing
// (BenchmarkEnqueue: 1.3× the transactions per second with 32 clients,
// the extra statement included).
//
// # Durability
//
// Capabilities().Durable is read from the server at New: false when fsync
// or synchronous_commit is off, because a commit may then be lost in a crash
// after it was acknowledged.
package pgstore
