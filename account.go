package twopc

// The account document as the protocol reads it: its fields, and the pure
// rules that judge a leg against it (the leg verdict and the credit guard).

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// Field names of account documents.
const (
	fieldBalance = schema.Balance
	// fieldPending holds the ids of transactions whose leg is applied to the
	// account and not yet settled (the tutorial's pendingTransactions).
	fieldPending = schema.Pending
	// fieldFencedLegs holds the fences of the legs closed on the account,
	// settled or rolled back, since its fence line: no leg of theirs may
	// apply here again. It is what keeps a stalled applier that resumes
	// after its transaction was settled or canceled from applying a leg a
	// second time, the hazard of the tutorial's protocol, where the guard
	// is only pendingTransactions. Each fence carries its transaction's
	// time (schema.Fence), so that the writes that move the line drop the
	// fences it passes (see lowWater): the array holds about the last
	// three quarters of a second of the account's traffic.
	fieldFencedLegs = schema.FencedLegs
	// fieldPendingCredit holds the sum of the credits applied to the account
	// and not yet settled. A credit reaches balance only when its
	// transaction settles, after the commit point, so it cannot be spent
	// before then: undoing a credit never takes a balance below zero.
	fieldPendingCredit = schema.PendingCredit
	// fieldPendingDebit holds the sum of the debits applied to the account
	// and not yet settled (already taken off balance): with balance and
	// pendingCredit it bounds what the balance can become when every leg
	// in flight settles or is undone, which the credit guard keeps inside
	// int64 (see creditGuard).
	fieldPendingDebit = schema.PendingDebit
	// fieldFencedBefore is the account's fence line, a transaction time:
	// no leg of a transaction created at or before it applies here. The
	// writes that drop fences move it forward first, in the same update,
	// past the transactions whose fences they drop (moveLine), so that a
	// leg write delivered however
	// late after its fence is gone is still refused by the server. Missing,
	// null or a date (see fenceable).
	fieldFencedBefore = schema.FencedBefore
	// fieldTombstone marks a document that holds only fences, written by a
	// rollback on an account that did not exist (one deleted after the
	// coordinator last read it, or while the transfer was in flight: a
	// transfer naming an id with no account is refused before its insert,
	// see engine.refuseMissing). It is never deleted: its
	// fence line keeps refusing late legs, and OpenAccount adopts it.
	fieldTombstone = schema.Tombstone
	// fieldAdopted is true on an account adopted (adoptModel) or opened
	// (OpenAccount), the only writes that set it: such an account's line
	// is a date from then on, and one whose line is not (a hand edit
	// removed it, or set it to null) is refused, never adopted again at
	// an older mark (see adoptable). An account fenced before its first
	// leg (a rollback's fence, a tombstone's) has fences and no line, and
	// no marker: it is adopted.
	fieldAdopted = "adopted"
	// fieldOpening is what OpenAccount opened the account with:
	// {balance, at}, where a statement starts.
	fieldOpening = schema.Opening
	// fieldAsset is the account's asset code (AccountAsset): a leg
	// applies only if its asset is the account's, and a leg of no asset
	// only to an account with none (missing or null). It never changes.
	fieldAsset = schema.Asset
	// fieldFloor and fieldCeiling are a limited account's limits
	// (AccountFloor, AccountCeiling, SetLimits), for readers: the guards
	// read the rooms.
	fieldFloor   = schema.Floor
	fieldCeiling = schema.Ceiling
	// fieldFloorRoom is a limited account's headroom above its floor,
	// balance - floor, and fieldCeilingRoom its headroom below its
	// ceiling, ceiling - (balance + pendingDebit + pendingCredit): what
	// the balance can reach once every leg in flight settles or is
	// undone. Every leg write on a limited account moves them with the
	// balance, in the same update (see roomInc), so a debit's guard is
	// floorRoom >= amount and a credit's ceilingRoom >= amount: the server
	// checks the limits in the write that moves the money, with no $expr.
	// Their presence is what makes an account limited; an account without
	// them (opened with no limits, inserted by hand, or by an earlier
	// version) keeps the guards it always had, and is never given them
	// but by SetLimits.
	fieldFloorRoom   = schema.FloorRoom
	fieldCeilingRoom = schema.CeilingRoom
	// fieldLimitsSeq counts the SetLimits writes on a limited account
	// (missing: none yet): each requires the count it read and adds one,
	// so one delivered late never matches, even after the limits were
	// set back to what it found.
	fieldLimitsSeq = schema.LimitsSeq
)

