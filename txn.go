package twopc

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// Txn is a transfer as stored in the transactions collection: the
// tutorial's document, plus the idempotency key and, for a canceled
// transfer, the reason.
type Txn struct {
	ID           bson.ObjectID `bson:"_id"`
	Source       any           `bson:"source"`
	Destination  any           `bson:"destination"`
	Value        int64         `bson:"value"`
	State        State         `bson:"state"`
	LastModified time.Time     `bson:"lastModified"`
	Application  string        `bson:"application,omitempty"`
	Key          string        `bson:"key,omitempty"`
	Reason       string        `bson:"reason,omitempty"`
	// Created is the transaction time: when the coordinator that wrote the
	// transaction created it, by that coordinator's clock, to the
	// millisecond. It never changes. Accounts' fence lines (see the
	// package documentation) are compared with it.
	Created time.Time `bson:"created,omitempty"`
	// Legs are the legs of a transfer made with TransferLegs (Source and
	// Destination are then nil, and Value is the total credited); a
	// transfer made with Transfer keeps the tutorial's shape and has none.
	// AllLegs returns the legs of either.
	Legs []Leg `bson:"legs,omitempty"`
}

// Coordinator drives transfers between account documents through the
// two-phase commit protocol: it inserts each transaction claimed and
// pending, applies both legs, moves it to applied (the commit point), and
// settles it to done. It is safe for concurrent use. Close it to let
// background settling finish.
type Coordinator struct {
	config
	db      *mongo.Database
	ledger  *Ledger             // the default ledger: the accounts of db
	ledgers map[string]*Ledger  // every ledger, the default ("") among them
	txns    *mongo.Collection   // the log
	settler *settlers           // background settling, one settler per set of ledgers
	inserts *stage[*insertCall] // see insertAll
	applies *applyStages        // see applyRound
	commits *stage[*commitCall] // see commitAll

	closeOnce sync.Once
}

// NewCoordinator returns a coordinator for the accounts and transactions
// collections of db. Whatever db's (or its client's) defaults, every read
// the library decides by uses majority read concern, every write majority
// write concern (WithWriteConcern changes that), and both go to the
// primary: a step the library reports done survives a failover.
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
			return nil, fmt.Errorf("twopc: %w", err)
		}
	}
	if cfg.fenceRetention < cfg.staleAfter {
		cfg.fenceRetention = cfg.staleAfter
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
		txns:   db.Collection(cfg.transactions, majority),
	}
	if c.history.archive != nil {
		a := c.history.archive
		if a.Name() == cfg.transactions && a.Database().Name() == db.Name() {
			return nil, fmt.Errorf("twopc: WithHistory: the archive is the transactions collection")
		}
		c.history.archive = a.Clone(majority)
	}
	c.ledger = &Ledger{config: &c.config, accounts: db.Collection(cfg.accounts, majority)}
	c.ledgers = map[string]*Ledger{"": c.ledger}
	for _, spec := range cfg.ledgers {
		c.ledgers[spec.name] = &Ledger{config: &c.config, name: spec.name, accounts: spec.accounts.Clone(majority)}
	}
	c.settler = &settlers{c: c}
	c.inserts = &stage[*insertCall]{write: c.insertAll}
	c.applies = &applyStages{write: c.applyRound}
	c.commits = &stage[*commitCall]{write: c.commitAll}
	return c, nil
}

// Application returns the owner name this coordinator claims transactions
// under.
func (c *Coordinator) Application() string { return c.application }

// EnsureIndexes creates the indexes the protocol's scans use, idempotently:
// {state, lastModified} for recovery, {state, created} for the unfinished
// transactions fence removal must wait for, and {fences, lastModified} for
// fence removal. That last one is partial ({fences: true}: only the
// transactions whose fences are still up) where the server has partial
// indexes, as MongoDB has; where it refuses them (FerretDB), it is sparse,
// which holds every transaction. An index of the same name and keys made
// by an earlier version is kept as it is. No index is needed for
// correctness: accounts and transactions are read and written by _id, and
// idempotency keys are enforced by the _id derived from them.
func (c *Coordinator) EnsureIndexes(ctx context.Context) error {
	// Only the missing ones are asked for, one per command: an index of
	// that name, of this version or an earlier one, serves; and FerretDB
	// v1 drops the connection when one createIndexes names several that
	// exist.
	specs, err := c.txns.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fmt.Errorf("twopc: ensure indexes: %w", err)
	}
	have := map[string]bool{}
	for _, ix := range specs {
		have[ix.Name] = true
	}
	partial := options.Index().SetName(fencesIndex).SetPartialFilterExpression(bson.D{{Key: fieldFences, Value: true}})
	sparse := options.Index().SetName(fencesIndex).SetSparse(true)
	for _, ix := range []struct {
		keys     bson.D
		opts     *options.IndexOptionsBuilder
		fallback *options.IndexOptionsBuilder // if the server refuses opts
	}{
		{keys: bson.D{{Key: fieldState, Value: 1}, {Key: fieldLastModified, Value: 1}}, opts: options.Index().SetName("state_1_lastModified_1")},
		{keys: bson.D{{Key: fieldState, Value: 1}, {Key: fieldCreated, Value: 1}}, opts: options.Index().SetName("state_1_created_1")},
		{keys: bson.D{{Key: fieldFences, Value: 1}, {Key: fieldLastModified, Value: 1}}, opts: partial, fallback: sparse},
	} {
		if err := c.ensureIndex(ctx, have, ix.keys, ix.opts, ix.fallback); err != nil {
			return fmt.Errorf("twopc: ensure indexes: %w", err)
		}
	}
	return nil
}

