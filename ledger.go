package twopc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Ledger is the participant side of two-phase commit (seed 004's
// participants, which hold the accounts, beside the coordinator, which
// keeps the log): one named accounts collection, in the coordinator's
// database, another database, or another deployment (see WithLedger), and
// the guarded writes that apply, inspect, settle, fence, undo and unfence
// legs there. It never reads or moves a transaction's state: the
// Coordinator decides, from its log, and tells each ledger what to do with
// its legs. Every write is guarded by the leg's own marker (and, for
// applying, the account's fence line), so that whoever sends it, however
// often and however late, it takes effect at most once.
type Ledger struct {
	*config
	name     string
	accounts *mongo.Collection
}

// Name returns the ledger's name; the default ledger's is "".
func (l *Ledger) Name() string { return l.name }

// OpenAccount inserts an account document in l with the given balance, in the
// shape the protocol expects: {_id, balance (int64), pendingTransactions: []}.
// If a rollback left fences under this id while the account did not exist
// (a tombstone), the account takes them over, so that no stalled leg of a
// canceled transaction can apply to it.
func (l *Ledger) OpenAccount(ctx context.Context, id any, balance int64) error {
	if err := validateAccountID("account", id); err != nil {
		return err
	}
	_, err := l.accounts.InsertOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: fieldBalance, Value: balance},
		{Key: fieldPending, Value: bson.A{}},
	})
	if mongo.IsDuplicateKeyError(err) {
		res, uerr := l.accounts.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: fieldTombstone, Value: true}}, bson.D{
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
	// account and not yet settled (each leg marker read as its
	// transaction's id: the marker with its last byte cleared).
	PendingTransactions []bson.ObjectID
}

// Account reads account id.
func (l *Ledger) Account(ctx context.Context, id any) (*Account, error) {
	if err := validateAccountID("account", id); err != nil {
		return nil, err
	}
	var a account
	err := l.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
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
	var txns []bson.ObjectID
	for _, m := range a.pending() {
		if t := txnOfMarker(m); !has(txns, t) {
			txns = append(txns, t)
		}
	}
	return &Account{ID: id, Balance: b, PendingCredit: a.credit(), PendingTransactions: txns}, nil
}

// Balance returns an account's available balance (see Account).
func (l *Ledger) Balance(ctx context.Context, id any) (int64, error) {
	a, err := l.Account(ctx, id)
	if err != nil {
		return 0, err
	}
	return a.Balance, nil
}

// own returns the legs of legs that are on l, and their indexes in legs.
func (l *Ledger) own(legs []leg) ([]leg, []int) {
	var mine []leg
	var idx []int
	for i, lg := range legs {
		if lg.ledger == l.name {
			mine = append(mine, lg)
			idx = append(idx, i)
		}
	}
	return mine, idx
}

// Field names of account documents.
const (
	fieldBalance = "balance"
	// fieldPending holds the ids of transactions whose leg is applied to the
	// account and not yet settled (the tutorial's pendingTransactions).
	fieldPending = "pendingTransactions"
	// fieldFenced holds the ids of transactions whose leg on the account is
	// closed, settled or rolled back: no leg of theirs may apply here again.
	// It is what keeps a stalled applier that resumes after its transaction
	// was settled or canceled from applying a leg a second time, the hazard
	// of the tutorial's protocol, where the guard is only pendingTransactions.
	fieldFenced = "fencedTransactions"
	// fieldPendingCredit holds the sum of the credits applied to the account
	// and not yet settled. A credit reaches balance only when its
	// transaction settles, after the commit point, so it cannot be spent
	// before then: undoing a credit never takes a balance below zero.
	fieldPendingCredit = "pendingCredit"
	// fieldPendingDebit holds the sum of the debits applied to the account
	// and not yet settled (already taken off balance): with balance and
	// pendingCredit it bounds what the balance can become when every leg
	// in flight settles or is undone, which the credit guard keeps inside
	// int64 (see creditGuard).
	fieldPendingDebit = "pendingDebit"
	// fieldFencedBefore is the account's fence line, a transaction time:
	// no leg of a transaction created at or before it applies here. Fence
	// removal moves it forward, past the transactions whose fences it
	// removes, so that a leg write delivered however late after its fence
	// is gone is still refused by the server (see unfence).
	fieldFencedBefore = "fencedBefore"
	// fieldTombstone marks a document that holds only fences, written by a
	// rollback on an account that did not exist. It is never deleted: its
	// fence line keeps refusing late legs, and OpenAccount adopts it.
	fieldTombstone = "tombstone"
)