// MaxLimit is the largest floor or ceiling magnitude: a limited account's
// floor and ceiling lie in [-MaxLimit, MaxLimit], and one with no ceiling
// of its own takes MaxLimit, so that its rooms, differences of two such
// values, always fit in int64.
const MaxLimit int64 = 1<<62 - 1

// creditQuarter is a quarter of int64's range. A credit applies when
// nothing is in flight on the account and balance+value fits in int64, or
// when balance and pendingDebit are each at most creditQuarter and
// pendingCredit+value at most twice it: either way, whatever in-flight legs
// then settle or are undone, the balance stays within int64, so a
// committed transfer always settles.
const creditQuarter = math.MaxInt64 >> 2

// account is the part of an account document the protocol reads. Its
// fields are decoded loosely, so that an account of the wrong shape is
// judged (and refused) rather than failing the read.
type account struct {
	ID            bson.RawValue `bson:"_id"`
	Balance       bson.RawValue `bson:"balance"`
	PendingIDs    bson.RawValue `bson:"pendingTransactions"`
	Fences        bson.RawValue `bson:"fencedLegs"`
	PendingCredit bson.RawValue `bson:"pendingCredit"`
	PendingDebit  bson.RawValue `bson:"pendingDebit"`
	FencedBefore  bson.RawValue `bson:"fencedBefore"`
	Tombstone     bool          `bson:"tombstone"`
	Adopted       bson.RawValue `bson:"adopted"`
	Asset         bson.RawValue `bson:"asset"`
	Floor         bson.RawValue `bson:"floor"`
	Ceiling       bson.RawValue `bson:"ceiling"`
	FloorRoom     bson.RawValue `bson:"floorRoom"`
	CeilingRoom   bson.RawValue `bson:"ceilingRoom"`
	LimitsSeq     bson.RawValue `bson:"limitsSeq"`
	Metadata      bson.RawValue `bson:"metadata"` // AccountMetadata's; read by Account only
}

// accountProjection is what the protocol reads of an account.
var accountProjection = bson.D{
	{Key: fieldBalance, Value: 1}, {Key: fieldPending, Value: 1}, {Key: fieldFencedLegs, Value: 1},
	{Key: fieldPendingCredit, Value: 1}, {Key: fieldPendingDebit, Value: 1},
	{Key: fieldFencedBefore, Value: 1}, {Key: fieldTombstone, Value: 1}, {Key: fieldAdopted, Value: 1},
	{Key: fieldAsset, Value: 1}, {Key: fieldFloor, Value: 1}, {Key: fieldCeiling, Value: 1},
	{Key: fieldFloorRoom, Value: 1}, {Key: fieldCeilingRoom, Value: 1}, {Key: fieldLimitsSeq, Value: 1},
}

// limited reports whether the account has limits: its floorRoom is
// there (of any type; a room that is not an integer refuses every leg).
func (a *account) limited() bool { return a.FloorRoom.Type != 0 }

// rooms returns a limited account's floorRoom and ceilingRoom, and false
// if either is missing or not an integer.
func (a *account) rooms() (floor, ceiling int64, ok bool) {
	f, ok1 := integerOK(a.FloorRoom)
	c, ok2 := integerOK(a.CeilingRoom)
	return f, c, ok1 && ok2
}

// assetOf returns the account's asset code: "" for none (missing or
// null), and false for a value of another type.
func (a *account) assetOf() (string, bool) {
	switch a.Asset.Type {
	case 0, bson.TypeNull:
		return "", true
	case bson.TypeString:
		s := a.Asset.StringValue()
		return s, s != ""
	}
	return "", false
}

