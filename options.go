package twopc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// Defaults of the options.
const (
	DefaultAccounts      = "accounts"
	DefaultTransactions  = "transactions"
	DefaultStaleAfter    = time.Minute
	DefaultRetries       = 3
	DefaultInterval      = 30 * time.Second
	DefaultRecoveryBatch = 100
	DefaultWriteBatch    = 1000
	DefaultCallTimeout   = 10 * time.Second // WithCallTimeout's: a money call ends within it
	DefaultReadTimeout   = 10 * time.Second // WithReadTimeout's: a read ends within it
	// DefaultTakeoverAfter is WithTakeoverAfter's: how long a transfer's
	// owner may go without a sign of life before a repeat of its call in
	// another process takes it over.
	DefaultTakeoverAfter = 5 * time.Second
)

// Option configures a Coordinator.
type Option func(*config) error

type config struct {
	application    string
	staleAfter     time.Duration
	takeoverAfter  time.Duration
	fenceRetention time.Duration
	hook           func(ctx context.Context, step Step, t *Txn) error
	accounts       string
	transactions   string
	allowNegative  bool
	syncSettle     bool
	retries        int
	callTimeout    time.Duration
	maxAmount      int64 // WithMaxAmount's ceiling; 0: none
	readTimeout    time.Duration
	writeBatch     int
	logger         *slog.Logger
	observers      []Observer
	now            func() time.Time // the claim clock; tests replace it
	newID          func() bson.ObjectID
	ledgers        []ledgerSpec
	writeConcern   *writeconcern.WriteConcern
	history        history
	mark           *lowWater        // the coordinator's mark and clock (mark.go)
	markClock      func() time.Time // the host clock the mark's clock corrects; tests replace it
	markMargin     time.Duration    // see markMargin; tests shorten it
	markFrozen     bool             // no background readings of the mark (tests)
	managedIndexes bool             // WithManagedIndexes: check the indexes, never make them
	// refundHook, if set, is called by a refund with the transfer (a
	// hold's order) as read, before each reservation (tests only).
	refundHook func(r *record)
	// statementHorizon is how old an entry must be for a statement's
	// page to list it (see statementHorizon); tests shorten it.
	statementHorizon time.Duration
	// checkpointEvery and checkpointHorizon: see statement.go; tests
	// shorten them.
	checkpointEvery   int
	checkpointHorizon time.Duration
}

// history is WithHistory's setting.
type history struct {
	keep    time.Duration     // 0: keep for good
	archive *mongo.Collection // nil: remove
}

// archiveName is the name recorded in each transaction: the archive
// collection's, "" for removal.
func (h history) archiveName() string {
	if h.archive == nil {
		return ""
	}
	return h.archive.Name()
}

// ledgerSpec is a ledger given with WithLedger.
type ledgerSpec struct {
	name     string
	accounts *mongo.Collection
}

func defaultConfig() config {
	host, _ := os.Hostname()
	return config{
		application:       fmt.Sprintf("%s:%d:%s", host, os.Getpid(), bson.NewObjectID().Hex()[18:]),
		staleAfter:        DefaultStaleAfter,
		takeoverAfter:     DefaultTakeoverAfter,
		accounts:          DefaultAccounts,
		transactions:      DefaultTransactions,
		retries:           DefaultRetries,
		callTimeout:       DefaultCallTimeout,
		readTimeout:       DefaultReadTimeout,
		writeConcern:      writeconcern.Majority(),
		writeBatch:        DefaultWriteBatch,
		logger:            slog.New(slog.DiscardHandler),
		now:               time.Now,
		newID:             newTxnID,
		markClock:         time.Now,
		markMargin:        markMargin,
		statementHorizon:  statementHorizon,
		checkpointEvery:   checkpointEvery,
		checkpointHorizon: checkpointHorizon,
	}
}

// WithApplication sets the owner name written on the transactions this
// coordinator claims (the tutorial's application field). The default is
// host:pid:random, unique per Coordinator. It names the owner in the log
// and its messages; it decides nothing: ownership is per Coordinator (the
// claims it issued), so Coordinators sharing a name neither cancel nor
// take over each other's fresh transactions (see Canceler, WithKey).
func WithApplication(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errorf("WithApplication: empty name")
		}
		c.application = name
		return nil
	}
}