// creditQuarter is a quarter of int64's range. A credit applies when
// nothing is in flight on the account and balance+value fits in int64, or
// when balance and pendingDebit are each at most creditQuarter and
// pendingCredit+value at most twice it: either way, whatever in-flight legs
// then settle or are undone, the balance stays within int64, so a
// committed transfer always settles.
const creditQuarter = math.MaxInt64 >> 2

// leg is one side of a transfer: the account, the signed amount, and the
// leg's marker, the value its account's pendingTransactions and
// fencedTransactions hold for it (see legMarker).
type leg struct {
	ledger  string // the ledger's name; "" is the default ledger
	account any
	delta   int64
	marker  bson.ObjectID
}

// legMarker is the marker of leg i of transaction id: the id with its last
// byte set to i. Every transaction id the library writes ends in a zero
// byte (see newTxnID and keyID), so the first leg's marker is the
// transaction's id, as in the tutorial, and no marker of one transaction
// is ever another transaction's id or marker. Markers are per leg so that
// two legs of one transfer that land on one document (ids the library took
// for two accounts and the server for one, as a collation could make them)
// never apply, settle or undo each other: each is guarded by its own.
func legMarker(id bson.ObjectID, i int) bson.ObjectID {
	id[len(id)-1] = byte(i)
	return id
}

// txnOfMarker is the transaction a marker belongs to.
func txnOfMarker(m bson.ObjectID) bson.ObjectID { return legMarker(m, 0) }

func (l leg) debit() bool { return l.delta < 0 }

// applyInc is what applying l adds: a debit comes off the balance at once
// (the funds are held), a credit waits in pendingCredit.
func (l leg) applyInc() bson.D {
	if l.debit() {
		return bson.D{{Key: fieldBalance, Value: l.delta}, {Key: fieldPendingDebit, Value: -l.delta}}
	}
	return bson.D{{Key: fieldPendingCredit, Value: l.delta}}
}

// settleInc is what settling l adds: a credit moves from pendingCredit to
// the balance; a debit is already there.
func (l leg) settleInc() bson.D {
	if l.debit() {
		return bson.D{{Key: fieldPendingDebit, Value: l.delta}}
	}
	return bson.D{{Key: fieldBalance, Value: l.delta}, {Key: fieldPendingCredit, Value: -l.delta}}
}

// undoInc is what undoing an applied l adds: the held debit back to the
// balance, the credit out of pendingCredit.
func (l leg) undoInc() bson.D {
	if l.debit() {
		return bson.D{{Key: fieldBalance, Value: -l.delta}, {Key: fieldPendingDebit, Value: l.delta}}
	}
	return bson.D{{Key: fieldPendingCredit, Value: -l.delta}}
}

// account is the part of an account document the protocol reads. Its
// fields are decoded loosely, so that an account of the wrong shape is
// judged (and refused) rather than failing the read.
type account struct {
	ID            bson.RawValue `bson:"_id"`
	Balance       bson.RawValue `bson:"balance"`
	PendingIDs    bson.RawValue `bson:"pendingTransactions"`
	FencedIDs     bson.RawValue `bson:"fencedTransactions"`
	PendingCredit bson.RawValue `bson:"pendingCredit"`
	PendingDebit  bson.RawValue `bson:"pendingDebit"`
	FencedBefore  time.Time     `bson:"fencedBefore"`
	Tombstone     bool          `bson:"tombstone"`
}

// accountProjection is what the protocol reads of an account.
var accountProjection = bson.D{
	{Key: fieldBalance, Value: 1}, {Key: fieldPending, Value: 1}, {Key: fieldFenced, Value: 1},
	{Key: fieldPendingCredit, Value: 1}, {Key: fieldPendingDebit, Value: 1},
	{Key: fieldFencedBefore, Value: 1}, {Key: fieldTombstone, Value: 1},
}

// closedTo reports whether the account's fence line refuses every leg of a
// transaction created at created.
func (a *account) closedTo(created time.Time) bool {
	return !a.FencedBefore.IsZero() && !a.FencedBefore.Before(created)
}

// objectIDs returns the ObjectIDs in an array value, ignoring the rest.
func objectIDs(v bson.RawValue) []bson.ObjectID {
	arr, ok := v.ArrayOK()
	if !ok {
		return nil
	}
	vals, _ := arr.Values()
	ids := make([]bson.ObjectID, 0, len(vals))
	for _, x := range vals {
		if oid, ok := x.ObjectIDOK(); ok {
			ids = append(ids, oid)
		}
	}
	return ids
}