// closedTo reports whether the account's fence line refuses every leg of a
// transaction created at created.
func (a *account) closedTo(created time.Time) bool {
	line, ok := a.line()
	return ok && !line.Before(created)
}

// line returns the account's fence line, and false if it has none (a
// missing or null fencedBefore, or one of another type, which judge
// refuses).
func (a *account) line() (time.Time, bool) {
	t, ok := a.FencedBefore.TimeOK()
	return t, ok
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

// pendingLen is how many elements pendingTransactions holds, of any type:
// what a hold's apply filter counts (see MaxHolds).
func (a *account) pendingLen() int {
	arr, ok := a.PendingIDs.ArrayOK()
	if !ok {
		return 0
	}
	vals, _ := arr.Values()
	return len(vals)
}

func (a *account) fences() []bson.ObjectID { return objectIDs(a.Fences) }

// closed reports whether l is closed on the account: its fence in
// fencedLegs.
func (a *account) closed(l leg) bool { return has(a.fences(), l.fenceID) }

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
		noLegPending,
		{Key: fieldBalance, Value: bson.D{{Key: "$lte", Value: math.MaxInt64 - value}}},
	}
	if value > 2*creditQuarter {
		return bson.E{Key: "$or", Value: bson.A{alone}}
	}
	busy := bson.D{
		balanceAtMostQuarter,
		pendingDebitAtMostQuarter,
		{Key: fieldPendingCredit, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: 2*creditQuarter - value}}}}},
	}
	return bson.E{Key: "$or", Value: bson.A{alone, busy}}
}

// The parts of creditGuard that do not depend on the credit, built once.
var (
	noLegPending = bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: fieldPending, Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: fieldPending, Value: bson.D{{Key: "$size", Value: 0}}}},
	}}
	balanceAtMostQuarter      = bson.E{Key: fieldBalance, Value: bson.D{{Key: "$lte", Value: int64(creditQuarter)}}}
	pendingDebitAtMostQuarter = bson.E{Key: fieldPendingDebit, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: int64(creditQuarter)}}}}}
)

// balance returns the account's balance if it is an integer.
func (a *account) balance() (int64, bool) { return integerOK(a.Balance) }