// WithStaleAfter sets the lastModified age after which another application
// may take over a transaction (default one minute). It is recorded in every
// transaction this coordinator claims, and a takeover waits for the longest
// recorded, so a process configured shorter cannot take a transaction its
// owner still holds by its own rule. It is the abort lease: a pending
// transaction untouched for it is rolled back by a Recoverer (presumed
// abort), unless a repeat of its call finished it first; the owner's
// renewals and its leg writes' deadlines follow the shorter takeover lease
// (WithTakeoverAfter, never longer than StaleAfter). Staleness is judged by the server's clock
// (hello's localTime against lastModified, which the server writes): keep
// StaleAfter well above the clock skew between the members of a replica
// set, which matters across a failover, and between the mongos routers of a
// sharded cluster, which answer hello there; else a live owner may be taken
// over (its transfer then finishes by the recoverer's hand, or rolls back;
// money is safe either way).
func WithStaleAfter(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errorf("WithStaleAfter: %v is not positive", d)
		}
		c.staleAfter = d
		return nil
	}
}

// WithTakeoverAfter sets the takeover lease (default 5 s,
// DefaultTakeoverAfter; never longer than StaleAfter): how long a
// transaction's owner may go without renewing its claim before a repeat of
// its call with the same key, made in another process, takes it over and
// finishes it (see WithKey). It is recorded in every transaction this
// coordinator claims, and that recorded value is what a repeat waits out.
// The owner renews its claim before a leg write once an eighth of it has
// passed, and sends every leg write, grouped ones included, with a
// deadline of half of it after the claim; so keep it several times above
// the latency of a write under load. A repeat in the coordinator that made
// the attempt does not wait: it takes over as soon as none of its own calls
// drives the transaction. Money does not rest on it: a takeover is a
// guarded change of the claim, and the first owner's late writes meet the
// claim, the markers, the fences and the line. StaleAfter stays the abort
// lease, after which a Recoverer rolls back a pending transfer no one
// repeated.
func WithTakeoverAfter(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errorf("WithTakeoverAfter: %v is not positive", d)
		}
		c.takeoverAfter = d
		return nil
	}
}

// WithMaxAmount sets the largest amount one leg of a money call may move
// (default: none). A call with a leg above it (a transfer's value, a
// leg's amount or its negation, a capture's or a refund's part) is
// refused with ErrInvalidTransfer before anything is written, so its key,
// if it has one, stays free. It guards against an amount mistyped by
// orders of magnitude; what only the accounts can judge (funds, floors,
// ceilings, int64 headroom) is still refused by the server's own
// conditions, after the insert.
func WithMaxAmount(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return errorf("WithMaxAmount: %d is not positive", n)
		}
		c.maxAmount = n
		return nil
	}
}

// WithStepHook installs a hook called before every database operation the
// coordinator, its cancelers and its recoverers make. If the hook returns an
// error, the caller stops right there as if its process had died: it
// returns the error (as a *StepError) and makes no further write for that
// transaction, leaving it for recovery. If the hook blocks, the caller
// stalls. It is for tests of failure handling; t is a copy. It may be
// called from several goroutines at once: by concurrent transfers, and,
// for a transfer whose legs are on several ledgers, once per ledger at the
// same time (StepInspect, StepFence, StepUndo).
func WithStepHook(h func(ctx context.Context, step Step, t *Txn) error) Option {
	return func(c *config) error {
		c.hook = h
		return nil
	}
}

// WithCollections renames the accounts and transactions collections
// (default "accounts" and "transactions").
func WithCollections(accounts, transactions string) Option {
	return func(c *config) error {
		if accounts == "" || transactions == "" || accounts == transactions {
			return errorf("WithCollections(%q, %q): want two distinct names", accounts, transactions)
		}
		c.accounts, c.transactions = accounts, transactions
		return nil
	}
}

// WithLedger adds a ledger: a named accounts collection the coordinator
// may move money in, in its own database, another database, or another
// deployment (a collection of another *mongo.Client). Legs name it (see
// Leg); the coordinator's transactions collection stays the one log of
// every transfer, wherever its legs are. Its reads and writes are made as
// the coordinator's own, whatever the collection's client sets: reads at
// majority read concern, writes at majority write concern (or
// WithWriteConcern's), both on the primary. The default ledger, named "",
// is the accounts collection of the coordinator's database. The same id in
// two ledgers is two accounts.
//
// A transfer's legs go to every ledger at once, one command per ledger, so
// a transfer across deployments reaches its commit point in three round
// trips of latency, as on one. When a ledger's deployment cannot be
// reached, nothing is lost and nothing waits on a clock for its safety.
// Before the commit point, a transfer whose leg cannot be sent fails with
// the driver's error and is left pending, the legs it applied elsewhere
// held; once the deployment returns, a Recoverer rolls it forward, or
// back if no leg applied or one cannot apply. After the
// commit point, the ledgers that can be reached settle at once; the
// unreachable one keeps its legs held (a debit out of the balance, a
// credit in PendingCredit, not yet spendable) until it returns and a
// recovery pass settles them. If the coordinator's own deployment (the
// log) is unreachable, every transfer in flight stays where it is, its
// legs held, until it returns. Such a leg is blocked for as long as the
// log or its own deployment is unreachable, plus a recovery interval; the
// library cannot bound that.
func WithLedger(name string, accounts *mongo.Collection) Option {
	return func(c *config) error {
		if name == "" || accounts == nil {
			return errorf("WithLedger(%q): want a name and a collection", name)
		}
		for _, l := range c.ledgers {
			if l.name == name {
				return errorf("WithLedger(%q): given twice", name)
			}
		}
		c.ledgers = append(c.ledgers, ledgerSpec{name: name, accounts: accounts})
		return nil
	}
}