// ensureIndex creates one index unless have names it; if the server
// refuses its options and fallback is set, it creates fallback instead.
func (c *Coordinator) ensureIndex(ctx context.Context, have map[string]bool, keys bson.D, opts, fallback *options.IndexOptionsBuilder) error {
	var o options.IndexOptions
	for _, set := range opts.List() {
		if err := set(&o); err != nil {
			return err
		}
	}
	if o.Name != nil && have[*o.Name] {
		return nil
	}
	_, err := c.txns.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: opts})
	var se mongo.ServerError
	// The server has no such option (NotImplemented, CommandNotSupported,
	// InvalidOptions, BadValue, CannotCreateIndex,
	// InvalidIndexSpecificationOption), as opposed to a transient failure,
	// after which the next call tries again.
	refused := func() bool {
		return errors.As(err, &se) && (se.HasErrorCode(238) || se.HasErrorCode(115) || se.HasErrorCode(72) ||
			se.HasErrorCode(2) || se.HasErrorCode(67) || se.HasErrorCode(197))
	}
	conflict := func() bool {
		return errors.As(err, &se) && (se.HasErrorCode(codeIndexOptionsConflict) || se.HasErrorCode(codeIndexKeySpecsConflict))
	}
	if fallback != nil && refused() {
		_, err = c.txns.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: fallback})
	}
	if conflict() {
		return nil // made meanwhile by another process, of the other kind: it serves
	}
	return err
}

// fencesIndex names fence removal's index, partial or sparse.
const fencesIndex = "fences_1_lastModified_1"

// The server's codes for an index that exists with other options, or other
// keys, under the name asked for.
const (
	codeIndexOptionsConflict  = 85
	codeIndexKeySpecsConflict = 86
)

// OpenAccount opens account id in the coordinator's default ledger (see
// Ledger.OpenAccount).
func (c *Coordinator) OpenAccount(ctx context.Context, id any, balance int64) error {
	return c.ledger.OpenAccount(ctx, id, balance)
}

// Account reads account id of the default ledger (see Ledger.Account).
func (c *Coordinator) Account(ctx context.Context, id any) (*Account, error) {
	return c.ledger.Account(ctx, id)
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
	l, ok := c.ledgers[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownLedger, name)
	}
	return l, nil
}

// Get returns transaction id as it now stands: as the archive holds it, if
// WithHistory's archive does (see Coordinator.lookup), else as the log
// does.
func (c *Coordinator) Get(ctx context.Context, id bson.ObjectID) (*Txn, error) {
	r, _, err := c.lookup(ctx, id)
	if r == nil {
		return nil, err
	}
	return r.txn(), err
}

// Transfer moves value (in minor units) from source to destination. It
// validates its input first: a value that is not positive, equal accounts,
// or an id that cannot be an _id returns ErrInvalidTransfer and writes
// nothing.
//
// Transfer inserts the transaction claimed by this coordinator and pending,
// applies both legs, and moves it to applied, the commit point: three round
// trips. It returns the transaction with State applied, or done under
// WithSyncSettle; settling (pulling the id from both accounts, then done)
// follows in the background, and a Recoverer finishes it if this process
// dies first.
//
// If a leg cannot apply, the transaction is rolled back and ends canceled,
// and Transfer returns ErrInsufficientFunds, ErrAccountNotFound,
// ErrBalanceOverflow or ErrInvalidAccount. If a Canceler canceled it first,
// ErrCanceled; if another application took it over while this call
// stalled, ErrInProgress.
//
// Any other error (the database, the context, a step hook) leaves the
// transaction where it stood, for a Recoverer: the returned Txn, when not
// nil, says where. An error with a Txn whose State is Committed means the
// money moved. Cancel(txn.ID) settles the question for good (see
// Canceler.Cancel). With WithKey, Transfer can be repeated safely after
// any error: it returns the first attempt's transaction in whatever state
// it reached. A first attempt abandoned before any leg applied is rolled
// back by recovery once stale (ErrCanceled, reason "stale_pending"): the
// money did not move, and a new transfer needs a new key.
func (c *Coordinator) Transfer(ctx context.Context, source, destination any, value int64, opts ...TransferOption) (*Txn, error) {
	if err := validateTransfer(source, destination, value); err != nil {
		return nil, err
	}
	return c.start(ctx, Txn{Source: source, Destination: destination, Value: value}, opts)
}

