package twopc

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
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
}

// Coordinator drives transfers between account documents through the
// two-phase commit protocol: it inserts each transaction claimed and
// pending, applies both legs, moves it to applied (the commit point), and
// settles it to done. It is safe for concurrent use. Close it to let
// background settling finish.
type Coordinator struct {
	config
	db       *mongo.Database
	accounts *mongo.Collection
	txns     *mongo.Collection
	settler  *settler
	commits  *committer

	closeOnce sync.Once
}

// NewCoordinator returns a coordinator for the accounts and transactions
// collections of db. The write concern of db (or of the client behind it)
// is the durability of every step: use majority on a replica set.
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
	c := &Coordinator{
		config:   cfg,
		db:       db,
		accounts: db.Collection(cfg.accounts),
		txns:     db.Collection(cfg.transactions),
	}
	c.settler = newSettler(c)
	c.commits = &committer{c: c}
	return c, nil
}

// Application returns the owner name this coordinator claims transactions
// under.
func (c *Coordinator) Application() string { return c.application }

// EnsureIndexes creates the indexes the protocol's scans use, idempotently:
// {state, lastModified} for recovery and a sparse {fences, lastModified}
// for fence removal. No index is needed for correctness: accounts and
// transactions are read and written by _id, and idempotency keys are
// enforced by the _id derived from them.
func (c *Coordinator) EnsureIndexes(ctx context.Context) error {
	_, err := c.txns.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: fieldState, Value: 1}, {Key: fieldLastModified, Value: 1}}},
		{Keys: bson.D{{Key: fieldFences, Value: 1}, {Key: fieldLastModified, Value: 1}}, Options: options.Index().SetSparse(true)},
	})
	if err != nil {
		return fmt.Errorf("twopc: ensure indexes: %w", err)
	}
	return nil
}

// OpenAccount inserts an account document with the given balance, in the
// shape the protocol expects: {_id, balance (int64), pendingTransactions: []}.
// If a rollback left fences under this id while the account did not exist
// (a tombstone), the account takes them over, so that no stalled leg of a
// canceled transaction can apply to it.
func (c *Coordinator) OpenAccount(ctx context.Context, id any, balance int64) error {
	if err := validateAccountID("account", id); err != nil {
		return err
	}
	_, err := c.accounts.InsertOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: fieldBalance, Value: balance},
		{Key: fieldPending, Value: bson.A{}},
	})
	if mongo.IsDuplicateKeyError(err) {
		res, uerr := c.accounts.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: fieldTombstone, Value: true}}, bson.D{
			{Key: "$set", Value: bson.D{{Key: fieldBalance, Value: balance}, {Key: fieldPending, Value: bson.A{}}}},
			{Key: "$unset", Value: bson.D{{Key: fieldTombstone, Value: ""}}},
		})
		if uerr == nil && res.ModifiedCount == 1 {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("twopc: open account %v: %w", id, err)
	}
	return nil
}

// Account is an account document as the protocol sees it.
type Account struct {
	ID any
	// Balance is the available balance: it includes the debits of pending
	// transfers (the funds are held) and only the credits that are settled.
	Balance int64
	// PendingCredit is the sum of the credits applied to the account and
	// not yet settled: money on its way in, spendable once settled.
	PendingCredit int64
	// PendingTransactions lists the transactions with a leg applied to the
	// account and not yet settled.
	PendingTransactions []bson.ObjectID
}

// Account reads account id.
func (c *Coordinator) Account(ctx context.Context, id any) (*Account, error) {
	if err := validateAccountID("account", id); err != nil {
		return nil, err
	}
	var a account
	err := c.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: fieldBalance, Value: 1}, {Key: fieldPendingCredit, Value: 1}, {Key: fieldPending, Value: 1}, {Key: fieldTombstone, Value: 1}})).Decode(&a)
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && a.Tombstone) {
		return nil, fmt.Errorf("%w: %v", ErrAccountNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("twopc: account %v: %w", id, err)
	}
	b, ok := a.balance()
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrInvalidAccount, id)
	}
	return &Account{ID: id, Balance: b, PendingCredit: a.credit(), PendingTransactions: a.pending()}, nil
}

// Balance returns an account's available balance (see Account).
func (c *Coordinator) Balance(ctx context.Context, id any) (int64, error) {
	a, err := c.Account(ctx, id)
	if err != nil {
		return 0, err
	}
	return a.Balance, nil
}

