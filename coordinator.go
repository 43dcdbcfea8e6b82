package twopc

// The Coordinator: the public face of the coordinator side (in two-phase
// commit's classic two-banks example, the coordinator, which keeps the log
// and decides), its construction, indexes,
// the accounts and ledgers it was given, lookups, and Settle and Close.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// Coordinator drives transfers between account documents through the
// two-phase commit protocol: it inserts each transaction claimed and
// pending, applies its legs, moves it to applied (the commit point), and
// settles it to done. It is safe for concurrent use: concurrent calls share
// each step's write (their inserts, their legs on each ledger, their
// commits and their settling), each transfer keeping its own guards, so
// batching moves exactly what the transfers alone would have. Close it to
// let background settling finish.
type Coordinator struct {
	config
	db      *mongo.Database
	ledger  *Ledger                    // the default ledger: the accounts of db
	ledgers ledgers                    // every ledger, the default ("") among them
	log     *txnLog                    // the log: every command on the transactions collection
	settler *settlers                  // background settling, one settler per set of ledgers
	exists  *ledgerStages[*existsCall] // see readExistence
	inserts *stage[*insertCall]        // see insertAll
	applies *applyStages               // see applyRound
	commits *stage[*commitCall]        // see commitAll
	keys    keyCalls                   // the keyed calls running, one at a time a key
	claims  *claims                    // the claims this instance issues, and the transactions its calls drive
	indexes *logIndexes                // the library's indexes, made or checked once (indexes.go)
	shards  *shardKeys                 // the collections' shard keys, read and allowed once (shardkey.go)
	skew    *skewCheck                 // the shards' clock skew, measured once on a sharded cluster (clockskew.go)
	// checkpoints holds statements' checkpoints: an account's balance
	// through a time (see statement.go).
	checkpoints *mongo.Collection
	books       *refundBooks      // the refund books (see Refund)
	feeds       *mongo.Collection // the feeds' and subscriber groups' documents (see Feed)

	closeOnce sync.Once
}

// NewCoordinator returns a coordinator for the accounts and transactions
// collections of db. Whatever db's (or its client's) defaults, every read
// the library decides by uses majority read concern, every write majority
// write concern (WithWriteConcern changes that), and both go to the
// primary: a step the library reports done survives a failover, and a
// write that fails with a write-concern error is reported as an error,
// never as success (the transaction's state then tells, and recovery
// finishes it).
//
// The statements a transfer sends, and the transaction documents its
// writes return, are encoded and decoded by the driver's default BSON
// rules, whatever BSONOptions the client sets: an int64 stays an int64
// under IntMinSize, and the times in those documents are UTC even under
// UseLocalTimeZone. A value the default rules do not fix (an account id of
// a type of the caller's) goes through the client's registry and options,
// as do the library's other reads and writes.
//
// The server must give single-document atomicity, hello's localTime
// (MongoDB 4.4.2 and later) and majority read concern (a MongoDB 4.4
// deployment with enableMajorityReadConcern: false is not supported:
// recovery, Cancel and Get then fail). Every per-document write filters
// by _id, so on a sharded cluster each is sent to one shard when the
// accounts collections are sharded on {_id: "hashed"} (or {_id: 1}) and
// the log unsharded or sharded on {_id: "hashed"}; the coordinator reads
// the shard keys through the router before the first write that inserts
// or upserts into each collection, and refuses any other (ErrShardKey; see
// PROTOCOL.md, Scale-out). There, once that read finds the log behind a
// router, it also measures once, in the background and within 30 s, how
// far the clock of each shard that holds the log is from the router's,
// and logs a warning if one is, or may be, past a quarter of the page
// tokens' horizon (PROTOCOL.md, Clocks; the probe collection twopc doctor
// shards, <transactions>_clockprobe, must exist: without it, an info
// line says so); no call waits for it. FerretDB alone
// loses updates; the repository's dev server
// puts it behind a front that serializes requests.
//
// The coordinator makes the indexes it reads by (see EnsureIndexes) itself,
// once, before the first read that needs them: the low-water mark's (in
// the background, from the first transfer), a Recoverer pass's, a
// statement's. So none of those reads scans the log. Under
// WithManagedIndexes it makes none, and those reads fail with
// ErrMissingIndex, naming the missing ones, until they exist.
func NewCoordinator(db *mongo.Database, opts ...Option) (*Coordinator, error) {
	if db == nil {
		return nil, errors.New("twopc: NewCoordinator: nil database")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, errorf("twopc: %w", err)
		}
	}
	// Every read the library decides by is a majority read, and every
	// write a majority write, on the primary: on a replica set, a write
	// that a failover could roll back is never taken as done, nor reported
	// done to a caller.
	majority := options.Collection().SetReadConcern(readconcern.Majority()).
		SetWriteConcern(cfg.writeConcern).SetReadPreference(readpref.Primary())
	c := &Coordinator{
		config: cfg,
		db:     db,
		claims: newClaims(),
	}
	c.log = &txnLog{config: &c.config, txns: db.Collection(cfg.transactions, majority)}
	c.checkpoints = db.Collection(cfg.transactions+checkpointsSuffix, majority)
	c.books = &refundBooks{c: c, coll: db.Collection(cfg.transactions+refundsSuffix, majority)}
	c.feeds = db.Collection(cfg.transactions+feedsSuffix, majority)
	if c.history.archive != nil {
		a := c.history.archive
		if a.Name() == cfg.transactions && a.Database().Name() == db.Name() {
			return nil, errorf("twopc: WithHistory: the archive is the transactions collection")
		}
		c.history.archive = a.Clone(majority)
	}
	c.ledger = &Ledger{config: &c.config, accounts: db.Collection(cfg.accounts, majority)}
	c.ledgers = ledgers{"": c.ledger}
	for _, spec := range cfg.ledgers {
		c.ledgers[spec.name] = &Ledger{config: &c.config, name: spec.name, accounts: spec.accounts.Clone(majority)}
	}
	c.skew = newSkewCheck(c)
	c.shards = newShardKeys(c)
	c.indexes = newLogIndexes(c.log.txns, c.checkpoints, c.history.archive, cfg.managedIndexes, c.shards)
	c.mark = newLowWater(c)
	c.settler = &settlers{c: c}
	c.exists = &ledgerStages[*existsCall]{write: func(ctx context.Context, calls []*existsCall) { readExistence(ctx, c.ledgers, calls) },
		legs: func(q *existsCall) []leg { return q.t.rec.legs() }}
	c.inserts = &stage[*insertCall]{write: c.insertAll}
	c.applies = &applyStages{write: c.applyRound, legs: func(q *applyCall) []leg { return q.todo }}
	c.commits = &stage[*commitCall]{write: c.log.commitAll, grace: readBackTimeout}
	return c, nil
}