// start inserts and drives transfer t, whose legs were validated.
func (c *Coordinator) start(ctx context.Context, t Txn, opts []TransferOption) (*Txn, error) {
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	if c.settler.isClosed() {
		return nil, ErrClosed
	}
	tr := c.newTransfer(t, tc.key)
	c.run(ctx, []*transfer{tr})
	return tr.txn, tr.err
}

// transfer is one transfer on its way through the steps: the transaction
// this call wrote (or means to), the claim once it owns it, and, once
// decided, the caller's answer.
type transfer struct {
	rec  *record
	o    *owned
	txn  *Txn
	err  error
	over bool // answered
}

func (t *transfer) answer(txn *Txn, err error) { t.txn, t.err, t.over = txn, err, true }

// newTransfer makes the transaction of transfer t (validated), with key if
// not "", claimed by this coordinator and pending, under the policy of
// this coordinator, which it records.
func (c *Coordinator) newTransfer(t Txn, key string) *transfer {
	id := c.newID()
	if key != "" {
		id = keyID(key)
	}
	t.ID, t.State, t.Application, t.Key = id, StatePending, c.application, key
	t.Created = c.now().UTC().Truncate(time.Millisecond)
	return &transfer{rec: &record{
		Txn:           t,
		Claim:         bson.NewObjectID(),
		AllowNegative: c.allowNegative,
		LeaseMs:       c.staleAfter.Milliseconds(),
		RetainMs:      c.fenceRetention.Milliseconds(),
		KeepMs:        c.history.keep.Milliseconds(),
		Archive:       c.history.archiveName(),
	}}
}

// run takes transfers ts through every step, each step of all of them in
// the same writes (see stage), and leaves each one's answer in it.
func (c *Coordinator) run(ctx context.Context, ts []*transfer) {
	claimedAt := c.now()
	calls := make([]*insertCall, 0, len(ts))
	for _, t := range ts {
		if err := c.at(ctx, StepInsert, t.rec); err != nil {
			t.answer(t.rec.txn(), insertUnknown(t.rec, err))
			continue
		}
		calls = append(calls, &insertCall{t: t})
	}
	if err := c.inserts.join(ctx, calls...); err != nil {
		// Given up on: a write may still be filling calls in.
		for _, q := range calls {
			q.t.answer(q.t.rec.txn(), insertUnknown(q.t.rec, err))
		}
		return
	}
	var mine []*transfer
	for _, q := range calls {
		t, r, cur, err := q.t, q.t.rec, q.cur, q.err
		for attempt := 0; err == nil && r.Key == "" && cur.Claim != r.Claim && attempt < 3; attempt++ {
			// A fresh id is taken only by another transaction whose id
			// collided with it (or a placeholder Cancel wrote for that
			// one): not this transfer's to answer for. Take another id.
			r.ID = c.newID()
			cur, err = c.insert(ctx, r)
		}
		switch {
		case err != nil:
			t.answer(r.txn(), insertUnknown(r, err))
		case cur.Claim != r.Claim:
			t.answer(c.replay(cur, r))
		case cur.State != StatePending:
			t.answer(c.outcome(cur))
		default:
			t.o = &owned{rec: cur, claimedAt: claimedAt}
			mine = append(mine, t)
		}
	}
	c.driveAll(ctx, mine, c.syncSettle)
}

// insertUnknown is a transfer's error when its insert failed: it may have
// happened, or may still arrive. The caller gets the id, and Cancel
// settles it either way (a transaction that never arrived is canceled for
// good), or repeats the call with its key.
func insertUnknown(r *record, err error) error {
	return fmt.Errorf("twopc: transfer %s: the insert's outcome is unknown; Cancel it, or repeat the transfer with its key: %w", r.ID.Hex(), err)
}