func (a *account) pending() []bson.ObjectID { return objectIDs(a.PendingIDs) }
func (a *account) fenced() []bson.ObjectID  { return objectIDs(a.FencedIDs) }

// credit returns pendingCredit, 0 when absent.
func (a *account) credit() int64 {
	if n, ok := a.PendingCredit.AsInt64OK(); ok {
		return n
	}
	return 0
}

// heldDebit returns pendingDebit, 0 when absent.
func (a *account) heldDebit() int64 {
	if n, ok := a.PendingDebit.AsInt64OK(); ok {
		return n
	}
	return 0
}

// idle reports whether nothing is in flight on the account:
// pendingTransactions missing or an empty array.
func (a *account) idle() bool {
	if a.PendingIDs.Type == 0 {
		return true
	}
	arr, ok := a.PendingIDs.ArrayOK()
	if !ok {
		return false
	}
	vals, err := arr.Values()
	return err == nil && len(vals) == 0
}

// creditFits mirrors creditGuard: whether a credit of value may apply.
func (a *account) creditFits(b, value int64) bool {
	if a.idle() && b <= math.MaxInt64-value {
		return true
	}
	return value <= 2*creditQuarter && b <= creditQuarter && a.heldDebit() <= creditQuarter &&
		a.credit() <= 2*creditQuarter-value
}

// creditGuard is the filter that keeps a credit of value settleable (see
// creditQuarter).
func creditGuard(value int64) bson.E {
	alone := bson.D{
		{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldPending, Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: fieldPending, Value: bson.D{{Key: "$size", Value: 0}}}},
		}},
		{Key: fieldBalance, Value: bson.D{{Key: "$lte", Value: math.MaxInt64 - value}}},
	}
	if value > 2*creditQuarter {
		return bson.E{Key: "$or", Value: bson.A{alone}}
	}
	busy := bson.D{
		{Key: fieldBalance, Value: bson.D{{Key: "$lte", Value: int64(creditQuarter)}}},
		{Key: fieldPendingDebit, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: int64(creditQuarter)}}}}},
		{Key: fieldPendingCredit, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: 2*creditQuarter - value}}}}},
	}
	return bson.E{Key: "$or", Value: bson.A{alone, busy}}
}

// balance returns the account's balance if it is an integer.
func (a *account) balance() (int64, bool) {
	switch a.Balance.Type {
	case bson.TypeInt64:
		return a.Balance.Int64(), true
	case bson.TypeInt32:
		return int64(a.Balance.Int32()), true
	}
	return 0, false
}

func has(ids []bson.ObjectID, id bson.ObjectID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// fenceable is the condition that an account's fencedTransactions can take
// a fence (missing, or an array). Every leg write requires it, so that a
// leg that applies can always be settled or undone and fenced: a committed
// transfer always settles. An account that fails it refuses every leg, as
// one past its fence line does.
var fenceable = bson.E{Key: "$and", Value: bson.A{bson.D{{Key: "$or", Value: bson.A{
	bson.D{{Key: fieldFenced, Value: bson.D{{Key: "$exists", Value: false}}}},
	bson.D{{Key: fieldFenced, Value: bson.D{{Key: "$type", Value: "array"}}}},
}}}}}

// updateByID starts the write model of one statement whose filter names
// one document by its _id: a single-document update (multi: false), which
// makes a command of such statements a retryable write on MongoDB, and
// which every server can serve from the _id index. (An earlier version
// sent them as updates of many, to dodge a FerretDB v1 defect that the dev
// server's front now answers for: see COMMANDS.md.)
func updateByID() *mongo.UpdateOneModel { return mongo.NewUpdateOneModel() }

// applyModel is the guarded write that applies l for transaction r: it
// matches only if the leg is neither applied (pendingTransactions) nor
// closed (fencedTransactions, or a fence line at or after r's transaction
// time), the balance is an integer, and the result stays in range (for a
// debit, at or above zero unless r's recorded policy allows negative
// balances; for a credit, see creditGuard). It pushes id to
// pendingTransactions with the change (see applyInc), atomically, so it is
// safe to repeat, and refused however late it arrives once the leg is
// closed.
func applyModel(r *record, l leg) mongo.WriteModel {
	filter := bson.D{
		{Key: "_id", Value: l.account},
		{Key: fieldPending, Value: bson.D{{Key: "$ne", Value: l.marker}}},
		{Key: fieldFenced, Value: bson.D{{Key: "$ne", Value: l.marker}}},
		{Key: fieldFencedBefore, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: r.Created}}}}},
		fenceable,
	}
	integer := bson.E{Key: "$type", Value: bson.A{"int", "long"}}
	switch {
	case l.debit() && !r.AllowNegative:
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{{Key: "$gte", Value: -l.delta}, integer}})
	case l.debit():
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{{Key: "$gte", Value: math.MinInt64 - l.delta}, integer}})
	default:
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{integer}}, creditGuard(l.delta))
	}
	return updateByID().
		SetFilter(filter).
		SetUpdate(bson.D{
			{Key: "$inc", Value: l.applyInc()},
			{Key: "$push", Value: bson.D{{Key: fieldPending, Value: l.marker}}},
		})
}

