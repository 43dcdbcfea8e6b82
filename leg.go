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

// maxApplyRounds bounds the apply-inspect rounds of one drive: a round
// repeats only when an account changed between the write and the read.
const maxApplyRounds = 4

// errLost reports that this process no longer owns the transaction: it was
// taken over, canceled or settled by someone else.
var errLost = errors.New("twopc: claim lost")

// leg is one side of a transfer: the account, the signed amount, and the
// leg's marker, the value its account's pendingTransactions and
// fencedTransactions hold for it (see legMarker).
type leg struct {
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

func (r *record) legs() []leg {
	all := r.AllLegs()
	out := make([]leg, len(all))
	for i, l := range all {
		out[i] = leg{account: l.Account, delta: l.Amount, marker: legMarker(r.ID, i)}
	}
	return out
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
	return mongo.NewUpdateOneModel().
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

// applyLegs applies the legs of an owned pending transaction that are not
// applied yet, in one bulk write for both. When not every leg reports
// applied, it reads both accounts to learn what actually happened rather
// than assume: a leg already applied (an earlier attempt, or a recoverer),
// a leg that cannot apply (returned as why, with the reason's error), or a
// fence (errLost: someone else settled or rolled back the transaction).
func (c *Coordinator) applyLegs(ctx context.Context, o *owned) (why error, err error) {
	id := o.rec.ID
	todo := o.rec.legs()
	for round := 0; round < maxApplyRounds; round++ {
		models := make([]mongo.WriteModel, len(todo))
		for i, l := range todo {
			models[i] = applyModel(o.rec, l)
		}
		var modified int64
		err := c.try(ctx, StepApply, o.rec, func(ctx context.Context) error {
			// The claim check sits right before every attempt, and the
			// write carries a deadline at which the claim could start to
			// look stale: the driver will not send it later, and passes
			// the rest as maxTimeMS so that the server gives up too.
			if err := c.renew(ctx, o); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, o.claimedAt.Add(c.staleAfter/2).Sub(c.now()))
			defer cancel()
			res, err := c.accounts.BulkWrite(wctx, models, options.BulkWrite().SetOrdered(false))
			if res != nil {
				modified = res.ModifiedCount
			}
			return err
		})
		var bwe mongo.BulkWriteException
		switch {
		case err == nil && modified == int64(len(todo)):
			return nil, nil
		case err != nil && !errors.As(err, &bwe):
			return nil, err
		case bwe.WriteConcernError != nil:
			// Applied on the primary perhaps, but not durably: do not
			// judge by reading the primary. Recovery will apply again.
			return nil, err
		}
		// The server's reason, by leg index. FerretDB v1 reports every
		// write error at index 0 and skips the legs after it; the accounts
		// are read below whatever it says, and a leg it skipped is tried
		// again in the next round, alone, where index 0 is right.
		refused := map[int]string{}
		for _, we := range bwe.WriteErrors {
			refused[we.Index] = we.Message
		}
		accts, err := c.inspect(ctx, o.rec, todo)
		if err != nil {
			return nil, err
		}
		var next []leg
		for i, l := range todo {
			verdict, why := judge(accts[i], o.rec, l)
			if msg, ok := refused[i]; ok && verdict == legRetry {
				// The server refused the write for a reason the
				// account's fields do not show: a schema validator, a
				// pendingTransactions that is not an array, a document
				// grown too large. It will refuse it again.
				verdict, why = legBlocked, fmt.Errorf("%w: account %v: the server refused the leg: %s", ErrInvalidAccount, l.account, msg)
			}
			switch verdict {
			case legFenced:
				return nil, errLost
			case legBlocked:
				return why, nil
			case legRetry:
				next = append(next, l)
			}
		}
		if len(next) == 0 {
			return nil, nil
		}
		todo = next
	}
	return nil, fmt.Errorf("legs of %s did not apply in %d rounds: the accounts keep changing", id.Hex(), maxApplyRounds)
}

// inspect reads the accounts of legs, in order; nil for a missing one.
func (c *Coordinator) inspect(ctx context.Context, r *record, legs []leg) ([]*account, error) {
	ids := make(bson.A, len(legs))
	for i, l := range legs {
		ids[i] = l.account
	}
	var found []account
	err := c.try(ctx, StepInspect, r, func(ctx context.Context) error {
		cur, err := c.accounts.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
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
	out := make([]*account, len(legs))
	for i, l := range legs {
		key, _ := idKey(l.account)
		for j := range found {
			if canonicalID(found[j].ID) == key {
				out[i] = &found[j]
			}
		}
	}
	return out, nil
}

// renew refreshes the owner's claim when a quarter of StaleAfter has
// passed since it was taken (by this process's monotonic clock, from when
// the claiming write was sent, so never later than the server's view). A
// leg write, sent with a deadline of half of StaleAfter after the claim, is
// therefore never sent on a claim another application may already have
// taken over. errLost if the claim is gone.
func (c *Coordinator) renew(ctx context.Context, o *owned) error {
	if c.now().Sub(o.claimedAt) < c.staleAfter/4 {
		return nil
	}
	sent := c.now()
	cur, moved, err := c.advance(ctx, o.rec, move{step: StepRenew, from: StatePending, to: StatePending, claim: o.rec.Claim})
	if err != nil {
		return err
	}
	if !moved {
		return errLost
	}
	o.rec, o.claimedAt = cur, sent
	return nil
}

// settle closes the legs of committed transactions on their accounts (pull
// the id from pendingTransactions and fence it, and move a credit from
// pendingCredit to the balance; bulk writes of up to writeBatch legs) and
// then moves those whose legs all closed to done (one write for the
// batch). Both writes are guarded and idempotent, so anyone may settle an
// applied transaction, any number of times. It returns the transactions it
// moved to done.
func (c *Coordinator) settle(ctx context.Context, recs []*record) ([]*record, error) {
	var batch []*record
	var firstErr error
	for _, r := range recs {
		if err := c.at(ctx, StepSettle, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			continue
		}
		batch = append(batch, r)
	}
	if len(batch) == 0 {
		return nil, firstErr
	}
	var models []mongo.WriteModel
	var owner []int // owner[i] is the batch index of models[i]
	for i, r := range batch {
		for _, l := range r.legs() {
			update := bson.D{
				{Key: "$pull", Value: bson.D{{Key: fieldPending, Value: l.marker}}},
				{Key: "$addToSet", Value: bson.D{{Key: fieldFenced, Value: l.marker}}},
			}
			if inc := l.settleInc(); inc != nil {
				update = append(update, bson.E{Key: "$inc", Value: inc})
			}
			models = append(models, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: l.account}, {Key: fieldPending, Value: l.marker}}).
				SetUpdate(update))
			owner = append(owner, i)
		}
	}
	failedModels, err := c.writeAccounts(ctx, models)
	firstErr = cmpErr(firstErr, err)
	failed := map[int]bool{}
	for i := range failedModels {
		failed[owner[i]] = true
	}
	var ready []*record
	for i, r := range batch {
		if failed[i] {
			continue
		}
		if err := c.at(ctx, StepDone, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			continue
		}
		ready = append(ready, r)
	}
	done, err := c.finish(ctx, ready, move{step: StepDone, from: StateApplied, to: StateDone, anyClaim: true})
	return done, cmpErr(firstErr, err)
}