// insertCall is one transfer's insert in the insert stage, and its
// outcome: the transaction under its _id as the write left it.
type insertCall struct {
	t   *transfer
	cur *record
	err error
}

// insertAll is the insert stage's write. One insert is insert's single
// find-and-modify, which returns the document. Several are commands of the
// same guarded upserts, one statement each, at most writeBatch statements
// a command; a transaction counts as this call's, as written, only if the
// reply names its own statement (by index, as MongoDB numbers upserted
// statements) as having upserted its _id. Any other (an _id already taken,
// an earlier attempt's lost reply, a write error) is inserted again alone,
// which the upsert's guard makes harmless, and answered as a single insert
// is.
//
// One _id, one owner: calls whose transactions share an _id (one key,
// concurrent Reverse of one transfer, a fresh id that collided) never go
// in one command. The first of them does; the others are inserted alone
// after it, one at a time, and each learns from the document the
// find-and-modify returns whose claim the log holds, so exactly one call
// owns the transaction, as if the calls had come one after the other.
// Step hooks were called by each transfer's caller.
func (c *Coordinator) insertAll(ctx context.Context, calls []*insertCall) {
	if len(calls) == 1 {
		q := calls[0]
		q.cur, q.err = c.insertOne(ctx, q.t.rec)
		return
	}
	var grouped []*insertCall
	first := map[bson.ObjectID]*insertCall{}   // the first call of each _id
	later := map[bson.ObjectID][]*insertCall{} // calls whose _id an earlier call of the group has
	var laterIDs []bson.ObjectID
	for _, q := range calls {
		id := q.t.rec.ID
		if first[id] != nil {
			if len(later[id]) == 0 {
				laterIDs = append(laterIDs, id)
			}
			later[id] = append(later[id], q)
			continue
		}
		first[id] = q
		grouped = append(grouped, q)
	}
	var again []*insertCall
	for start := 0; start < len(grouped); start += c.writeBatch {
		again = append(again, c.insertGroup(ctx, grouped[start:min(start+c.writeBatch, len(grouped))], len(calls))...)
	}
	// Those inserted alone: each _id's calls one after the other.
	byID := map[bson.ObjectID][]*insertCall{}
	var ids []bson.ObjectID
	for _, q := range again {
		if byID[q.t.rec.ID] == nil {
			ids = append(ids, q.t.rec.ID)
		}
		byID[q.t.rec.ID] = append(byID[q.t.rec.ID], q)
	}
	for _, id := range laterIDs {
		if byID[id] == nil {
			ids = append(ids, id)
		}
		byID[id] = append(byID[id], later[id]...)
	}
	_ = parallel(len(ids), func(i int) error {
		// Once one call of the _id has the document as stored, it is
		// every later call's answer too (none of them wrote it): no need
		// to send their inserts only to be told so.
		stored := first[ids[i]].cur
		for _, q := range byID[ids[i]] {
			if stored != nil && q.cur == nil {
				cp := *stored
				q.cur = &cp
				continue
			}
			if q.cur == nil {
				q.cur, q.err = c.insertOne(ctx, q.t.rec)
			}
			if q.err == nil {
				stored = q.cur
			}
		}
		return nil
	})
}

// insertGroup sends the guarded upserts of calls, whose _ids are distinct,
// in one command, fills in the calls it inserted, and returns the others,
// to be inserted alone. of is the size of the stage's group, for the
// observers.
func (c *Coordinator) insertGroup(ctx context.Context, calls []*insertCall, of int) []*insertCall {
	if len(calls) == 1 {
		return calls
	}
	models := make([]mongo.WriteModel, len(calls))
	for i, q := range calls {
		filter, update := insertWrite(q.t.rec)
		models[i] = updateByID().SetFilter(filter).SetUpdate(update).SetUpsert(true)
	}
	start := time.Now()
	var res *mongo.BulkWriteResult
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		res, err = c.txns.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		return err
	})
	var bwe mongo.BulkWriteException
	if err != nil && (!errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0) {
		// Not answered, or not durably: every insert's outcome is unknown.
		for _, q := range calls {
			q.err = err
			c.transition(ctx, q.t.rec.ID, inserted, start, of, false, err)
		}
		return nil
	}
	var again []*insertCall
	for i, q := range calls {
		// The statement's own index, and its own _id: a reply that numbers
		// upserts otherwise (FerretDB v1's count) can only send a
		// transaction to be inserted again alone, never make two calls
		// owners of one.
		var id bson.ObjectID
		if res != nil {
			id, _ = res.UpsertedIDs[int64(i)].(bson.ObjectID)
		}
		if id.IsZero() || id != q.t.rec.ID {
			again = append(again, q)
			continue
		}
		cur := *q.t.rec
		cur.LastModified = start // the server's clock set the stored one; not read back
		q.cur = &cur
		c.transition(ctx, cur.ID, inserted, start, of, true, nil)
	}
	return again
}