// WithWriteConcern sets the write concern of every write the coordinator
// sends, in place of the default, majority (which NewCoordinator applies
// whatever the database's or client's own default). The guarantees assume
// majority on a replica set: with a weaker one, a step reported done can be
// rolled back by a failover. Use it only for a server that refuses
// majority, or a standalone where the two are the same.
func WithWriteConcern(wc *writeconcern.WriteConcern) Option {
	return func(c *config) error {
		if wc == nil {
			return errors.New("WithWriteConcern: nil write concern")
		}
		if !wc.Acknowledged() {
			return errors.New("WithWriteConcern: an unacknowledged write concern gives the protocol nothing to decide by")
		}
		c.writeConcern = wc
		return nil
	}
}

// WithHistory bounds the transactions collection: each transaction this
// coordinator creates records keep, and once it is final and keep has
// passed since it was last modified (by the server's clock), a Recoverer's
// pass moves it to archive, or removes it if archive is nil.
// Without WithHistory transactions are kept for good. Before removing
// committed transfers (archive nil), the pass records for each of their
// accounts a checkpoint of its balance through them, so that statements
// and BalanceAt answer the same afterwards and give ErrHistoryRemoved for
// earlier times (see Coordinator.Statement); a transfer committed less
// than a minute before the pass waits for the next one.
//
// A change feed (Coordinator.Feed) holds history back: a transaction a
// feed numbers leaves the log only once the feed published its events, and
// the feed then records it, so that a reader behind it gets
// ErrFeedTruncated. A feed whose sequencer stopped holds the transactions
// since until it runs again, or is deleted (Feed.Delete).
//
// With a Recoverer running every interval I, keep K and f transfers a
// second, the collection then holds the unfinished transactions plus about
// f×(K+I) final ones, plus every keyed transaction and placeholder, which
// are kept for good.
//
// What it keeps: keyed transactions (WithKey, and the reversals Reverse
// makes under derived keys) are never removed, so a key is honoured for
// good and Reverse never reverses twice: a removed keyed transaction
// would free its _id for the same key, and a new transaction under it has
// the same leg markers, on which a late settle or undo of the removed one
// would then act. Placeholders (Cancel of an unknown id) are never removed
// either: nothing records the accounts a late insert of that id would
// touch, so they are what refuses it. Bound the collection by using keys
// where a caller needs them.
//
// What removal does not let happen: money moving. Every leg write of a
// final transaction, delivered however late, is refused by the server
// whether the transaction is in the log or not: by the leg's fence on its
// account and, once that is gone, by the account's fence line, which
// passes the transaction in the very write that drops the fence. So a late
// insert of a removed transaction becomes one with no leg applied.
//
// What it costs the log. With an archive, Get, Canceler.Cancel and Reverse
// of an id the archive holds answer from the archive (Cancel writes
// nothing). Without one, they cannot tell a removed id from one that never
// was: Get says ErrTxnNotFound, and Cancel writes a placeholder and
// reports the id canceled, whatever the removed transaction did. A removed
// transaction's own write commands, delivered again after its removal (a
// network that duplicates and delays), can bring its document back, with
// none of its legs applied, whatever the first record's state was. Such a
// copy is never committed: its commit and its capture, delivered again,
// are refused (they require the lastModified or heldAt their sender read,
// and the copy's are the late writes'; a transfer inserted in a group has
// its lastModified read back after the grouped insert, and one whose
// read-back fails is answered unknown and left to recovery, which reads
// it first), and a Recoverer's pass cancels it (reason "late_copy": a copy
// brought back pending has a leg closed and none applied, one brought back
// held has none of its legs on its accounts), so no statement lists it.
// The copy is removed in turn, and the archive keeps the first record (a
// copy's archiving finds the id there and leaves it), which is what Get,
// Cancel and Reverse then read. Without an archive, do not Reverse a
// transaction older than keep on the log's word alone.
//
// Statements read what the log, the archive and the checkpoints hold
// (see Coordinator.Statement): before a pass moves transactions to an
// archive it records so, and a coordinator that does not read that
// archive answers for the entries moved only from a checkpoint after
// them, else ErrHistoryRemoved.
//
// The archive's name is recorded in each transaction with keep, and only a
// Recoverer whose coordinator has WithHistory with an archive of that name
// moves it (one without an archive removes only the transactions recorded
// for removal): a Recoverer configured otherwise leaves the transaction.
// Archiving is an insert into archive, then a guarded delete; a pass that
// stops between them leaves the transaction in both, and the next pass
// finishes the move. The archive may not be the transactions collection.
func WithHistory(keep time.Duration, archive *mongo.Collection) Option {
	return func(c *config) error {
		if keep <= 0 {
			return errorf("WithHistory(%v): want a positive time to keep", keep)
		}
		c.history = history{keep: keep, archive: archive}
		return nil
	}
}

