// Package twopc moves money between MongoDB documents safely without
// multi-document transactions: the two-phase commit pattern of MongoDB's
// tutorial "Perform Two Phase Commits", made to survive crashes, stalls,
// races and lost replies. It runs on a standalone mongod, a replica set, a
// sharded cluster and MongoDB-compatible servers. Balances are int64 minor
// units (cents), and the transactions collection is a transfer log that
// can be audited.
//
//	c, err := twopc.NewCoordinator(db, twopc.WithApplication("payments-1"))
//	if err != nil {
//		return err
//	}
//	defer c.Close(ctx)
//	// The coordinator makes the indexes it reads by itself (see
//	// EnsureIndexes, and WithManagedIndexes for indexes managed elsewhere).
//	go twopc.NewRecoverer(c).Run(ctx) // finishes what a stopped process left
//
//	_ = c.OpenAccount(ctx, "alice", 10_000) // once per account
//	_ = c.OpenAccount(ctx, "bob", 0)
//
//	txn, err := c.Transfer(ctx, "alice", "bob", 1250, twopc.WithKey("order-17"))
//	switch {
//	case err == nil:
//		// txn.State is applied: the money moved.
//	case errors.Is(err, twopc.ErrInsufficientFunds):
//		// canceled: nothing moved.
//	case errors.Is(err, twopc.ErrInvalidTransfer):
//		// bad input: nothing was written.
//	default:
//		// See Transfer's errors; with the same key, repeating the call is safe.
//	}
//
// # The API
//
// A [Coordinator] ([NewCoordinator], configured with an [Option] list)
// moves money between the accounts of its database's accounts collection
// ([Coordinator.OpenAccount], [Coordinator.Account]):
// [Coordinator.Transfer] between two accounts, [Coordinator.TransferLegs]
// among up to [MaxLegs] whose amounts sum to zero,
// [Coordinator.TransferBatch] for many independent transfers in a few
// commands, and [Coordinator.Reverse] to undo a committed one. Each returns
// the transaction ([Txn], in a [State]); [WithKey] makes repeating a call
// safe, and [Coordinator.Get] and [Coordinator.GetByKey] read a
// transaction again. A hold reserves
// money now and moves it later: [Coordinator.Hold] and
// [Coordinator.HoldLegs] leave it held until its captures
// ([Coordinator.Capture], [Coordinator.CaptureLegs]: each a transaction of
// its own, in part, per leg, several times), [Coordinator.Void] or its
// expiry ([WithExpiry]). [WithMetadata]
// attaches string metadata to a transfer. [Coordinator.Statement] and
// [Coordinator.Entries] list an account's entries (the legs of committed
// transfers on it) in commit order with a running balance, and
// [Coordinator.BalanceAt] gives its balance at any time. An account may
// hold one asset ([AccountAsset]; a transfer's is [WithAsset] or
// [Leg.Asset]) and have limits, a floor and a ceiling ([AccountFloor],
// [AccountCeiling], [Coordinator.SetLimits]), which the server checks in
// the write that moves the money.
//
// A [Recoverer] finishes what a stopped process left: it settles committed
// transfers, rolls stale ones forward or back, voids expired holds and,
// with [WithHistory], archives or removes old transactions. A [Canceler] cancels a transfer
// before its commit point. [Coordinator.Audit] checks the protocol's
// invariants on a live system, and an [Observer] ([WithObserver]) is told
// of every state change and recovery action. [WithLedger] adds ledgers,
// accounts collections in other databases or deployments, which a [Leg]
// names; the coordinator's transactions collection stays the one log. A
// change feed ([Coordinator.Feed]) tells other systems every committed
// transfer, hold, capture, void, expiry and cancel, at least once, in
// batches one sequencer numbers ([Feed.Run]) and readers follow from a
// position that depends on no clock ([Feed.Read], [Feed.All],
// [Feed.Subscribe]). The twopc command (github.com/twopc/twopc/cmd/twopc)
// lists, shows, recovers, cancels, reverses, captures, voids and audits
// transactions, prints statements, balances and feeds, from a shell.
//
// # Guarantees
//
// Every leg of a done transfer is applied exactly once and no leg of a
// canceled one remains, whatever the crashes, retries, lost replies and
// races between processes: each balance is its opening balance plus the
// net of its done transfers. A transfer returned applied (its commit point)
// ends done; one that stopped before it is rolled forward or back by a
// Recoverer. A credit reaches the balance only when its transfer settles,
// so money that may still be rolled back cannot be spent. No clock decides
// whether money moves, only when things finish. Every read the library
// decides by is a majority read and every write a majority write (unless
// WithWriteConcern says otherwise), so what it reports survives a failover. There is no isolation: a reader may see a
// debit before the matching credit.
//
// # Clocks and bounds
//
// Clocks decide exactly this: when a transaction is stale (the server's
// clock against the lastModified the server wrote, and the lease recorded
// in the transaction), when a hold expires, when WithHistory moves a
// transaction out of the log, and how far an account's fence line moves.
// A fence line only ever refuses a leg: a clock that is wrong can cancel a
// transfer ([ErrTooLate], nothing moved) or delay one, never apply a leg
// twice. A transaction's time is stamped by its coordinator from the
// host's clock corrected to the server's (hello's localTime), as its
// insert is sent.
//
// Clocks also decide where a statement's next page resumes and which
// entries a checkpoint may sum: a commit is stamped (committedAt) before
// it is written, so a page token resumes a horizon of a second behind the
// server's clock, and a checkpoint, or a removal checkpoint before
// WithHistory removes entries, takes only entries a minute old. On a
// sharded cluster the stamp is the clock of the shard that holds the
// transaction and the horizons are judged by the router's: they hold only
// while every shard that holds the log keeps its clock well within them of
// the router's (NTP on every member, as MongoDB assumes). Past the page
// horizon a next page may pass over a late entry (a new first page lists
// it); past the checkpoints' a checkpoint may save a wrong sum, for good.
// twopc doctor measures that skew through the router and fails past a
// quarter of the shorter horizon (250 ms); a Coordinator on a sharded
// cluster measures it once, in the background, and logs a warning past
// it. The horizons are not options: a second is well above a commit's way
// to visibility (milliseconds, hundreds under load) and any skew NTP
// leaves, while keeping the entries a token carries few; a minute keeps
// checkpoints, which are saved for good, far from both.
//
// An account document holds its balance, the markers of the legs in flight
// on it, and the fences of the legs closed on it since its fence line,
// which every apply and rollback there moves up to the coordinator's
// low-water mark: the oldest unfinished transaction in the log, read about
// four times a second, and never less than half a second behind the
// server's clock. So an account keeps the fences of about the last three
// quarters of a second of its traffic (17 bytes each), plus the age of the
// oldest unfinished transaction, with no Recoverer running while callers
// finish their transfers, and a write's cost does not grow with the
// account's past traffic. A transfer whose caller died stays unfinished,
// holding every account's fences back, until a Recoverer finishes it; the
// coordinator logs a warning naming it once it is older than twice
// StaleAfter. The transactions collection grows with every transfer
// unless WithHistory bounds it, which needs a Recoverer.
//
// Every money call is bounded, its retries included: it ends within
// [WithCallTimeout]'s bound ([DefaultCallTimeout], 10 s) or its context's
// deadline, whichever is earlier, so a call with no server answering fails
// within it. A call whose context ends after it sent its commit (or
// another write of the transaction's state) reads the transaction back,
// for at most 2 s more on a context of its own, and answers by what the
// log holds: a committed transfer is never reported pending. Every read
// is bounded the same way, by [WithReadTimeout] ([DefaultReadTimeout],
// 10 s): Account, Statement, Get and the others as a whole, the
// iterators and the calls that run on per page or round trip.
//
// PROTOCOL.md, in the repository, describes how: the documents, each
// step's guarded write, what each guarantee rests on, batching, holds,
// ledgers across deployments, clocks, limits and document sizes, and the
// servers supported.
package twopc