// Application returns the owner name this coordinator claims transactions
// under.
func (c *Coordinator) Application() string { return c.application }

// OpenAccount opens account id in the coordinator's default ledger (see
// Ledger.OpenAccount).
func (c *Coordinator) OpenAccount(ctx context.Context, id any, balance int64, opts ...AccountOption) error {
	return c.ledger.OpenAccount(ctx, id, balance, opts...)
}

// Account reads account id of the default ledger (see Ledger.Account),
// and, from the log, by the account's markers, its CommittedCredit: what
// committed transfers will add to Balance once settled, which a debit
// may already spend.
func (c *Coordinator) Account(ctx context.Context, id any) (_ *Account, err error) {
	ctx, b := c.readBound(ctx, "account")
	defer func() { err = b.explain(err); b.end() }()
	a, pending, err := c.ledger.account(ctx, id)
	if err != nil || len(pending) == 0 {
		return a, err
	}
	if a.CommittedCredit, err = c.log.committedCredit(ctx, c.ledger.name, id, pending); err != nil {
		return nil, errorf("twopc: account %v: %w", id, err)
	}
	return a, nil
}

// Balance returns the available balance of account id of the default
// ledger (see Account).
func (c *Coordinator) Balance(ctx context.Context, id any) (int64, error) {
	return c.ledger.Balance(ctx, id)
}

// Ledger returns the ledger of that name: "" for the default one (the
// accounts collection of the coordinator's database), or one given with
// WithLedger. ErrUnknownLedger if there is none.
func (c *Coordinator) Ledger(name string) (*Ledger, error) {
	return c.ledgers.get(name)
}

// Settle waits until every transaction this coordinator committed before
// the call is settled (or has failed to settle and been left to recovery).
// The wait is bounded as a money call is (WithCallTimeout): one that the
// bound ends returns its error (errors.Is context.DeadlineExceeded), and
// loses nothing: the settling goes on in the background, and what it
// leaves a Recoverer pass settles.
func (c *Coordinator) Settle(ctx context.Context) (err error) {
	ctx, b := c.bound(ctx)
	defer b.end()
	if err := c.settler.flush(ctx); err != nil {
		return b.explain(errorf("twopc: settle: not every committed transaction is settled yet (nothing is lost: "+
			"what is left is settled in the background, or by recovery): %w", err))
	}
	return nil
}

// Close stops background settling after settling what was committed, the
// low-water mark's readings and the shards' clock skew check (canceled if
// under way), and makes later Transfers fail with ErrClosed. It does not
// disconnect the database client.
func (c *Coordinator) Close(ctx context.Context) error {
	var err error
	c.closeOnce.Do(func() {
		err = c.settler.close(ctx)
		c.mark.close()
		c.skew.close()
	})
	return err
}

// serverNow returns the server's clock, from hello's localTime. Staleness is
// always judged by the server's clock against lastModified, which the
// server also writes ($currentDate): the clocks of the hosts running the
// library play no part.
func (g *txnLog) serverNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := g.try(ctx, StepClock, nil, func(ctx context.Context) error {
		var err error
		now, err = schema.ServerNow(ctx, g.txns.Database())
		return err
	})
	return now, err
}

// stale reports whether r's lastModified is older than its lease (the
// longest StaleAfter of any process that claimed it, and c's) by the
// server's clock.
func (g *txnLog) stale(ctx context.Context, r *record) (bool, error) {
	now, err := g.serverNow(ctx)
	if err != nil {
		return false, err
	}
	return r.LastModified.Before(now.Add(-r.lease(g.staleAfter))), nil
}