// inserted is the insert's move, from no state, as the observers hear it.
var inserted = move{step: StepInsert, to: StatePending}

// insert writes the new transaction alone (see insertOne), after calling
// the step hook.
func (c *Coordinator) insert(ctx context.Context, r *record) (*record, error) {
	if err := c.at(ctx, StepInsert, r); err != nil {
		return nil, err
	}
	return c.insertOne(ctx, r)
}

// insertWrite is the guarded upsert that inserts r, claimed and pending,
// with lastModified from the server's clock, keyed by its _id: a retry
// after a lost reply finds it rather than inserting a second one.
func insertWrite(r *record) (filter, update bson.D) {
	var doc bson.D
	if len(r.Legs) > 0 {
		doc = bson.D{{Key: fieldLegs, Value: r.Legs}}
	} else {
		doc = bson.D{{Key: "source", Value: r.Source}, {Key: "destination", Value: r.Destination}}
	}
	doc = append(doc, bson.D{
		{Key: "value", Value: r.Value},
		{Key: fieldState, Value: r.State},
		{Key: fieldApplication, Value: r.Application},
		{Key: fieldCreated, Value: r.Created},
		{Key: fieldLease, Value: r.LeaseMs},
		{Key: fieldRetain, Value: r.RetainMs},
	}...)
	if r.AllowNegative {
		doc = append(doc, bson.E{Key: fieldAllowNegative, Value: true})
	}
	if r.KeepMs > 0 {
		doc = append(doc, bson.E{Key: fieldKeep, Value: r.KeepMs})
		if r.Archive != "" {
			doc = append(doc, bson.E{Key: fieldArchive, Value: r.Archive})
		}
	}
	if r.Key != "" {
		doc = append(doc, bson.E{Key: fieldKey, Value: r.Key})
	}
	// A fresh _id is nobody else's: the filter is the _id alone, which
	// every server serves from its index, and a retry that finds the
	// document only refreshes this transfer's own lastModified. A key's _id
	// may be an earlier transfer's, whose lastModified a retry must not
	// refresh (that would keep a dead owner's transaction from going
	// stale): the filter adds the claim, so that only this call's own
	// document matches and any other fails on the _id's uniqueness.
	filter = bson.D{{Key: "_id", Value: r.ID}}
	if r.Key != "" {
		filter = append(filter, bson.E{Key: fieldClaim, Value: r.Claim}) // the claim comes from the filter's equality
	} else {
		doc = append(doc, bson.E{Key: fieldClaim, Value: r.Claim})
	}
	update = bson.D{
		{Key: "$setOnInsert", Value: doc},
		{Key: "$currentDate", Value: bson.D{{Key: fieldLastModified, Value: true}}},
	}
	return filter, update
}

// insertOne writes the new transaction (see insertWrite) in one
// find-and-modify. If the _id is an earlier transfer's (same key), it
// returns that transaction; the caller compares claims to tell.
func (c *Coordinator) insertOne(ctx context.Context, r *record) (*record, error) {
	filter, update := insertWrite(r)
	var cur record
	start := time.Now()
	err := c.retry(ctx, func(ctx context.Context) error {
		return c.txns.FindOneAndUpdate(ctx, filter, update,
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&cur)
	})
	if mongo.IsDuplicateKeyError(err) {
		prior, err := c.read(ctx, r.ID)
		if prior == nil && errors.Is(err, ErrTxnNotFound) {
			// Taken, then not found: removed since (WithHistory), or not
			// yet visible at majority. Not ErrTxnNotFound: it may exist.
			err = fmt.Errorf("the _id was taken by a document that is not found now (removed by WithHistory, or not yet majority-committed): %v", err)
		}
		if prior == nil {
			c.transition(ctx, r.ID, inserted, start, 1, false, err)
			return nil, err
		}
		c.transition(ctx, r.ID, inserted, start, 1, false, nil) // another transaction has the _id
		return prior, nil
	}
	if err != nil {
		c.transition(ctx, r.ID, inserted, start, 1, false, err)
		return nil, err
	}
	c.transition(ctx, r.ID, inserted, start, 1, cur.Claim == r.Claim, nil)
	return &cur, nil
}