// WithAllowNegative lets a debit take a balance below zero (credit lines).
// By default a debit applies only if balance >= value. The policy is
// recorded in each transaction this coordinator creates, and whoever
// applies its legs (a Recoverer of another configuration included) obeys
// the recorded policy, not its own. It governs only accounts without
// limits: an account with limits (AccountFloor, AccountCeiling,
// SetLimits) has a floor of its own, which its debits obey whatever the
// policy.
func WithAllowNegative() Option {
	return func(c *config) error {
		c.allowNegative = true
		return nil
	}
}

// WithManagedIndexes says the indexes the library reads by (see
// Coordinator.EnsureIndexes) are managed elsewhere: the coordinator makes
// none itself, and checks, before its first read that needs them (the
// low-water mark's, a Recoverer pass's, a statement's), that each exists
// under any name. Until they do, those reads fail with ErrMissingIndex,
// which names the missing ones, rather than scan the log; the check is
// made again at the next such read. Transfers read and write by _id and
// need none.
func WithManagedIndexes() Option {
	return func(c *config) error {
		c.managedIndexes = true
		return nil
	}
}

// WithSyncSettle makes Transfer (and TransferLegs, TransferBatch, Reverse
// and Capture) settle the transaction (pull it from the accounts, then
// done) before it returns, at two more round trips, so that it returns
// with the credit in the destination's Balance. By default the coordinator
// settles committed transfers in the background, in batches, so that a
// transfer costs three round trips and its credit reaches the balance
// moments after it returns; Close and Settle wait for it. The background
// settle takes its connections from the client's pool like any caller, so
// a pool no larger than the number of callers in flight makes it wait for
// their connections instead of overlapping their round trips (the
// driver's default pool holds 100). Either way the
// credit is spendable when Transfer returns: a debit its balance refuses
// settles the account's committed transfers first (see
// Coordinator.Transfer).
func WithSyncSettle() Option {
	return func(c *config) error {
		c.syncSettle = true
		return nil
	}
}

// WithRetries sets how many times a step is tried when the database
// answers with a network error or does not answer (default 3). Every step is
// safe to repeat: after an ambiguous failure it re-reads what happened.
// Each attempt may wait the driver's server selection timeout (30 s by
// default) when no server answers; a money call's retries all count
// against its bound (WithCallTimeout).
func WithRetries(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return errorf("WithRetries: %d < 1", n)
		}
		c.retries = n
		return nil
	}
}

// WithCallTimeout bounds every money call of the coordinator (Transfer,
// TransferLegs, TransferBatch, Reverse, Hold, HoldLegs, Capture, Void, and
// its Cancelers' Cancel) to d, from the moment it is called, its retries
// and waits included: a call whose context has no earlier deadline gets
// one d away (default 10 s, DefaultCallTimeout). A caller's earlier
// deadline ends the call first; a later one does not lift the bound.
//
// What it guarantees: when no server answers, a money call fails within d
// (with the driver at its defaults, a call would otherwise wait its server
// selection timeout, 30 s, once for each of WithRetries' attempts: 90 s),
// with an error that wraps what happened (the driver's error,
// context.DeadlineExceeded) and names the bound. What the call wrote by
// then is as for any context that ends (see Transfer): nothing, an
// outcome unknown with the transaction's id, or a transaction left where
// it stood for a Recoverer. So that it answers truly, a call whose bound
// (or context) ends after it sent a write of the transaction's state (a
// commit, a capture, a void, a cancel) reads the transaction back on a
// context of its own, for at most 2 s more, and answers by what the log
// holds (committed: no error). Background settling is not bounded by it;
// Settle's wait for it is. The calls that run long are bounded by it per
// write, not as a whole: a Feed's Run and Subscribe, and Delete, each
// write; a Recoverer pass each transaction it takes on (each batch it
// settles or removes); EnsureIndexes each index it makes (see
// WithReadTimeout for their reads).
//
// A TransferBatch's bound grows with its size: d and 50 ms for each
// transfer it makes (60 s for a full batch of MaxBatch at the default),
// since a full batch took from 5 s to 53 s on a busy dev server
// (PROTOCOL.md, "Errors and bad input", gives the measures). Give a
// larger d to a call that needs it: a call against a slower server, or
// one that waits on purpose (a step hook that stalls). d must be
// positive.
func WithCallTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errorf("WithCallTimeout: %v is not positive", d)
		}
		c.callTimeout = d
		return nil
	}
}

