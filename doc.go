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
// and pendingDebit (credits and debits applied and not yet settled),
// fencedTransactions, and fencedBefore (the account's fence line, below).
// pendingTransactions and fencedTransactions hold leg markers: the first
// leg's marker is the transaction's _id, as in the tutorial; the second's
// is the _id with its last byte set to 1 (every _id the library makes ends
// in a zero byte), so two legs never share a marker.
//
// Transactions are documents {_id, source, destination, value, state,
// lastModified, application}, with lastModified written by the server
// ($currentDate); the library adds created (the transaction time, set once
// by the coordinator that creates it), claim, leaseMs and retainMs (the
// longest StaleAfter and fence retention of any process that claimed or
// finished it), allowNegative (the transfer's overdraft policy), key,
// reason and fences. Account ids may be any value that can be an _id:
// string, ObjectID, int64, a document given as bson.D (a Go map of more
// than one key is refused: its field order is random); see Errors and bad
// input for the forms refused.
//
// The statements a transfer sends, and the transaction documents its
// writes return, are encoded and decoded by the driver's default BSON
// rules, whatever BSONOptions the client sets: an int64 stays an int64
// under IntMinSize, and the times in those documents are UTC even under
// UseLocalTimeZone. A value the default rules do not fix (an account id of
// a type of the caller's, a document returned in another shape) goes
// through the client's registry and options, as do the library's other
// reads and writes.
//
// # Protocol
//
// A Coordinator runs each transfer through the states initial → pending →
// applied → done (see State), with conditional single-document writes:
//
//  1. insert the transaction already pending and claimed by this
//     application (one upsert keyed by a fresh _id, so a retry finds it);
//  2. apply both legs in one bulk write: the debit {_id: source,
//     pendingTransactions: {$ne: marker}, fencedTransactions: {$ne:
//     marker}, fencedBefore: {$not: {$gte: created}}, balance: {$gte:
//     value}} → {$inc: {balance: -value, pendingDebit: value}, $push:
//     {pendingTransactions: marker}}, and the credit likewise, except that
//     it goes to pendingCredit, not yet to balance (and its guard keeps the
//     balance inside int64 once everything in flight settles);
//  3. pending → applied, guarded by state and claim: the commit point.
//     Commits that arrive while another of the same coordinator is being
//     written go together in one update, each still guarded by its own
//     state and claim (see commit.go).
//
// Transfer returns there, after three round trips (the tutorial takes
// eight). TransferLegs does the same for any number of legs (up to
// MaxLegs) whose amounts sum to zero, a payment split with a fee account
// or a payout to several accounts: all its legs go in the one bulk write,
// each guarded by its own marker, and all apply or none remains. Its
// transaction document holds legs: [{account, amount}] in place of source
// and destination. Settling follows, in the background and in batches: pull the id
// from both accounts' pendingTransactions while adding it to
// fencedTransactions and moving the credit from pendingCredit to balance
// (one bulk write), then applied → done (one write). The legs a settle
// batch has on one account close in one statement, guarded by every one of
// their markers being pending ($all); one that finds a marker gone (another
// settler closed that leg) matches nothing, and those legs are then closed
// one statement each, each guarded by its own marker, so that every leg
// still settles exactly once. An account document holds the same after
// either.
// A transfer settled alone costs five data commands; under load, fewer.
//
// # Batching
//
// Every step is batched. Concurrent Transfer calls of one Coordinator
// share their inserts (one update command of one guarded upsert each),
// their legs (one update command per ledger, one guarded statement per
// leg), their commits (one guarded update naming each transaction with its
// own claim) and their settling (see stage.go): a step that finds no write
// of its kind in flight is written at once, alone, so a transfer on an
// idle coordinator still takes three round trips; the calls that arrive
// while one is in flight go together in the next. TransferBatch gives a
// caller that has many transfers at once (a payroll) the same in one call:
// a constant number of commands for the whole batch (five, settled, on
// one ledger). Each transfer keeps its own guards, so batching moves
// exactly what the transfers alone would have moved: a leg that cannot
// apply fails only its own transfer (the accounts are read once for the
// batch to tell which), and a transfer whose write the batch could not
// settle goes on alone. Nothing is atomic across transfers. A write of a
// group is sent by the stage under a context no caller ends (a caller who
// gives up returns at once, and its transfer's outcome is the state's, as
// after a lost reply), bounded by a minute, and the legs' by the oldest
// claim in it (see Clocks).
//
// A leg that cannot apply (overdraft, missing account, overflow, a balance
// that is not an integer, a fence line past it) rolls the transaction
// back: pending → canceling, fence and undo the legs, canceling →
// canceled. A Canceler does the same on request; a Recoverer finishes
// transactions whose owner stopped: it rolls a stale pending transaction
// forward if a leg of it was applied, and back if none was (presumed
// abort: nobody was told it would happen, and its insert may have arrived
// after its caller gave up on it).
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
// transaction over only once its lastModified is older than its lease (the
// longest StaleAfter recorded in it, see below), and
// the takeover is itself conditional on the claim and lastModified it read,
// so two of them cannot both win.
//
// Fences close the tutorial's hazard. In the tutorial, a rollback or
// cleanup pulls the id from an account, after which a stalled applier that
// resumes finds its guard {pendingTransactions: {$ne: id}} matching again
// and applies a leg a second time: money from nowhere. Here, settling and
// rollback leave the leg's marker in the account's fencedTransactions,
// which every apply also checks; rollback fences an account before it
// undoes its leg, so an apply that raced ahead is seen and undone and one
// that comes after matches nothing. A rollback fences an account that does
// not exist with a tombstone document, which OpenAccount adopts, so an
// account opened later cannot take a stalled leg either.
//
// Fence lines make removing fences safe at any time, with no assumption
// about time. Each transaction carries a transaction time (created), set
// once when it is created, and each account a fence line (fencedBefore);
// every leg write requires the transaction to be newer than the line. A
// Recoverer removes a final transaction's fences from an account and moves
// the account's line up to that transaction's time in one atomic update
// per account. From then on the server itself refuses every leg write of
// that transaction, however late it is delivered: minutes, hours, after
// every process that sent it has died. A rollback's fence write is refused
// past the line too, so a late rollback cannot leave a fence nothing would
// remove. Tombstones are never deleted: they hold their line. This works
// on every server the library supports, the development server included:
// it needs only $not, $gte and $max on dates, no $expr.
//
// What time decides is liveness only. Fences are removed once their
// transaction has been final for its retention (the longest
// WithFenceRetention, at least StaleAfter, of every process that claimed
// or finished it, recorded in the transaction), and a line is moved past a
// transaction only if no unfinished transaction touching the same account
// was created at or before it (the line would refuse that one's remaining
// legs: safe, it rolls back, but needless), and never past the server's
// present (a host whose clock runs ahead keeps its transactions' fences
// until the server's clock passes their time, rather than close the
// accounts to everyone else). A transfer created by a host whose clock is
// behind the others' by more than the retention may find an account's line
// already past it: ErrTooLate, canceled, nothing moved.
// A server whose clock jumps, a claim renewed late, a request that sat in
// a queue: each can delay a transfer or cancel it, none can apply a leg
// twice. (A server-side deadline, {$expr: {$lt: ["$$NOW", deadline]}},
// was the other design weighed: it needs $expr, which FerretDB lacks, and
// would still rest on the server's clock for safety.) Fences removed on
// time keep account documents small (see Limits): run a Recoverer.
//
// Transfer-scoped rules: a transfer's overdraft policy and lease travel
// with it, in its document. Whoever applies its legs (its owner, or a
// Recoverer that rolls it forward) obeys the recorded policy, not its own
// configuration; takeover, Cancel and fence removal judge staleness by the
// longest StaleAfter and retention recorded by every process that claimed
// or finished it, so a process configured with shorter ones cannot take a
// transaction its owner still holds by its own rules.
//
// Transactions the caller was told do not exist: Transfer's error after an
// insert whose reply was lost gives the transaction's id. Cancel of that
// id settles it for good: if the insert never arrived, Cancel writes a
// canceled placeholder under the id, which the insert, arriving later,
// cannot turn into a transfer; if it arrived, Cancel rolls it back, or
// says it committed (ErrNotCancelable). A caller that only reads (Get says
// ErrTxnNotFound) and abandons the transfer is safe too: an insert that
// arrives later becomes a pending transaction nobody drives, and recovery
// rolls it back, since none of its legs was applied.
//
// The owner checks its claim before every attempt of a leg write (it
// renews the claim once an eighth of StaleAfter has passed since it took
// it) and sends the write with a deadline of half of StaleAfter after the
// claim: so a live owner is not taken over under its feet. Money does not
// rest on that: a leg write sent on a lost claim meets the fences or the
// fence line.
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
// # Ledgers across deployments
//
// Seed 004's two-phase commit is between independent databases: a
// coordinator that keeps the log, and participants that hold the
// accounts. Here the Coordinator keeps the log (its transactions
// collection, in one place) and each Ledger is a participant: a named
// accounts collection in the coordinator's database, another database, or
// another deployment (WithLedger; the default ledger, "", is the accounts
// collection of the coordinator's database). A Leg names its ledger; a
// transfer's legs may be on any ledgers the coordinator was given, and the
// same id in two ledgers is two accounts. MongoDB's native transactions
// never span two deployments; this does, with every guarantee above.
//
// The legs of a transfer are sent one command per ledger, to all ledgers
// at once, so a transfer across deployments reaches its commit point in
// three round trips of latency, as on one (insert; every leg; commit).
// Settling, rollback and fence removal likewise go to every ledger at once.
//
// When one deployment cannot be reached, nothing is lost and nothing
// waits on a clock for its safety. Before the commit point, a transfer
// whose leg cannot be sent fails with the driver's error and is left
// pending, the legs it applied elsewhere held. A Recoverer decides it only
// once it can read every ledger the transfer touches (it must know which
// legs applied): when the lost deployment returns, the transfer is rolled
// forward, or back if no leg applied or one cannot apply. A transfer
// already canceling is rolled back on the ledgers that can be reached at
// once (releasing those held funds), and stays canceling until the lost
// ledger returns and its legs there are fenced and undone too. After the commit
// point, the transfer has happened (Transfer returned it applied): the
// ledgers that can be reached settle at once; a ledger that cannot keeps
// its legs held (a debit out of the balance, a credit in pendingCredit,
// not yet spendable) and the transaction stays applied until it returns and
// the next recovery pass settles them. If the log's deployment is
// unreachable, no decision can be read or written: every transfer in
// flight stays where it is, its held legs held, until the log returns.
//
// That is seed 004's uncertainty period: a leg applied (the participant's
// YES vote, with the money held by its marker) is uncertain until the
// decision (pending → applied, or → canceling, in the log) reaches its
// ledger, and it blocks for as long as the log or its own deployment is
// unreachable, plus a recovery interval; the library cannot bound that.
// Seed 004's cooperative termination (an uncertain participant asks the
// others) would not shorten it here: a ledger's markers record only that
// a leg applied, never the decision, which lives in the log alone. Any
// Recoverer that reaches the log and the ledgers can act as the
// coordinator (its takeover is guarded), which is what cooperative
// termination buys in seed 004: no single process is needed, only the log.
//
// # Holds
//
// A hold reserves money now and moves it later, or not at all: a card
// authorization captured for the final fare, an escrow released. Hold
// and HoldLegs run a transfer's first phase (insert, apply every leg) and
// then, instead of the commit point, move the transaction pending → held
// (one guarded write, by the claim's owner, as a commit is): the source's
// debit is already out of its balance, in pendingDebit (Account.Held), and
// the destination's credit waits in pendingCredit. This is seed 004's
// uncertainty period, the moment between the two phases, made durable and
// handed to the caller:
//
//	pending ──► held ──► applied ──► done        Capture (whole, or part)
//	              │
//	              └────► canceling ──► canceled  Void, or expiry
//
// A transaction document of a hold carries hold: true, expiryMs (its
// WithExpiry), heldAt (when it became held, by the server's clock, set by
// that write alone) and, once captured, captured (the amount). The
// decision is one write on the transaction, guarded by its state alone:
// held → applied with captured set (Capture), or held → canceling with
// reason "voided" (Void) or "expired" (expiry; also guarded by the heldAt
// the hold was read with). Each takes a claim of its own, so a caller
// whose write lost learns so from the claim it finds, not from the state. Whichever lands first decides; the others find the transaction
// moved and answer with an error naming what happened (ErrHoldCaptured,
// ErrHoldVoided, ErrHoldExpired), and a repeat of the winning call answers
// as it did. From there the hold settles as a transfer does (a captured
// hold of two legs for less than its value releases the whole pendingDebit
// and pendingCredit, puts the captured amount in the destination's balance
// and returns the rest to the source's, in the same guarded settle write
// per account), or rolls back as a canceled transfer does (fence, undo).
// The guarantees of Guarantees hold for every write of it: each is guarded
// by a marker or a state, so that delivered twice, late, or by a process
// that died, it takes effect at most once.
//
// Time decides only which of capture and expiry happens. Expiry is judged
// by the server's clock (hello's localTime) against heldAt plus expiryMs,
// by a Recoverer pass or by a Capture or Void that finds it so; the void
// that follows is the same guarded write as Void's. A Capture whose write lands after the expiry
// time and before any expiry's void still captures.
//
// A held hold is decided: recovery never rolls it back for being old
// (presumed abort is for transactions not yet decided), the audit does not
// count it as unfinished or in flight (it moves no ledger's total), and
// Cancel of one voids it. A hold whose process died before it became held
// is rolled back by recovery even when every leg applied: held is its
// decision, and no one was told of one. An account carries at most
// MaxHolds markers when a hold's leg applies (its apply write also
// requires pendingTransactions to have no element MaxHolds-1); the next
// hold on it is refused with ErrTooManyHolds, rolled back, and moves
// nothing.
//
// Beside the ledgers this library is measured against: like TigerBeetle's
// pending transfers, a hold reserves in the accounts' pending fields,
// resolves at most once (post or void; here Capture or Void), may be
// captured for less than its amount with the rest restored at once, and
// times out by the database's clock, not the client's. Unlike TigerBeetle,
// whose cluster voids an expired transfer deterministically at its
// timeout, an expired hold here stays held until a Recoverer pass or a
// Capture voids it (a Capture between the expiry time and that void
// still wins), and a hold of more than two legs is captured whole. Blnk's
// inflight transactions also commit or void, and expire; Blnk allows
// several partial commits of one inflight transaction until its amount is
// used up, where a hold here is captured once (a second capture for
// another amount is ErrHoldCaptured). The failures their users reported
// (a hold voided twice, more committed than was held, a rejected hold
// still applied) are each one guarded write here: void is held →
// canceling (a second finds canceling), capture checks the amount before
// its write and its write records it (a second for another amount is
// refused), and a hold refused at apply is rolled back before it is ever
// held.
//
// # Clocks
//
// No clock decides whether money moves; clocks decide when things finish.
// Staleness is judged by the server's clock: lastModified is written with
// $currentDate and compared with the server's localTime (from hello). Skew
// between the members of a replica set matters across a failover, and on
// a sharded cluster hello is answered by the mongos: keep StaleAfter well
// above the skew, or a live owner may be taken over (its transfer then
// finishes by the recoverer's hand, or rolls back). The transaction time
// is the creating host's clock: keep the hosts running coordinators within
// the fence retention of each other, or the slow one's transfers may meet
// ErrTooLate on busy accounts; a host whose clock is ahead makes the
// accounts it touches keep its fences longer. The owner's own claim check
// uses its monotonic clock and errs early, not late.
//
// # Limits
//
// A committed transfer always settles: a credit applies only if, whatever
// the legs in flight on its account do, the balance stays inside int64:
// exactly (balance+value <= MaxInt64) when nothing else is in flight on
// the account, and otherwise when balance and pendingDebit are each at
// most MaxInt64/4 and pendingCredit+value at most MaxInt64/2; else
// ErrBalanceOverflow. A balance above MaxInt64/4 therefore takes a credit
// only while nothing else is in flight on it.
//
// Document sizes. An account's pendingTransactions holds one marker (12
// bytes, about 17 with BSON overhead) per leg applied to it and not yet
// settled or undone: the legs in flight, bounded by the concurrent
// transfers on the account. Its fencedTransactions holds one marker per
// leg of a transaction that became final and whose fences a Recoverer has
// not yet removed: the transfers on the account within the retention
// before the last recovery pass, plus any behind an older transaction
// still unfinished on the same account. With a Recoverer running every
// interval I, retention R and f transfers a second on the account, that is
// about f×(R+I) markers: at the defaults (R one minute, I 30 seconds), 100
// transfers a second keep it under 9,000 markers, about 160 kB, far under
// MongoDB's 16 MB document limit. Without a Recoverer it grows with every
// transfer. TestHistoryStaysBounded checks the bound. A
// tombstone holds only its fence line and its fences; tombstones are kept
// (their line refuses late legs), one document, under 100 bytes once its
// fences are gone, per id that a rolled-back transfer named while it had
// no account.
//
// The transactions collection keeps every transaction for good unless
// WithHistory bounds it: then a Recoverer's pass moves each final
// transaction, once its fences are removed and its recorded time to keep
// has passed, to an archive collection (or removes it). With a Recoverer
// every interval I, the collection holds the transactions unfinished, plus
// those final within retention R plus keep K plus I: about f×(R+K+I) at f
// transfers a second, plus every keyed transaction, placeholder and
// tombstone, which are kept for good (see WithHistory).
// TestHistoryStaysBounded pushes 20,000 transfers through one account and
// checks the collection and every account document stay bounded.
//
// Audit checks the invariants above on a live system: markers against
// unfinished transactions, transactions past their lease, the marker
// bounds, and totals the caller states. It reads in batches and writes
// nothing; an application can serve its report from a health check.
//
// A write command carries at most WithWriteBatch statements (1,000 by
// default), and a TransferBatch at most MaxBatch transfers. Every
// statement that names one document by _id is a single-document update
// (multi: false), so that on MongoDB a command of them is a retryable
// write. Concurrent calls whose transactions share one _id (one
// idempotency key, concurrent Reverse of one transfer) are never written
// in one command: exactly one of them owns the transaction, as if they had
// come one after the other. The apply step groups transfers by the
// ledgers they touch, and settling splits a batch the same way, so a
// ledger that is down or slow delays and fails only the transfers with a
// leg on it.
//
// Upgrading from a version without transaction times: its documents are
// left alone by this one (no created field). Let its recoverers finish
// every transaction (none initial, pending, applied or canceling), stop
// every process of it (its fence removal deleted tombstones, which now
// hold fence lines), then start this version.
//
// # Durability, read and write concerns
//
// Every write the library sends is a majority write, on the primary,
// whatever the write concern and read preference of the database given to
// NewCoordinator or of its client (WithWriteConcern changes the write
// concern; the guarantees assume majority). Every step needs it (insert,
// apply, commit, settle, done, fence, undo, canceled, unfence), since a
// step acknowledged by a primary that then loses its unreplicated writes
// would be forgotten, and the commit write is what Transfer reports. Every
// read the library decides by is made at majority read concern, whatever
// the database's: after a lost reply (was the
// insert, the commit, the move made?), the group commit's read after a
// failed write, the inspection of the accounts after a leg write, and
// recovery's scans. So the library never reports a commit, or rolls a
// transaction forward, on a write that a failover could roll back. A
// write that fails with a write-concern error is reported as an error,
// never as success; the transaction's state then tells, and recovery
// finishes it.
//
// # Servers
//
// The library needs single-document atomicity, the hello command's
// localTime (MongoDB 4.4.2 and later; 4.4.0 and 4.4.1 have no hello) and
// majority read concern (on MongoDB 4.4 it can be turned off, with
// enableMajorityReadConcern: false, as some primary-secondary-arbiter
// deployments are; that setup is not supported: recovery, Cancel and Get
// then fail). The repository's GitHub workflow runs its tests on MongoDB
// 6.0, 7.0 and 8.0, standalone and as a replica set (the project's own
// machines have no MongoDB); they run everywhere on FerretDB v1.24 behind a
// serializing front (see the README: FerretDB alone loses updates). COMMANDS.md in the repository lists every command it sends,
// the behaviour each relies on and where FerretDB differs. Where only
// MongoDB has a feature the library uses, it detects it at run time: the
// partial index of EnsureIndexes.
//
// # Scale-out
//
// Every per-document operation
// filters by _id, so the library runs unchanged on a sharded cluster with
// hashed _id shard keys; the recoverer's scans use the {state,
// lastModified} index EnsureIndexes creates.
//
// # Errors and bad input
//
// Transfer checks its input before it writes anything, and returns
// ErrInvalidTransfer for: a value that is zero or negative; a source equal
// to the destination as the server sees ids (numbers compare by value at
// any depth: int32(1), int64(1) and 1.0 are one account, and so are
// {n: int32(1)} and {n: int64(1)}; -0.0 is 0); a nil id; an id that cannot
// be an _id (an array, null, a Go value with no BSON form such as a
// channel or a func); an id holding, at any depth, a value whose equality
// the library cannot decide as every server does (Decimal128, Symbol, a
// regular expression, JavaScript, DBPointer, undefined, MinKey, MaxKey,
// NaN); an empty string; a string or document that is not valid UTF-8;
// and a document id with an empty, dotted or $-prefixed key (in a filter,
// {_id: {$gt: ""}} is a query that would match other accounts). Accounts
// collections with a non-simple default collation are not supported.
//
// What only the accounts can tell ends the transaction canceled, with
// nothing moved: a debit the balance cannot cover, ErrInsufficientFunds; a
// missing account, ErrAccountNotFound; a balance that a credit would take
// past MaxInt64 (or a debit below MinInt64 when negative balances are
// allowed), ErrBalanceOverflow; a balance that is missing or not an int32
// or int64 (a float, a string), ErrInvalidAccount; an account whose fence
// line is past the transaction, ErrTooLate. A transaction document
// whose state is none of the six (edited by hand) gives ErrUnknownState
// from Get, Cancel and Reverse, and recovery leaves it alone, as it leaves
// every document without a transaction time (the tutorial's protocol,
// another program); Cancel refuses those with ErrMalformedTxn. An unknown
// transaction id gives ErrTxnNotFound from Get and Reverse (Cancel writes
// a placeholder, above).
// ErrCanceled, ErrInProgress, ErrNotCancelable, ErrTxnNotFound,
// ErrKeyConflict, ErrUnknownState and ErrClosed name the other outcomes.
// All are matched with errors.Is. Any other error leaves the transaction
// where it stood, for recovery; with an idempotency key (WithKey) the
// Transfer can be repeated safely.
//
// # Observing
//
// WithObserver gives an Observer every state transition a process writes
// (transaction, from and to states, step, the write's duration, and
// whether it moved the transaction, found it moved by someone else, or
// failed) and every recovery action (takeover, roll forward, settle, roll
// back, cancel initial, unfence, remove). It is called synchronously and must be
// fast; a panic in it is recovered and logged, never passed on.
// examples/observe has Prometheus and OpenTelemetry observers. Every log
// line about a transaction carries the attributes txn (its _id in hex),
// step (when the line is about one) and application; a recovery pass's
// summary carries application and the pass's report, and each transaction
// it took on and failed has a line of its own.
//
// # Testing failure handling
//
// WithStepHook calls a function before every database operation, named by
// Step; returning an error stops the caller there as if its process died,
// and blocking stalls it. The library's own tests crash and stall it at
// every step.
package twopc