// keyID is the _id of the transaction with idempotency key key: the first
// 12 bytes of a SHA-256 of it. Deriving the _id from the key makes the
// _id's own uniqueness enforce the key's, with no secondary unique index
// (which a collection sharded on a hashed _id could not have) and every
// lookup targeted by _id.
func keyID(key string) bson.ObjectID {
	sum := sha256.Sum256([]byte("twopc/key\x00" + key))
	var id bson.ObjectID
	copy(id[:len(id)-1], sum[:]) // the last byte is zero: see legMarker
	return id
}

// newTxnID is a fresh transaction id: an ObjectID-shaped value of four
// bytes of seconds (so ids sort roughly by creation, as ObjectIDs do) and
// seven random bytes, and a zero last byte, which leg markers use (see
// legMarker). Two ids collide only if made in the same second with the
// same 56 random bits.
func newTxnID() bson.ObjectID {
	var id bson.ObjectID
	binary.BigEndian.PutUint32(id[:4], uint32(time.Now().Unix()))
	_, _ = rand.Read(id[4 : len(id)-1]) // crypto/rand.Read never fails
	return id
}

// replay answers a Transfer whose key an earlier transfer holds.
func (c *Coordinator) replay(prior, asked *record) (*Txn, error) {
	if prior.Placeholder {
		return c.outcome(prior) // canceled before it arrived
	}
	if prior.Key != asked.Key || !sameLegs(prior.legs(), asked.legs()) {
		return prior.txn(), fmt.Errorf("%w: key %q is transaction %s (legs %v)",
			ErrKeyConflict, asked.Key, prior.ID.Hex(), prior.AllLegs())
	}
	return c.outcome(prior)
}

// owned is a transaction this process holds the claim of, and when it sent
// the write that took the claim, by its own monotonic clock.
type owned struct {
	rec       *record
	claimedAt time.Time

	// What a first apply round made with other transfers left for this
	// one to do alone (see applyFirst): legs to apply again, or why a leg
	// cannot apply.
	next []leg
	why  error
}

// drive takes an owned pending transaction to its commit point, or rolls it
// back when a leg cannot apply; then settles it now (sync) or in the
// background.
func (c *Coordinator) drive(ctx context.Context, o *owned, sync bool) (*Txn, error) {
	t := &transfer{rec: o.rec, o: o}
	c.driveAll(ctx, []*transfer{t}, sync)
	return t.txn, t.err
}

// driveAll drives owned pending transfers ts (see drive), each step of
// all of them in the same writes: their legs in one command per ledger,
// their commits in one, their settling in one batch. A transfer that
// leaves the common path (a leg that cannot apply, an account that changed
// under the write, a lost claim) goes on alone, beside the others.
//
// Transfers on different sets of ledgers are driven apart, at once, so
// that a ledger that is down or slow holds up only the transfers with a
// leg on it, even within one TransferBatch.
func (c *Coordinator) driveAll(ctx context.Context, ts []*transfer, syncSettle bool) {
	if len(ts) > 1 {
		sets := splitByLedgers(ts, func(t *transfer) []leg { return t.o.rec.legs() })
		if len(sets) > 1 {
			_ = parallel(len(sets), func(i int) error {
				c.driveAll(ctx, sets[i], syncSettle)
				return nil
			})
			return
		}
	}
	var ready, alone []*transfer
	switch len(ts) {
	case 0:
		return
	case 1:
		alone = ts
	default:
		ready, alone = c.applyFirst(ctx, ts)
	}
	rest := func(i int) error {
		t := alone[i]
		why, err := t.o.why, error(nil)
		if why == nil {
			todo, round := t.o.rec.legs(), 0
			if t.o.next != nil {
				todo, round = t.o.next, 1
			}
			why, err = c.applyLegs(ctx, t.o, todo, round)
		}
		c.applied(ctx, t, why, err)
		if !t.over {
			c.commitEach(ctx, []*transfer{t}, syncSettle)
		}
		return nil
	}
	if len(ready) == 0 {
		_ = parallel(len(alone), rest)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = parallel(len(alone), rest)
	}()
	c.commitEach(ctx, ready, syncSettle)
	<-done
}