// WithReadTimeout bounds every read call of the coordinator to d (default
// 10 s, DefaultReadTimeout), as WithCallTimeout bounds the money calls:
// from the moment it is called, its retries and waits included; a
// caller's earlier deadline ends it first, a later one does not lift it.
// It bounds each of these as a whole: Account, Balance (and a Ledger's),
// BalanceAt, Statement, Transactions, Accounts, Get, GetByKey,
// Refundable, Feeds, and a Feed's Read and Status. What runs on is
// bounded per page or per round trip, never as a whole: Entries and Txns
// each page they read (the first with what it reads before it); a Feed's
// All and Subscribe each Read of theirs, Run and Subscribe each read of
// theirs (their writes are bounded by WithCallTimeout, each on its own);
// a Recoverer pass and EnsureIndexes each read of theirs; Audit each of
// its round trips (each count, each batch its cursors fetch, each
// batch's lookups).
//
// What it guarantees: when no server answers, such a read fails within d
// (with the driver at its defaults it would otherwise wait its server
// selection timeout, 30 s, once for each of WithRetries' attempts), with
// an error that names the read and says so plainly, with the driver's
// error: "twopc: statement: the server could not be reached within the
// read bound of 10s (WithReadTimeout): server selection error: ...". It
// names no step of the read, and wraps the driver's error and
// context.DeadlineExceeded (errors.Is, errors.As). A read the server
// answered too slowly says the server did not answer within the bound. A
// read cut by it leaves nothing half done: it writes nothing, or only
// guarded writes a later read makes again (a statement's checkpoint,
// Refundable's return of a canceled refund's reservation).
//
// The default is the money calls' (DefaultCallTimeout): a caller sees one
// bound, and the reads whose cost grows with an account's history
// (BalanceAt, a statement's page, each summing the entries since the
// account's last checkpoint) keep room under load (PROTOCOL.md, "Errors
// and bad input", gives the times measured). Give a larger d for a
// Feed's Read of many batches, or a first BalanceAt of an account with
// tens of thousands of entries since its last checkpoint; d must be
// positive.
func WithReadTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errorf("WithReadTimeout: %v is not positive", d)
		}
		c.readTimeout = d
		return nil
	}
}

// WithWriteBatch sets the most statements the Coordinator puts in one
// write command (default 1,000, [DefaultWriteBatch]): the inserts of a
// group of transfers, the legs it applies on one ledger, the legs it
// settles or unfences. More go as several commands. MongoDB takes 100,000
// per command. Every such statement names one document by _id and is a
// single-document update.
func WithWriteBatch(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return errorf("WithWriteBatch: %d < 1", n)
		}
		c.writeBatch = n
		return nil
	}
}

// WithLogger sets the logger for background work: settling and recovery
// (default: discard), and for an Observer's panics. Every line about a
// transaction carries the attributes txn (its _id in hex), step (when the
// line is about one) and application; a recovery pass's line carries
// application and the pass's report (see Recoverer.Run). Each line at warn
// level or above says what happened and whether anything is lost, and a
// failure that a later attempt got past is followed by a line at info
// level that says so (the low-water mark read again, a recovery pass that
// succeeded after failed ones).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errorf("WithLogger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithObserver adds an Observer: it is told of every state transition and
// every recovery action of the Coordinator, its Cancelers and its
// Recoverers (see Observer for what each event means). It may be given
// more than once; the observers are called in the order given. They are
// called synchronously: keep them fast.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o.Transition == nil && o.Recovery == nil {
			return errors.New("WithObserver: an Observer with no funcs")
		}
		c.observers = append(c.observers, o)
		return nil
	}
}