// finish moves recs, whose step hooks were already called, with the
// claim-free move m: one guarded update for all of them, or one
// find-and-modify for a single transaction so that its caller gets the
// stored document back.
func (c *Coordinator) finish(ctx context.Context, recs []*record, m move) ([]*record, error) {
	m.set = append(m.set, bson.E{Key: fieldFences, Value: true})
	m.retain = c.fenceRetention
	switch len(recs) {
	case 0:
		return nil, nil
	case 1:
		var cur record
		err := c.retry(ctx, func(ctx context.Context) error {
			return c.txns.FindOneAndUpdate(ctx, m.filter(recs[0].ID), m.update(),
				options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&cur)
		})
		if errors.Is(err, mongo.ErrNoDocuments) {
			// Finished already: by someone else, or by an attempt whose
			// reply was lost. Re-read to say which state it is in.
			now, err := c.read(ctx, recs[0].ID)
			if err != nil || now.State != m.to {
				return nil, err
			}
			return []*record{now}, nil
		}
		if err != nil {
			return nil, err
		}
		return []*record{&cur}, nil
	}
	ids := make(bson.A, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	filter := m.filter(bson.ObjectID{})
	filter[0].Value = bson.D{{Key: "$in", Value: ids}}
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.txns.UpdateMany(ctx, filter, m.update())
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]*record, len(recs))
	for i, r := range recs {
		cp := *r
		cp.State = m.to
		out[i] = &cp
	}
	return out, nil
}