// applyFirst makes the first apply round of transfers ts together (see
// applyRound), and returns those whose legs all applied and those that go
// on alone; it answers those it is done with.
func (c *Coordinator) applyFirst(ctx context.Context, ts []*transfer) (ready, alone []*transfer) {
	var calls []*applyCall
	var of []*transfer
	for _, t := range ts {
		err := c.at(ctx, StepApply, t.o.rec)
		if err == nil {
			err = c.renew(ctx, t.o)
		}
		if err != nil {
			c.applied(ctx, t, nil, err)
			continue
		}
		calls = append(calls, &applyCall{o: t.o, todo: t.o.rec.legs()})
		of = append(of, t)
	}
	if err := c.applies.join(ctx, calls...); err != nil {
		for _, t := range of {
			c.applied(ctx, t, nil, err)
		}
		return nil, nil
	}
	for i, q := range calls {
		t := of[i]
		switch {
		case q.unsent || (q.err != nil && transient(ctx, q.err)):
			alone = append(alone, t) // from the first round again, alone
		case q.err != nil:
			c.applied(ctx, t, nil, q.err)
		case q.lost:
			c.applied(ctx, t, nil, errLost)
		case q.why != nil:
			alone = append(alone, t)
			t.o.why = q.why
		case len(q.next) > 0:
			t.o.next = q.next
			alone = append(alone, t)
		default:
			ready = append(ready, t)
		}
	}
	return ready, alone
}

// applied answers t when applying its legs ended in an error or with a leg
// that cannot apply (why: it is rolled back).
func (c *Coordinator) applied(ctx context.Context, t *transfer, why, err error) {
	o := t.o
	if errors.Is(err, errLost) {
		cur, rerr := c.read(ctx, o.rec.ID)
		if rerr != nil {
			t.answer(o.rec.txn(), rerr)
			return
		}
		t.answer(c.outcome(cur))
		return
	}
	if err != nil {
		t.answer(o.rec.txn(), fmt.Errorf("twopc: transfer %s: %w", o.rec.ID.Hex(), err))
		return
	}
	if why != nil {
		t.answer(c.abort(ctx, o.rec, why))
	}
}

// commitEach commits transfers ts, whose legs all applied, in the commit
// stage, and settles those it moved: now (sync), in one batch, or in the
// background.
func (c *Coordinator) commitEach(ctx context.Context, ts []*transfer, sync bool) {
	var calls []*commitCall
	var of []*transfer
	for _, t := range ts {
		if err := c.at(ctx, StepCommit, t.o.rec); err != nil {
			t.answer(t.o.rec.txn(), fmt.Errorf("twopc: transfer %s: %w", t.o.rec.ID.Hex(), err))
			continue
		}
		calls = append(calls, &commitCall{rec: t.o.rec})
		of = append(of, t)
	}
	if err := c.commits.join(ctx, calls...); err != nil {
		// Given up on: a write may still be filling calls in.
		for _, t := range of {
			t.answer(t.o.rec.txn(), fmt.Errorf("twopc: transfer %s: %w", t.o.rec.ID.Hex(), err))
		}
		return
	}
	var settle []*record
	var settling []*transfer
	for i, q := range calls {
		t := of[i]
		switch {
		case q.err != nil:
			t.answer(q.cur.txn(), fmt.Errorf("twopc: transfer %s: %w", t.o.rec.ID.Hex(), q.err))
		case !q.moved:
			t.answer(c.outcome(q.cur))
		default:
			settle = append(settle, q.cur)
			settling = append(settling, t)
		}
	}
	if len(settle) == 0 {
		return
	}
	if !sync && c.settler.enqueue(settle...) {
		// Settled in the background, in one batch at least.
		for i, t := range settling {
			t.answer(settle[i].txn(), nil)
		}
		return
	}
	done, left, _ := c.settle(ctx, settle)
	byID := map[bson.ObjectID]*record{}
	for _, r := range done {
		byID[r.ID] = r
	}
	failed := map[bson.ObjectID]error{}
	for _, u := range left {
		failed[u.rec.ID] = u.err
	}
	for i, t := range settling {
		cur := settle[i]
		if err := failed[cur.ID]; err != nil {
			t.answer(cur.txn(), fmt.Errorf("twopc: transfer %s committed; settling: %w", cur.ID.Hex(), err))
			continue
		}
		if d := byID[cur.ID]; d != nil {
			cur = d
		}
		t.answer(cur.txn(), nil)
	}
}

// abort rolls back an owned pending transaction whose leg cannot apply,
// and returns why.
func (c *Coordinator) abort(ctx context.Context, r *record, why error) (*Txn, error) {
	cur, moved, err := c.advance(ctx, r, move{
		step: StepCancel, from: StatePending, to: StateCanceling, claim: r.Claim,
		set: bson.D{{Key: fieldReason, Value: reasonOf(why)}},
	})
	if err != nil {
		return cur.txn(), fmt.Errorf("twopc: transfer %s: rolling back (%v): %w", r.ID.Hex(), why, err)
	}
	if !moved {
		return c.outcome(cur)
	}
	cur, err = c.rollback(ctx, cur)
	if err != nil {
		return cur.txn(), fmt.Errorf("twopc: transfer %s: rolling back (%v): %w", r.ID.Hex(), why, err)
	}
	return cur.txn(), fmt.Errorf("twopc: transfer %s: %w", r.ID.Hex(), why)
}