// legVerdict is what an account says of one leg.
type legVerdict int

const (
	legRetry   legVerdict = iota // not applied, and nothing stops it now
	legApplied                   // applied: the id is in pendingTransactions
	legFenced                    // closed: settled or rolled back by someone else
	legBlocked                   // cannot apply: see the error
)

// judge reads account a (nil if missing) for leg l of transaction r.
func judge(a *account, r *record, l leg) (legVerdict, error) {
	switch {
	case a != nil && has(a.fenced(), l.marker): // a may be a tombstone
		return legFenced, nil
	case a != nil && has(a.pending(), l.marker):
		return legApplied, nil
	case a != nil && a.closedTo(r.Created):
		// Past the account's fence line: the transaction was finished by
		// someone else, or its time is older than transactions already
		// finished here (a slow clock, a very late insert). It cannot
		// apply; the caller's guarded move to canceling tells which.
		return legBlocked, fmt.Errorf("%w: account %v is closed to transactions created at or before %v",
			ErrTooLate, l.account, a.FencedBefore.UTC().Format(time.RFC3339Nano))
	case a == nil || a.Tombstone:
		return legBlocked, fmt.Errorf("%w: %v", ErrAccountNotFound, l.account)
	case a.FencedIDs.Type != 0 && a.FencedIDs.Type != bson.TypeArray:
		return legBlocked, fmt.Errorf("%w: account %v has fencedTransactions of BSON type %s", ErrInvalidAccount, l.account, a.FencedIDs.Type)
	}
	b, ok := a.balance()
	switch {
	case !ok:
		return legBlocked, fmt.Errorf("%w: account %v has balance of BSON type %s", ErrInvalidAccount, l.account, a.Balance.Type)
	case l.debit() && !r.AllowNegative && b < -l.delta:
		return legBlocked, fmt.Errorf("%w: account %v has %d, needs %d", ErrInsufficientFunds, l.account, b, -l.delta)
	case l.debit() && b < math.MinInt64-l.delta:
		return legBlocked, fmt.Errorf("%w: account %v has %d, debit %d", ErrBalanceOverflow, l.account, b, -l.delta)
	case !l.debit() && !a.creditFits(b, l.delta):
		return legBlocked, fmt.Errorf("%w: account %v has %d with %d in flight in and %d out, credit %d",
			ErrBalanceOverflow, l.account, b, a.credit(), a.heldDebit(), l.delta)
	}
	return legRetry, nil
}

// apply sends the guarded writes that apply legs, each of transaction
// recs[i] (see applyModel), in unordered commands of at most writeBatch
// statements, and returns how many applied, the server's reasons for the
// legs it refused, by index in legs, and how many legs it sent: a command
// is not started with less than an eighth of StaleAfter left before ctx's
// deadline (the claims' deadline; see applyRound), and the legs from it on
// are left unsent, to be sent again under renewed claims. Any other
// failure (whose outcome is unknown for the legs of that command, and
// which leaves the legs after it unsent) or a write-concern error is
// returned as err.
func (l *Ledger) apply(ctx context.Context, recs []*record, legs []leg) (int64, map[int]string, int, error) {
	var modified int64
	refused := map[int]string{}
	for start := 0; start < len(legs); start += l.writeBatch {
		if d, ok := ctx.Deadline(); ok && start > 0 && time.Until(d) < l.staleAfter/8 {
			return modified, refused, start, nil
		}
		end := min(start+l.writeBatch, len(legs))
		models := make([]mongo.WriteModel, 0, end-start)
		for i := start; i < end; i++ {
			models = append(models, applyModel(recs[i], legs[i]))
		}
		res, err := l.accounts.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		if res != nil {
			modified += res.ModifiedCount
		}
		var bwe mongo.BulkWriteException
		if err != nil && errors.As(err, &bwe) && bwe.WriteConcernError == nil {
			// Refused by the server, each for its own reason, at the
			// index of its statement, as MongoDB reports write errors (the
			// dev server's front makes FerretDB's replies so). The
			// accounts are read whatever it says: a wrong index could
			// only call a leg refused that the read finds nothing wrong
			// with, which then fails its transfer with ErrInvalidAccount
			// rather than apply twice.
			for _, we := range bwe.WriteErrors {
				if we.Index >= 0 && we.Index < len(models) {
					refused[start+we.Index] = we.Message
				}
			}
			continue
		}
		if err != nil {
			return modified, refused, len(legs), err
		}
	}
	return modified, refused, len(legs), nil
}