// fenceAndUndo closes the legs of a canceling transaction: first it fences
// both accounts, so no leg of it can apply there from now on, whoever sends
// it; then it undoes the legs that were applied (guarded by the id still
// being in pendingTransactions, so an undo happens once). Fencing first is
// what makes the undo final: an apply that raced ahead of the fence is seen
// and undone, one that comes after it matches nothing.
func (c *Coordinator) fenceAndUndo(ctx context.Context, r *record) error {
	legs := r.legs()
	fences := make([]mongo.WriteModel, len(legs))
	undos := make([]mongo.WriteModel, len(legs))
	for i, l := range legs {
		// An upsert: if the account does not exist yet, the fence is a
		// tombstone that OpenAccount adopts, so that an account opened
		// later cannot take a stalled applier's leg. The fence is only
		// added below the account's fence line, on an account that can
		// take one: otherwise the account already refuses every leg of r
		// (see applyModel), and a fence added past the line (a rollback
		// delivered after the fences were removed) would never be removed.
		fences[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{
				{Key: "_id", Value: l.account},
				{Key: fieldFencedBefore, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: r.Created}}}}},
				fenceable,
			}).
			SetUpdate(bson.D{
				{Key: "$addToSet", Value: bson.D{{Key: fieldFenced, Value: l.marker}}},
				{Key: "$setOnInsert", Value: bson.D{{Key: fieldTombstone, Value: true}}},
			}).
			SetUpsert(true)
		undos[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: l.account}, {Key: fieldPending, Value: l.marker}}).
			SetUpdate(bson.D{
				{Key: "$inc", Value: l.undoInc()},
				{Key: "$pull", Value: bson.D{{Key: fieldPending, Value: l.marker}}},
			})
	}
	if err := c.fence(ctx, r, fences); err != nil {
		return err
	}
	return c.try(ctx, StepUndo, r, func(ctx context.Context) error {
		_, err := c.accounts.BulkWrite(ctx, undos, options.BulkWrite().SetOrdered(false))
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
func (c *Coordinator) fence(ctx context.Context, r *record, models []mongo.WriteModel) error {
	send := func(models []mongo.WriteModel) error {
		return c.try(ctx, StepFence, r, func(ctx context.Context) error {
			_, err := c.accounts.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
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

// unfence removes the fences of final transactions from their accounts and
// moves each account's fence line forward past them, in one atomic update
// per account, and then clears the transactions' fences flag. The fence
// line then refuses their legs however late they arrive, so removing a
// fence never depends on time.
//
// A fence line is moved past a transaction only if no transaction still
// unfinished (initial, pending, canceling) that touches the same account
// was created at or before it: the line would refuse that transaction's
// remaining legs (which is safe, it rolls back, but needless). Time and
// retention only decide when fences go, never whether a leg applies.
func (c *Coordinator) unfence(ctx context.Context, recs []*record) (int, error) {
	var firstErr error
	var due []*record
	for _, r := range recs {
		if r.foreign() || r.Placeholder {
			continue
		}
		if err := c.at(ctx, StepUnfence, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			continue
		}
		due = append(due, r)
	}
	if len(due) == 0 {
		return 0, firstErr
	}
	open, err := c.openBefore(ctx, due)
	if err != nil {
		return 0, cmpErr(firstErr, err)
	}
	var models []mongo.WriteModel
	var owner []int
	var ready []*record
	for _, r := range due {
		if !open.clear(r) {
			continue // an older unfinished transaction shares an account
		}
		for _, l := range r.legs() {
			models = append(models, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: l.account}}).
				SetUpdate(bson.D{
					{Key: "$pull", Value: bson.D{{Key: fieldFenced, Value: l.marker}}},
					{Key: "$max", Value: bson.D{{Key: fieldFencedBefore, Value: r.Created}}},
				}))
			owner = append(owner, len(ready))
		}
		ready = append(ready, r)
	}
	failedModels, err := c.writeAccounts(ctx, models)
	firstErr = cmpErr(firstErr, err)
	failed := map[int]bool{}
	for i := range failedModels {
		failed[owner[i]] = true
	}
	var ids bson.A
	for i, r := range ready {
		if !failed[i] {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return 0, firstErr
	}
	var n int64
	err = c.retry(ctx, func(ctx context.Context) error {
		res, err := c.txns.UpdateMany(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: fieldFences, Value: true}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: fieldFences, Value: ""}}}})
		if res != nil {
			n = res.ModifiedCount
		}
		return err
	})
	return int(n), cmpErr(firstErr, err)
}