// outcome reports a transaction this call no longer drives: committed is
// success, canceled the reason's error, anything else in progress.
func (c *Coordinator) outcome(r *record) (*Txn, error) {
	switch {
	case r.State.Committed():
		return r.txn(), nil
	case r.State == StateCanceled || r.State == StateCanceling:
		return r.txn(), fmt.Errorf("twopc: transfer %s is %s: %w", r.ID.Hex(), r.State, errorOfReason(r.Reason))
	case !r.State.Valid():
		return r.txn(), fmt.Errorf("%w: transfer %s is %q", ErrUnknownState, r.ID.Hex(), r.State)
	default:
		return r.txn(), fmt.Errorf("%w: transfer %s is %s, owned by %q", ErrInProgress, r.ID.Hex(), r.State, r.Application)
	}
}

// Reverse undoes a committed transfer the way the tutorial says to: a new
// transfer of the same value from its destination back to its source. Its
// idempotency key is derived from id ("reverse:<id>", then
// "reverse:<id>:2", ...), so reversing twice moves the money back once: a
// reversal that committed or is in progress is returned, and one that was
// canceled (say the destination lacked the funds then) is followed by a new
// attempt under the next key. A key given in opts is used as it is.
func (c *Coordinator) Reverse(ctx context.Context, id bson.ObjectID, opts ...TransferOption) (*Txn, error) {
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	r, _, err := c.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.Placeholder || !r.State.Committed() {
		return r.txn(), fmt.Errorf("twopc: reverse %s: it is %s, not applied or done; cancel it instead", id.Hex(), r.State)
	}
	if tc.keyed {
		return c.reverse(ctx, r, opts)
	}
	for n := 1; n <= maxReverseAttempts; n++ {
		key := "reverse:" + id.Hex()
		if n > 1 {
			key = fmt.Sprintf("%s:%d", key, n)
		}
		prior, err := c.read(ctx, keyID(key))
		switch {
		case errors.Is(err, ErrTxnNotFound):
		case err != nil:
			return nil, fmt.Errorf("twopc: reverse %s: %w", id.Hex(), err)
		case prior.State == StateCanceled:
			continue // that attempt failed: the next key is a new attempt
		}
		return c.reverse(ctx, r, append([]TransferOption{WithKey(key)}, opts...))
	}
	return nil, fmt.Errorf("twopc: reverse %s: %d attempts were canceled", id.Hex(), maxReverseAttempts)
}

// reverse makes the transfer that undoes committed transfer r.
func (c *Coordinator) reverse(ctx context.Context, r *record, opts []TransferOption) (*Txn, error) {
	if len(r.Legs) == 0 {
		return c.Transfer(ctx, r.Destination, r.Source, r.Value, opts...)
	}
	legs := r.AllLegs()
	for i := range legs {
		legs[i].Amount = -legs[i].Amount
	}
	return c.TransferLegs(ctx, legs, opts...)
}

// sameLegs reports whether two transfers have the same legs, in order.
func sameLegs(a, b []leg) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].delta != b[i].delta || a[i].ledger != b[i].ledger || !sameID(a[i].account, b[i].account) {
			return false
		}
	}
	return true
}

// maxReverseAttempts bounds the reversals of one transfer that Reverse
// tries after earlier ones were canceled.
const maxReverseAttempts = 100

// Settle waits until every transaction this coordinator committed before
// the call is settled (or has failed to settle and been left to recovery).
func (c *Coordinator) Settle(ctx context.Context) error { return c.settler.flush(ctx) }

// Close stops background settling after settling what was committed, and
// makes later Transfers fail with ErrClosed. It does not disconnect the
// database client.
func (c *Coordinator) Close(ctx context.Context) error {
	var err error
	c.closeOnce.Do(func() { err = c.settler.close(ctx) })
	return err
}

func (r *record) txn() *Txn {
	if r == nil {
		return nil
	}
	t := r.Txn
	return &t
}

// validateTransfer checks Transfer's input before anything is written.
func validateTransfer(source, destination any, value int64) error {
	if value <= 0 {
		return fmt.Errorf("%w: value %d is not positive", ErrInvalidTransfer, value)
	}
	if err := validateAccountID("source", source); err != nil {
		return err
	}
	if err := validateAccountID("destination", destination); err != nil {
		return err
	}
	if sameID(source, destination) {
		return fmt.Errorf("%w: source and destination are the same account %v", ErrInvalidTransfer, source)
	}
	return nil
}