// closeLegs closes the legs of committed transactions recs: it pulls each
// leg's marker from pendingTransactions while fencing it and moving a
// credit from pendingCredit to the balance (a debit's hold from
// pendingDebit), guarded by the marker, so it happens once. It returns the
// indexes in recs of the transactions a leg of which may not have closed.
func (l *Ledger) closeLegs(ctx context.Context, recs []*record) (map[int]bool, error) {
	var models []mongo.WriteModel
	var owner []int // owner[i] is the index in recs of models[i]
	for i, r := range recs {
		mine, _ := l.own(r.legs())
		for _, lg := range mine {
			update := bson.D{
				{Key: "$pull", Value: bson.D{{Key: fieldPending, Value: lg.marker}}},
				{Key: "$addToSet", Value: bson.D{{Key: fieldFenced, Value: lg.marker}}},
			}
			if inc := lg.settleInc(); inc != nil {
				update = append(update, bson.E{Key: "$inc", Value: inc})
			}
			models = append(models, updateByID().
				SetFilter(bson.D{{Key: "_id", Value: lg.account}, {Key: fieldPending, Value: lg.marker}}).
				SetUpdate(update))
			owner = append(owner, i)
		}
	}
	return l.failedOwners(ctx, models, owner)
}

// unfenceLegs removes the fences of final transactions recs from their
// accounts and moves each account's fence line up to the transaction's
// time, in one update per leg. It returns the indexes in recs of the
// transactions a leg of which may not have been unfenced.
func (l *Ledger) unfenceLegs(ctx context.Context, recs []*record) (map[int]bool, error) {
	var models []mongo.WriteModel
	var owner []int
	for i, r := range recs {
		mine, _ := l.own(r.legs())
		for _, lg := range mine {
			models = append(models, updateByID().
				SetFilter(bson.D{{Key: "_id", Value: lg.account}}).
				SetUpdate(bson.D{
					{Key: "$pull", Value: bson.D{{Key: fieldFenced, Value: lg.marker}}},
					{Key: "$max", Value: bson.D{{Key: fieldFencedBefore, Value: r.Created}}},
				}))
			owner = append(owner, i)
		}
	}
	return l.failedOwners(ctx, models, owner)
}

// failedOwners writes models and maps the ones that may not have applied
// to their owners.
func (l *Ledger) failedOwners(ctx context.Context, models []mongo.WriteModel, owner []int) (map[int]bool, error) {
	failedModels, err := l.write(ctx, models)
	failed := map[int]bool{}
	for i := range failedModels {
		failed[owner[i]] = true
	}
	return failed, err
}

// inspect reads the accounts of legs, in order; nil for a missing one.
func (l *Ledger) inspect(ctx context.Context, legs []leg) ([]*account, error) {
	ids := make(bson.A, len(legs))
	for i, lg := range legs {
		ids[i] = lg.account
	}
	var found []account
	err := l.retry(ctx, func(ctx context.Context) error {
		cur, err := l.accounts.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(accountProjection))
		if err != nil {
			return err
		}
		found = found[:0]
		return cur.All(ctx, &found)
	})
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]*account, len(found))
	for j := range found {
		byKey[canonicalID(found[j].ID)] = &found[j]
	}
	out := make([]*account, len(legs))
	for i, lg := range legs {
		key, _ := idKey(lg.account)
		out[i] = byKey[key]
	}
	return out, nil
}

