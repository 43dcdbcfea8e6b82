// Package twopc moves money between MongoDB documents with the two-phase
// commit pattern of MongoDB's tutorial ("Perform Two Phase Commits"),
// without multi-document transactions. It runs on a standalone mongod, a
// replica set, a sharded cluster, and MongoDB-compatible servers, and
// leaves a transfer log (the transactions collection) that can be audited.
//
// # Data model
//
// Accounts are documents {_id, balance, pendingTransactions: [...]} with
// balance an int64 in minor units (cents); the library adds pendingCredit
// (credits applied and not yet settled) and fencedTransactions. Transactions are documents {_id, source,
// destination, value, state, lastModified, application}, with
// lastModified written by the server ($currentDate). Account ids may be
// any value that can be an _id: string, ObjectID, int64.
//
// # Protocol
//
// A Coordinator runs each transfer through the states initial → pending →
// applied → done (see State), with conditional single-document writes:
//
//  1. insert the transaction already pending and claimed by this
//     application (one upsert keyed by a fresh _id, so a retry finds it);
//  2. apply both legs in one bulk write: the debit {_id: source,
//     pendingTransactions: {$ne: id}, fencedTransactions: {$ne: id},
//     balance: {$gte: value}} → {$inc: {balance: -value}, $push:
//     {pendingTransactions: id}}, and the credit likewise, except that it
//     goes to pendingCredit, not yet to balance;
//  3. pending → applied, guarded by state and claim: the commit point.
//     Commits that arrive while another of the same coordinator is being
//     written go together in one update, each still guarded by its own
//     state and claim (see commit.go).
//
// Transfer returns there, after three round trips (the tutorial takes
// eight). Settling follows, in the background and in batches: pull the id
// from both accounts' pendingTransactions while adding it to
// fencedTransactions and moving the credit from pendingCredit to balance
// (one bulk write), then applied → done (one write).
// A transfer settled alone costs five data commands; under load, fewer.
//
// A leg that cannot apply (overdraft, missing account, overflow, a balance
// that is not an integer) rolls the transaction back: pending → canceling,
// fence and undo the legs, canceling → canceled. A Canceler does the same
// on request; a Recoverer finishes transactions whose owner stopped.
//
// # Guarantees
//
// Exactly once: every leg of a done transaction is applied exactly once,
// and no leg of a canceled one remains, whatever the crashes, retries,
// lost replies, races between recoverers, or races between an owner and a
// canceler. The invariant that follows: each balance equals its opening
// balance plus the net of its done transactions.
//
// Ownership: one application owns a transaction at a time, through a claim
// token written by a conditional update. Every state move is guarded by the
// state and the claim (see the move type in state.go), so a process that
// stalled, was taken over or was canceled cannot move the state when it
// resumes. A Recoverer or a Canceler of another application takes a
// transaction over only once its lastModified is older than StaleAfter, and
// the takeover is itself conditional on the claim and lastModified it read,
// so two of them cannot both win.
//
// Fences close the tutorial's hazard. In the tutorial, a rollback or
// cleanup pulls the id from an account, after which a stalled applier that
// resumes finds its guard {pendingTransactions: {$ne: id}} matching again
// and applies a leg a second time: money from nowhere. Here, settling and
// rollback leave the id in the account's fencedTransactions, which every
// apply also checks; rollback fences an account before it undoes its leg,
// so an apply that raced ahead is seen and undone and one that comes after
// matches nothing. A rollback fences an account that does not exist with a
// tombstone document, which OpenAccount adopts, so an account opened later
// cannot take a stalled leg either.
//
// A Recoverer removes a transaction's fences once it has been final for
// its retention: the longest WithFenceRetention (at least StaleAfter) and
// StaleAfter of every process that claimed or finished it, recorded in the
// transaction (leaseMs). The owner checks its claim before every attempt
// of a leg write: it renews the claim once a quarter of StaleAfter has
// passed since it took it (by its own monotonic clock, measured from when
// it sent the claiming write), and sends the write with a deadline of half
// of StaleAfter after the claim, which the driver enforces and passes to
// the server as maxTimeMS. So no leg write is sent on a claim another
// application may have taken, and the assumption left is precise: a leg
// write is executed by the server no later than the retention after its
// transaction became final; that is, no request sits in a network or a
// server queue for longer than the retention minus half of StaleAfter.
// Raise WithFenceRetention where that can happen (long TCP retransmission,
// overloaded servers). Fences removed on time also keep account documents
// small: run a Recoverer, or fencedTransactions grows with every transfer
// an account takes part in.
//
// (On MongoDB 4.2 and later, a filter {$expr: {$lt: ["$$NOW", deadline]}}
// on the leg write would move the deadline to the server's clock and remove
// the assumption; FerretDB, the development server, has no $expr, so the
// library does not rely on it yet.)
//
// Ambiguous writes: a write whose reply was lost may or may not have
// happened. Every step is guarded so that repeating it is harmless, and
// after a failure the library re-reads what happened instead of assuming.
// Network errors are retried (WithRetries); the library is correct with
// the driver's retryable writes on or off.
//
// Held credits: a debit leaves the balance when it is applied (the funds
// are held), but a credit reaches the balance only when its transaction
// settles, after the commit point. Until then it is in the account's
// pendingCredit (see Coordinator.Account). So money that might still be
// rolled back cannot be spent, and undoing a credit never takes a balance
// below zero, which in the tutorial's protocol it can: credit B, B spends
// it, cancel, and B is overdrawn. The randomized simulation in
// sim_test.go found exactly that before credits were held.
//
// Isolation: like the tutorial, the protocol offers transaction-like
// semantics, not isolation. A reader may see a debit before the matching
// credit reaches its balance (between apply and settle; with background
// settling, milliseconds after Transfer returns), and a rolled back debit
// before it is undone. Use WithSyncSettle if Transfer must return with the
// credit spendable.
//
// # Clocks
//
// Staleness is judged by the server's clock alone: lastModified is written
// with $currentDate and compared with the server's localTime (from hello),
// so skew between the hosts running the library does not matter. Skew
// between the members of a replica set does, across a failover: keep their
// clocks in sync, and keep StaleAfter well above the skew. On a sharded
// cluster, hello is answered by the mongos, whose clock must then be within
// a small fraction of StaleAfter of the shard primaries'. The owner's own
// check uses its monotonic clock and errs early, not late.
//
// # Limits
//
// A credit is refused if it would take the balance past MaxInt64; credits
// applied at once are checked one by one, so several that together would
// pass MaxInt64 can leave a committed transfer that cannot settle (each
// recovery pass reports it). Keep balances well inside int64.
//
// Settling and unfencing many transactions at once update their accounts
// in write commands of at most WithWriteBatch statements (48 by default).
// FerretDB v1 holds one backend connection for each statement of an update
// command until the command ends, from a pool shared by every command in
// flight (100 connections with SQLite; 50 by default with PostgreSQL, in
// v1.24's source), and hangs for good when the pool runs out: on SQLite an
// update command of 100 statements never returns. 48 keeps one command
// well inside either pool, not several at once: with several coordinators
// or recoverers on one FerretDB, lower WithWriteBatch to fit (or raise
// PostgreSQL's pool_max_conns). The development server's front forwards
// one request at a time, so there one command is all that is ever in
// flight (and a hung one holds up every client).
//
// # Durability and scale-out
//
// Every step is as durable as the write concern of the database or
// collections given to NewCoordinator. Use majority write concern on a
// replica set: it is what makes recovery after a primary failover safe,
// since a step acknowledged by a primary that then loses its unreplicated
// writes would otherwise be forgotten. Every per-document operation
// filters by _id, so the library runs unchanged on a sharded cluster with
// hashed _id shard keys; the recoverer's scans use the {state,
// lastModified} index EnsureIndexes creates.
//
// # Errors and bad input
//
// Transfer checks its input before it writes anything, and returns
// ErrInvalidTransfer for: a value that is zero or negative; a source equal
// to the destination (numbers compare by value, as the server compares
// _id: int32(1) and int64(1) are one account); a nil id; an id that cannot
// be an _id (an array, null, undefined, a regular expression, MinKey or
// MaxKey, JavaScript, a Go value with no BSON form such as a channel or a
// func); an empty string; a string or document that is not valid UTF-8;
// and a document id with an empty, dotted or $-prefixed key (in a filter,
// {_id: {$gt: ""}} is a query that would match other accounts).
//
// What only the accounts can tell ends the transaction canceled, with
// nothing moved: a debit the balance cannot cover, ErrInsufficientFunds; a
// missing account, ErrAccountNotFound; a balance that a credit would take
// past MaxInt64 (or a debit below MinInt64 when negative balances are
// allowed), ErrBalanceOverflow; a balance that is missing or not an int32
// or int64 (a float, a string), ErrInvalidAccount. A transaction document
// whose state is none of the six (edited by hand) gives ErrUnknownState
// from Get, Cancel and Reverse, and recovery leaves it alone. An unknown
// transaction id gives ErrTxnNotFound.
// ErrCanceled, ErrInProgress, ErrNotCancelable, ErrTxnNotFound,
// ErrKeyConflict, ErrUnknownState and ErrClosed name the other outcomes.
// All are matched with errors.Is. Any other error leaves the transaction
// where it stood, for recovery; with an idempotency key (WithKey) the
// Transfer can be repeated safely.
//
// # Testing failure handling
//
// WithStepHook calls a function before every database operation, named by
// Step; returning an error stops the caller there as if its process died,
// and blocking stalls it. The library's own tests crash and stall it at
// every step.
package twopc