// Get returns transaction id as it now stands.
func (c *Coordinator) Get(ctx context.Context, id bson.ObjectID) (*Txn, error) {
	r, err := c.read(ctx, id)
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
// money moved. With WithKey, Transfer can be repeated safely after any
// error.
func (c *Coordinator) Transfer(ctx context.Context, source, destination any, value int64, opts ...TransferOption) (*Txn, error) {
	if err := validateTransfer(source, destination, value); err != nil {
		return nil, err
	}
	var tc transferConfig
	for _, o := range opts {
		if o != nil {
			o(&tc)
		}
	}
	if c.settler.isClosed() {
		return nil, ErrClosed
	}
	id := bson.NewObjectID()
	if tc.key != "" {
		id = keyID(tc.key)
	}
	r := &record{
		Txn: Txn{
			ID:          id,
			Source:      source,
			Destination: destination,
			Value:       value,
			State:       StatePending,
			Application: c.application,
			Key:         tc.key,
		},
		Claim: bson.NewObjectID(),
	}
	o := &owned{claimedAt: c.now()}
	cur, err := c.insert(ctx, r)
	if err != nil {
		// The insert may have happened: the caller gets the id to look
		// for (Get, Cancel), or repeats the call with its key.
		return r.txn(), fmt.Errorf("twopc: transfer %s: %w", r.ID.Hex(), err)
	}
	if cur.Claim != r.Claim {
		return c.replay(cur, r)
	}
	if cur.State != StatePending {
		return c.outcome(cur)
	}
	o.rec = cur
	return c.drive(ctx, o, c.syncSettle)
}

// insert writes the new transaction, claimed and pending, with lastModified
// from the server's clock, in one upsert keyed by its _id: a retry after a
// lost reply finds it rather than inserting a second one. If the _id is an
// earlier transfer's (same key), insert returns that transaction; the
// caller compares claims to tell.
func (c *Coordinator) insert(ctx context.Context, r *record) (*record, error) {
	doc := bson.D{
		{Key: "source", Value: r.Source},
		{Key: "destination", Value: r.Destination},
		{Key: "value", Value: r.Value},
		{Key: fieldState, Value: r.State},
		{Key: fieldApplication, Value: r.Application},
		{Key: fieldLease, Value: c.staleAfter.Milliseconds()},
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
	filter := bson.D{{Key: "_id", Value: r.ID}}
	if r.Key != "" {
		filter = append(filter, bson.E{Key: fieldClaim, Value: r.Claim}) // the claim comes from the filter's equality
	} else {
		doc = append(doc, bson.E{Key: fieldClaim, Value: r.Claim})
	}
	update := bson.D{
		{Key: "$setOnInsert", Value: doc},
		{Key: "$currentDate", Value: bson.D{{Key: fieldLastModified, Value: true}}},
	}
	var cur record
	err := c.try(ctx, StepInsert, r, func(ctx context.Context) error {
		return c.txns.FindOneAndUpdate(ctx, filter, update,
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&cur)
	})
	if mongo.IsDuplicateKeyError(err) {
		prior, err := c.read(ctx, r.ID)
		if prior == nil {
			return nil, err
		}
		return prior, nil
	}
	if err != nil {
		return nil, err
	}
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
	copy(id[:], sum[:])
	return id
}

// replay answers a Transfer whose key an earlier transfer holds.
func (c *Coordinator) replay(prior, asked *record) (*Txn, error) {
	if prior.Key != asked.Key || !sameID(prior.Source, asked.Source) || !sameID(prior.Destination, asked.Destination) || prior.Value != asked.Value {
		return prior.txn(), fmt.Errorf("%w: key %q is transaction %s (%v → %v, %d)",
			ErrKeyConflict, asked.Key, prior.ID.Hex(), prior.Source, prior.Destination, prior.Value)
	}
	return c.outcome(prior)
}

// owned is a transaction this process holds the claim of, and when it sent
// the write that took the claim, by its own monotonic clock.
type owned struct {
	rec       *record
	claimedAt time.Time
}

// drive takes an owned pending transaction to its commit point, or rolls it
// back when a leg cannot apply; then settles it now (sync) or in the
// background.
func (c *Coordinator) drive(ctx context.Context, o *owned, sync bool) (*Txn, error) {
	why, err := c.applyLegs(ctx, o)
	if errors.Is(err, errLost) {
		cur, rerr := c.read(ctx, o.rec.ID)
		if rerr != nil {
			return o.rec.txn(), rerr
		}
		return c.outcome(cur)
	}
	if err != nil {
		return o.rec.txn(), fmt.Errorf("twopc: transfer %s: %w", o.rec.ID.Hex(), err)
	}
	if why != nil {
		return c.abort(ctx, o.rec, why)
	}
	cur, moved, err := c.commits.commit(ctx, o.rec) // alone, or grouped with concurrent commits
	if err != nil {
		return cur.txn(), fmt.Errorf("twopc: transfer %s: %w", o.rec.ID.Hex(), err)
	}
	if !moved {
		return c.outcome(cur)
	}
	if !sync {
		if c.settler.enqueue(cur) {
			return cur.txn(), nil
		}
	}
	done, err := c.settle(ctx, []*record{cur})
	if err != nil {
		return cur.txn(), fmt.Errorf("twopc: transfer %s committed; settling: %w", cur.ID.Hex(), err)
	}
	if len(done) == 1 {
		cur = done[0]
	}
	return cur.txn(), nil
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
// transfer of the same value from its destination back to its source. It
// uses the key "reverse:<id>" unless opts give one, so reversing twice moves
// the money back once.
func (c *Coordinator) Reverse(ctx context.Context, id bson.ObjectID, opts ...TransferOption) (*Txn, error) {
	r, err := c.read(ctx, id)
	if err != nil {
		return nil, err
	}
	if !r.State.Committed() {
		return r.txn(), fmt.Errorf("twopc: reverse %s: it is %s, not applied or done; cancel it instead", id.Hex(), r.State)
	}
	all := append([]TransferOption{WithKey("reverse:" + id.Hex())}, opts...)
	return c.Transfer(ctx, r.Destination, r.Source, r.Value, all...)
}

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

// validateAccountID checks that id can be a document _id.
func validateAccountID(which string, id any) error {
	if id == nil {
		return fmt.Errorf("%w: %s id is nil", ErrInvalidTransfer, which)
	}
	t, data, err := bson.MarshalValue(id)
	if err != nil {
		return fmt.Errorf("%w: %s id %v (%T) cannot be an _id: %v", ErrInvalidTransfer, which, id, id, err)
	}
	switch t {
	case bson.TypeArray, bson.TypeUndefined, bson.TypeNull, bson.TypeRegex, bson.TypeJavaScript,
		bson.TypeCodeWithScope, bson.TypeMinKey, bson.TypeMaxKey, bson.TypeDBPointer:
		return fmt.Errorf("%w: %s id of BSON type %s cannot be an _id", ErrInvalidTransfer, which, t)
	case bson.TypeString:
		if s, ok := (bson.RawValue{Type: t, Value: data}).StringValueOK(); ok && s == "" {
			return fmt.Errorf("%w: %s id is the empty string", ErrInvalidTransfer, which)
		}
		if !validUTF8(bson.RawValue{Type: t, Value: data}) {
			return fmt.Errorf("%w: %s id is not valid UTF-8", ErrInvalidTransfer, which)
		}
	case bson.TypeDouble:
		if f := (bson.RawValue{Type: t, Value: data}).Double(); math.IsNaN(f) {
			return fmt.Errorf("%w: %s id is NaN", ErrInvalidTransfer, which)
		}
	case bson.TypeEmbeddedDocument:
		// {_id: {$gt: ""}} in a filter is a query, not an id: it would match
		// other accounts. Keys with dots or nothing in them are refused by
		// some servers, so they are refused here, before anything is written.
		if err := checkKeys(bson.Raw(data)); err != nil {
			return fmt.Errorf("%w: %s id: %v", ErrInvalidTransfer, which, err)
		}
		if !validUTF8(bson.RawValue{Type: t, Value: data}) {
			return fmt.Errorf("%w: %s id is not valid UTF-8", ErrInvalidTransfer, which)
		}
	}
	return nil
}

// checkKeys refuses document keys that are empty, start with $ or hold a
// dot, at any depth.
func checkKeys(doc bson.Raw) error {
	elems, err := doc.Elements()
	if err != nil {
		return err
	}
	for _, e := range elems {
		switch k := e.Key(); {
		case k == "", strings.HasPrefix(k, "$"), strings.Contains(k, "."):
			return fmt.Errorf("field name %q", k)
		}
		if v := e.Value(); v.Type == bson.TypeEmbeddedDocument {
			if err := checkKeys(v.Document()); err != nil {
				return err
			}
		}
	}
	return nil
}

// validUTF8 reports whether every string in v, and every key of its
// documents, is valid UTF-8, as BSON requires and servers may not check.
func validUTF8(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeString:
		s, ok := v.StringValueOK()
		return ok && utf8.ValidString(s)
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		elems, err := bson.Raw(v.Value).Elements()
		if err != nil {
			return false
		}
		for _, e := range elems {
			if !utf8.ValidString(e.Key()) || !validUTF8(e.Value()) {
				return false
			}
		}
	}
	return true
}

// sameID reports whether two ids name the same document: equal BSON
// values, numbers compared by value as the server compares _id.
func sameID(a, b any) bool {
	ta, da, errA := bson.MarshalValue(a)
	tb, db, errB := bson.MarshalValue(b)
	if errA != nil || errB != nil {
		return false
	}
	ra, rb := bson.RawValue{Type: ta, Value: da}, bson.RawValue{Type: tb, Value: db}
	if same, numeric := sameNumber(ra, rb); numeric {
		return same
	}
	return ta == tb && string(da) == string(db)
}

// sameNumber compares two BSON numbers by value; numeric is false unless
// both are numbers.
func sameNumber(a, b bson.RawValue) (same, numeric bool) {
	ia, fa, intA, okA := number(a)
	ib, fb, intB, okB := number(b)
	switch {
	case !okA || !okB:
		return false, false
	case intA && intB:
		return ia == ib, true
	case !intA && !intB:
		return fa == fb, true
	case intA:
		return float64(ia) == fb && fb >= -(1<<63) && fb < 1<<63 && int64(fb) == ia, true
	default:
		return float64(ib) == fa && fa >= -(1<<63) && fa < 1<<63 && int64(fa) == ib, true
	}
}

func number(v bson.RawValue) (i int64, f float64, isInt, ok bool) {
	switch v.Type {
	case bson.TypeInt32:
		return int64(v.Int32()), 0, true, true
	case bson.TypeInt64:
		return v.Int64(), 0, true, true
	case bson.TypeDouble:
		return 0, v.Double(), false, true
	}
	return 0, 0, false, false
}