// fenceAndUndo closes legs, the legs on l of canceling transaction r: first
// it fences their accounts, so no leg of it can apply there from now on, whoever sends
// it; then it undoes the legs that were applied (guarded by the id still
// being in pendingTransactions, so an undo happens once). Fencing first is
// what makes the undo final: an apply that raced ahead of the fence is seen
// and undone, one that comes after it matches nothing.
func (l *Ledger) fenceAndUndo(ctx context.Context, r *record, legs []leg) error {
	fences := make([]mongo.WriteModel, len(legs))
	undos := make([]mongo.WriteModel, len(legs))
	for i, lg := range legs {
		// An upsert: if the account does not exist yet, the fence is a
		// tombstone that OpenAccount adopts, so that an account opened
		// later cannot take a stalled applier's leg. The fence is only
		// added below the account's fence line, on an account that can
		// take one: otherwise the account already refuses every leg of r
		// (see applyModel), and a fence added past the line (a rollback
		// delivered after the fences were removed) would never be removed.
		fences[i] = updateByID().
			SetFilter(bson.D{
				{Key: "_id", Value: lg.account},
				{Key: fieldFencedBefore, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: r.Created}}}}},
				fenceable,
			}).
			SetUpdate(bson.D{
				{Key: "$addToSet", Value: bson.D{{Key: fieldFenced, Value: lg.marker}}},
				{Key: "$setOnInsert", Value: bson.D{{Key: fieldTombstone, Value: true}}},
			}).
			SetUpsert(true)
		undos[i] = updateByID().
			SetFilter(bson.D{{Key: "_id", Value: lg.account}, {Key: fieldPending, Value: lg.marker}}).
			SetUpdate(bson.D{
				{Key: "$inc", Value: lg.undoInc()},
				{Key: "$pull", Value: bson.D{{Key: fieldPending, Value: lg.marker}}},
			})
	}
	if err := l.fence(ctx, r, fences); err != nil {
		return err
	}
	return l.try(ctx, StepUndo, r, func(ctx context.Context) error {
		_, err := l.accounts.BulkWrite(ctx, undos, options.BulkWrite().SetOrdered(false))
		return err
	})
}

// fence sends r's fence upserts. An upsert that finds the account past its
// fence line (or unable to take a fence) fails on the _id's uniqueness: the
// account is closed to r already, which is what the fence is for. Since a write error may hide
// the statements after it (FerretDB v1 stops a command at its first), a
// command with write errors is sent again a statement at a time, and a
// duplicate key is tried once more (two rollbacks may race to insert one
// tombstone) before it is taken as the fence line's answer.
func (l *Ledger) fence(ctx context.Context, r *record, models []mongo.WriteModel) error {
	send := func(models []mongo.WriteModel) error {
		return l.try(ctx, StepFence, r, func(ctx context.Context) error {
			_, err := l.accounts.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
			return err
		})
	}
	err := send(models)
	var bwe mongo.BulkWriteException
	if err == nil || !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return err
	}
	for _, m := range models {
		err := send([]mongo.WriteModel{m})
		if mongo.IsDuplicateKeyError(err) {
			err = send([]mongo.WriteModel{m})
		}
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return err
		}
	}
	return nil
}

// write sends models, idempotent updates of accounts, as unordered
// bulk writes of at most writeBatch statements each, every one retried on
// its own. It returns the indexes of the models that may not have been
// applied and the first error.
//
// A command that fails with write errors is sent again one statement at a
// time, and only the statements that fail then are returned: sending an
// applied statement again changes nothing, and what each statement's own
// answer says is then beyond doubt. Any other failure returns that
// command's statements and all after it, unsent, for the next pass.
func (l *Ledger) write(ctx context.Context, models []mongo.WriteModel) (map[int]bool, error) {
	failed := map[int]bool{}
	var firstErr error
	send := func(start, end int) error {
		return l.retry(ctx, func(ctx context.Context) error {
			_, err := l.accounts.BulkWrite(ctx, models[start:end], options.BulkWrite().SetOrdered(false))
			return err
		})
	}
	for start := 0; start < len(models); start += l.writeBatch {
		end := min(start+l.writeBatch, len(models))
		err := send(start, end)
		var bwe mongo.BulkWriteException
		switch {
		case err == nil:
			continue
		case errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 && bwe.WriteConcernError == nil:
			if end-start == 1 {
				failed[start] = true
				firstErr = cmpErr(firstErr, err)
				continue
			}
			for i := start; i < end; i++ {
				if err := send(i, i+1); err != nil {
					failed[i] = true
					firstErr = cmpErr(firstErr, err)
				}
			}
			continue
		}
		// The server did not answer, or refused the command: this
		// chunk and the rest wait for the next pass.
		for i := start; i < len(models); i++ {
			failed[i] = true
		}
		return failed, err
	}
	return failed, firstErr
}