// maxOpenScan bounds the unfinished transactions one unfence reads.
const maxOpenScan = 1000

// openTxns is what unfence knows of the unfinished transactions: the
// earliest transaction time of those touching each account, and, if it
// could not read them all, a time before which it saw every one.
type openTxns struct {
	earliest map[string]time.Time
	cut      time.Time // zero: all were read
}

// clear reports whether r's fences may go: no unfinished transaction on
// its accounts was created at or before it.
func (o openTxns) clear(r *record) bool {
	if !o.cut.IsZero() && !r.Created.Before(o.cut) {
		return false
	}
	for _, l := range r.legs() {
		key, _ := idKey(l.account)
		if t, ok := o.earliest[key]; ok && !r.Created.Before(t) {
			return false
		}
	}
	return true
}

// openBefore reads the unfinished transactions created no later than the
// latest of recs, oldest first, at most maxOpenScan of them.
func (c *Coordinator) openBefore(ctx context.Context, recs []*record) (openTxns, error) {
	latest := recs[0].Created
	for _, r := range recs[1:] {
		if r.Created.After(latest) {
			latest = r.Created
		}
	}
	o := openTxns{earliest: map[string]time.Time{}}
	var open []struct {
		Source      bson.RawValue `bson:"source"`
		Destination bson.RawValue `bson:"destination"`
		Legs        []struct {
			Account bson.RawValue `bson:"account"`
		} `bson:"legs"`
		Created time.Time `bson:"created"`
	}
	err := c.retry(ctx, func(ctx context.Context) error {
		cur, err := c.txns.Find(ctx, bson.D{
			{Key: fieldState, Value: bson.D{{Key: "$in", Value: bson.A{StateInitial, StatePending, StateCanceling}}}},
			{Key: fieldCreated, Value: bson.D{{Key: "$lte", Value: latest}}},
		}, options.Find().
			SetProjection(bson.D{{Key: "source", Value: 1}, {Key: "destination", Value: 1}, {Key: fieldLegs + ".account", Value: 1}, {Key: fieldCreated, Value: 1}}).
			SetSort(bson.D{{Key: fieldCreated, Value: 1}}).
			SetLimit(maxOpenScan))
		if err != nil {
			return err
		}
		open = open[:0]
		return cur.All(ctx, &open)
	})
	if err != nil {
		return o, err
	}
	for _, t := range open {
		ids := []bson.RawValue{t.Source, t.Destination}
		for _, l := range t.Legs {
			ids = append(ids, l.Account)
		}
		for _, id := range ids {
			if id.Type == 0 {
				continue
			}
			key := canonicalID(id)
			if e, ok := o.earliest[key]; !ok || t.Created.Before(e) {
				o.earliest[key] = t.Created
			}
		}
	}
	if len(open) == maxOpenScan {
		o.cut = open[len(open)-1].Created
	}
	return o, nil
}

// writeAccounts sends models, idempotent updates of accounts, as unordered
// bulk writes of at most writeBatch statements each, every one retried on
// its own. It returns the indexes of the models that may not have been
// applied and the first error. The commands are small because FerretDB v1
// holds a backend connection for each statement of a command until it
// ends, and hangs for good once its pool is exhausted (an update command
// of 100 statements on SQLite).
//
// A command that fails with write errors is sent again one statement at a
// time, and only the statements that fail then are returned: the indexes
// of write errors are not to be trusted (FerretDB v1 stops an unordered
// command at its first error and reports it at index 0), and sending an
// applied statement again changes nothing. Any other failure returns that
// command's statements and all after it, unsent, for the next pass.
func (c *Coordinator) writeAccounts(ctx context.Context, models []mongo.WriteModel) (map[int]bool, error) {
	failed := map[int]bool{}
	var firstErr error
	send := func(start, end int) error {
		return c.retry(ctx, func(ctx context.Context) error {
			_, err := c.accounts.BulkWrite(ctx, models[start:end], options.BulkWrite().SetOrdered(false))
			return err
		})
	}
	for start := 0; start < len(models); start += c.writeBatch {
		end := min(start+c.writeBatch, len(models))
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

// cmpErr keeps the first error.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}