func has(ids []bson.ObjectID, id bson.ObjectID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// legVerdict is what an account says of one leg.
type legVerdict int

const (
	legRetry   legVerdict = iota // not applied, and nothing stops it now
	legApplied                   // applied: the id is in pendingTransactions
	legFenced                    // closed: settled or rolled back by someone else
	legBlocked                   // cannot apply: see the error
	legAdopt                     // not applied: the account is to be adopted first (see adoptModel)
)

// closedVerdict reports whether judge's verdict v (with why) says the
// leg is closed: fenced on its account, or behind its account's fence
// line. Either stays so for good.
func closedVerdict(v legVerdict, why error) bool {
	return v == legFenced || v == legBlocked && errors.Is(why, ErrTooLate)
}

// judge reads account a (nil if missing) for leg l of transaction r. An
// account with limits is judged by its rooms, whatever r's policy says
// (its own floor governs it); one without, by its balance and r's policy.
func judge(a *account, r *record, l leg) (legVerdict, error) {
	switch {
	case a != nil && a.closed(l): // a may be a tombstone
		return legFenced, nil
	case a != nil && has(a.pending(), l.marker):
		return legApplied, nil
	case a != nil && a.closedTo(r.Created):
		// Past the account's fence line: the transaction was finished by
		// someone else, or its time is older than transactions already
		// finished here (a slow clock, a very late insert). It cannot
		// apply; the caller's guarded move to canceling tells which.
		return legBlocked, errorf("%w: account %v is closed to transactions created at or before %v",
			ErrTooLate, l.account, a.FencedBefore.Time().UTC().Format(time.RFC3339Nano))
	case a == nil || a.Tombstone:
		return legBlocked, errorf("%w: %v", ErrAccountNotFound, l.account)
	}
	if adopt, why := a.adoptable(l); why != nil {
		return legBlocked, why
	} else if adopt {
		return legAdopt, nil
	}
	if asset, ok := a.assetOf(); !ok || asset != l.asset {
		return legBlocked, errorf("%w: account %v holds %s, the leg moves %s", ErrAssetMismatch, l.account, assetName(a.Asset), assetLabel(l.asset))
	}
	if l.capture() {
		held, what := a.credit(), "pendingCredit"
		if l.debit() {
			held, what = a.heldDebit(), "pendingDebit"
		}
		switch {
		case !has(a.pending(), l.holdMarker):
			return legBlocked, errorf("%w: account %v does not carry the hold's leg %s the capture takes from", ErrInvalidAccount, l.account, l.holdMarker.Hex())
		case held < max(l.delta, -l.delta):
			return legBlocked, errorf("%w: account %v holds %d in %s, the capture takes %d", ErrInvalidAccount, l.account, held, what, max(l.delta, -l.delta))
		}
		return legRetry, nil
	}
	b, ok := a.balance()
	if a.limited() {
		floor, ceiling, rok := a.rooms()
		switch {
		case r.Hold && a.pendingLen() >= MaxHolds:
			return legBlocked, errorf("%w: account %v carries %d legs in flight, holds included (MaxHolds is %d)",
				ErrTooManyHolds, l.account, a.pendingLen(), MaxHolds)
		case !ok:
			return legBlocked, errorf("%w: account %v has balance of BSON type %s", ErrInvalidAccount, l.account, a.Balance.Type)
		case !rok:
			return legBlocked, errorf("%w: account %v has floorRoom of BSON type %s and ceilingRoom of BSON type %s",
				ErrInvalidAccount, l.account, a.FloorRoom.Type, a.CeilingRoom.Type)
		case l.debit() && floor < -l.delta:
			return legBlocked, errorf("%w: account %v has %d above its floor, needs %d", ErrInsufficientFunds, l.account, floor, -l.delta)
		case !l.debit() && ceiling < l.delta:
			return legBlocked, errorf("%w: account %v has room for %d below its ceiling (counting what is in flight), credit %d",
				ErrLimitExceeded, l.account, ceiling, l.delta)
		}
		return legRetry, nil
	}
	switch {
	case r.Hold && a.pendingLen() >= MaxHolds:
		return legBlocked, errorf("%w: account %v carries %d legs in flight, holds included (MaxHolds is %d)",
			ErrTooManyHolds, l.account, a.pendingLen(), MaxHolds)
	case !ok:
		return legBlocked, errorf("%w: account %v has balance of BSON type %s", ErrInvalidAccount, l.account, a.Balance.Type)
	case l.debit() && !r.AllowNegative && b < -l.delta:
		return legBlocked, errorf("%w: account %v has %d, needs %d", ErrInsufficientFunds, l.account, b, -l.delta)
	case l.debit() && b < math.MinInt64-l.delta:
		return legBlocked, errorf("%w: account %v has %d, debit %d", ErrBalanceOverflow, l.account, b, -l.delta)
	case !l.debit() && !a.creditFits(b, l.delta):
		return legBlocked, errorf("%w: account %v has %d with %d in flight in and %d out, credit %d",
			ErrBalanceOverflow, l.account, b, a.credit(), a.heldDebit(), l.delta)
	}
	return legRetry, nil
}

// assetLabel is an asset code as messages show it.
func assetLabel(code string) string {
	if code == "" {
		return "no asset"
	}
	return "asset " + code
}

// assetName is an account's asset field as messages show it.
func assetName(v bson.RawValue) string {
	switch v.Type {
	case 0, bson.TypeNull:
		return "no asset"
	case bson.TypeString:
		return fmt.Sprintf("asset %q", v.StringValue())
	}
	return "an asset of BSON type " + v.Type.String()
}
