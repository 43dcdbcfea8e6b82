package twopc

// A leg and its five guarded writes, side by side (COMMANDS.md C17, C19-C22):
// apply, close (settle), fence, undo and the line write. Each is guarded so that
// whoever sends it, however often and however late, it takes effect at most
// once.

import (
	"fmt"
	"math"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// leg is one side of a transfer: the account, the signed amount, and the
// leg's marker, the value its account's pendingTransactions holds for it
// (see schema.Marker).
type leg struct {
	ledger  string // the ledger's name; "" is the default ledger
	account any
	delta   int64
	marker  bson.ObjectID
	// fenceID is the leg's fence: the value its account's fencedLegs
	// holds once the leg is closed there (see schema.Fence).
	fenceID bson.ObjectID
	// taken is, for a leg of a hold, what its captures took of it
	// (positive; the hold's capturedLegs as its end read them): its settle
	// and its undo release the rest (see releaseInc).
	taken int64
	// hold says l is a leg of a hold.
	hold bool
	// holdMarker is, for a leg of a capture, the marker of the hold's leg
	// it takes from (see captureApplyModel); zero for any other leg.
	holdMarker bson.ObjectID
	// asset is the leg's asset code; "": none.
	asset string
	// limited says which kind of account the writes that move l's money
	// are written for: one with limits (its rooms move with the balance)
	// or one without. Each such write requires its kind (see kind), so a
	// write of the wrong kind matches nothing and moves nothing; the
	// ledger picks the kind it last saw the account have (see
	// Ledger.kinds) and sends the other when that one does not match.
	limited bool
}

// kind is the filter clause that matches only an account of l's kind:
// with limits (floorRoom present) or without.
func (l leg) kind() bson.E {
	return bson.E{Key: fieldFloorRoom, Value: bson.D{{Key: "$exists", Value: l.limited}}}
}

// assetCond is the filter clause that matches only an account of l's
// asset: the code, or for a leg of no asset a missing or null asset.
func (l leg) assetCond() bson.E {
	if l.asset == "" {
		return bson.E{Key: fieldAsset, Value: nil}
	}
	return bson.E{Key: fieldAsset, Value: l.asset}
}

// withRooms is inc, the $inc of a write that moves l's money, with, for
// a leg written for an account with limits, the rooms' share of it.
func (l leg) withRooms(inc bson.D) bson.D {
	if !l.limited {
		return inc
	}
	rooms, _ := roomInc(inc)
	return append(inc, rooms...)
}

// roomInc is what an $inc of balance, pendingDebit and pendingCredit adds
// to an account's rooms: floorRoom moves with the balance, and
// ceilingRoom against the balance plus everything in flight. ok is false
// if the sum overflows int64.
func roomInc(inc bson.D) (_ bson.D, ok bool) {
	var floor, top int64
	for _, e := range inc {
		v := e.Value.(int64)
		switch e.Key {
		case fieldBalance:
			floor += v
		case fieldPendingDebit, fieldPendingCredit:
		default:
			continue
		}
		if (v > 0 && top > math.MaxInt64-v) || (v < 0 && top < math.MinInt64+1-v) {
			return nil, false
		}
		top += v
	}
	var out bson.D
	if floor != 0 {
		out = append(out, bson.E{Key: fieldFloorRoom, Value: floor})
	}
	if top != 0 {
		out = append(out, bson.E{Key: fieldCeilingRoom, Value: -top})
	}
	return out, true
}

func (l leg) debit() bool { return l.delta < 0 }

// addFence is the $addToSet that fences l: its fence in fencedLegs.
func (l leg) addFence() bson.D {
	return bson.D{{Key: fieldFencedLegs, Value: l.fenceID}}
}

// capture says l is a leg of a capture: it takes its part from a hold's
// leg on the same account.
func (l leg) capture() bool { return !l.holdMarker.IsZero() }

// applyInc is what applying l adds: a debit comes off the balance at once
// (the funds are held), a credit waits in pendingCredit. A capture's leg
// adds nothing: its part is held already.
func (l leg) applyInc() bson.D {
	if l.capture() {
		return nil
	}
	if l.debit() {
		return bson.D{{Key: fieldBalance, Value: l.delta}, {Key: fieldPendingDebit, Value: -l.delta}}
	}
	return bson.D{{Key: fieldPendingCredit, Value: l.delta}}
}

// settleInc is what settling l adds: a credit moves from pendingCredit to
// the balance; a debit is already there. A capture's leg moves its part
// out of what its account holds for the hold: a debit's from pendingDebit
// (it left the balance when the hold applied), a credit's from
// pendingCredit to the balance. A hold's leg moves nothing to anyone: its
// captures did; it releases what they left (releaseInc).
func (l leg) settleInc() bson.D {
	switch {
	case l.hold:
		return l.releaseInc()
	case l.debit():
		return bson.D{{Key: fieldPendingDebit, Value: l.delta}}
	}
	return bson.D{{Key: fieldBalance, Value: l.delta}, {Key: fieldPendingCredit, Value: -l.delta}}
}

// undoInc is what undoing an applied l adds: the held debit back to the
// balance, the credit out of pendingCredit; for a hold's leg, what its
// captures did not take (releaseInc); for a capture's leg, nothing (its
// apply moved nothing).
func (l leg) undoInc() bson.D {
	switch {
	case l.capture():
		return nil
	case l.hold:
		return l.releaseInc()
	case l.debit():
		return bson.D{{Key: fieldBalance, Value: -l.delta}, {Key: fieldPendingDebit, Value: l.delta}}
	}
	return bson.D{{Key: fieldPendingCredit, Value: -l.delta}}
}

// releaseInc is what the end of a hold releases of its leg l: the rest no
// capture took, a debit's back from pendingDebit to the balance, a
// credit's out of pendingCredit. Nil if nothing is left.
func (l leg) releaseInc() bson.D {
	rest := max(l.delta, -l.delta) - l.taken
	switch {
	case rest <= 0:
		return nil
	case l.debit():
		return bson.D{{Key: fieldBalance, Value: rest}, {Key: fieldPendingDebit, Value: -rest}}
	}
	return bson.D{{Key: fieldPendingCredit, Value: -rest}}
}

// fenceable is the condition that an account can take a fence:
// fencedLegs missing or an array, and its fence line missing, null or a
// date.
// Every leg write requires it, so that a leg that applies can always be
// settled or undone and fenced: a committed transfer always settles. An
// account that fails it refuses every leg, as one past its fence line
// does. The line's type matters because $max compares across BSON types:
// a line of a type sorting above dates (a timestamp, a regular expression,
// MaxKey) would never move, and fences dropped below a line that does not
// refuse them would let a late duplicate apply.
var fenceable = bson.E{Key: "$and", Value: bson.A{
	bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: fieldFencedLegs, Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: fieldFencedLegs, Value: bson.D{{Key: "$type", Value: "array"}}}},
	}}},
	bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: fieldFencedBefore, Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: fieldFencedBefore, Value: bson.D{{Key: "$type", Value: bson.A{"date", "null"}}}}},
	}}},
	// $type matches an array holding a date: an array line is refused too
	// ($max would replace it with an earlier date).
	bson.D{{Key: fieldFencedBefore, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$type", Value: "array"}}}}}},
}}

// lineBefore is the condition every leg write that moves money requires
// of an adopted account's fence line (see adoptModel): a date, earlier
// than created, and not an array (an array holding an earlier date would
// match $lt, and $max would then replace it with the mark). It tests the
// line positively: an account whose line is missing, null, or of any other
// type (a timestamp, which sorts above dates and would never move) takes
// no leg.
func lineBefore(created time.Time) bson.E {
	return bson.E{Key: fieldFencedBefore, Value: bson.D{{Key: "$lt", Value: created}, {Key: "$not", Value: bson.D{{Key: "$type", Value: "array"}}}}}
}

// moveLine is the part of an update that moves an account's fence line up
// to line ($max: never back) and drops the fences below it, which the line
// refuses from then on (see lowWater). Nil for a zero line.
func moveLine(line time.Time) bson.D {
	if line.IsZero() {
		return nil
	}
	return bson.D{
		{Key: "$max", Value: bson.D{{Key: fieldFencedBefore, Value: line}}},
		// Fences of transactions made at or before line: what it refuses.
		{Key: "$pull", Value: bson.D{{Key: fieldFencedLegs, Value: bson.D{{Key: "$lt", Value: schema.FenceFloor(line.Add(time.Millisecond))}}}}},
	}
}

// integer is the condition that a field holds an integer (int or long).
var integer = bson.E{Key: "$type", Value: bson.A{"int", "long"}}

// updateByID starts the write model of one statement whose filter names
// one document by its _id: a single-document update (multi: false), which
// makes a command of such statements a retryable write on MongoDB, and
// which every server can serve from the _id index.
//
// Its filter and update are handed to the driver already encoded (see
// encoded).
func updateByID(filter, update bson.D) *mongo.UpdateOneModel {
	return mongo.NewUpdateOneModel().SetFilter(encoded(filter)).SetUpdate(encoded(update))
}

// applyModel is the guarded write that applies l for transaction r, on an
// adopted account (see adoptModel): it matches only if the leg is neither
// applied (its marker in pendingTransactions) nor closed (its fence in
// fencedLegs, which must be an array, or a fence line, which must be a
// date, at or after r's transaction time: lineBefore), the
// balance is an integer, and the result stays in range (for a debit, at or
// above zero unless r's recorded policy allows negative balances; for a
// credit, see creditGuard). It pushes id to pendingTransactions with the
// change (see applyInc), atomically, so it is safe to repeat, and refused
// however late it arrives once the leg is closed. It also moves the
// account's line up to mark, dropping the fences below it (see moveLine,
// lineFor): the write that touches the account anyway keeps its fences
// bounded.
//
// It matches only an account of l's asset (assetCond) and kind (kind).
// On an account with limits the range is the account's own: a debit
// needs floorRoom >= the amount (the balance stays at or above the
// floor), a credit ceilingRoom >= the amount (the balance stays at or
// below the ceiling once everything in flight settles or is undone),
// whatever r's policy; the rooms move with the money (withRooms).
func applyModel(r *record, l leg, mark time.Time) mongo.WriteModel {
	if l.capture() {
		return captureApplyModel(r, l, mark)
	}
	filter := make(bson.D, 0, 9)
	filter = append(filter,
		bson.E{Key: "_id", Value: l.account},
		bson.E{Key: fieldPending, Value: bson.D{{Key: "$ne", Value: l.marker}}},
		bson.E{Key: fieldFencedLegs, Value: bson.D{{Key: "$type", Value: "array"}, {Key: "$ne", Value: l.fenceID}}},
		lineBefore(r.Created),
	)
	if r.Hold {
		// An account carries at most MaxHolds markers when a hold's leg
		// applies (see MaxHolds).
		filter = append(filter, bson.E{Key: fmt.Sprintf("%s.%d", fieldPending, MaxHolds-1), Value: bson.D{{Key: "$exists", Value: false}}})
	}
	filter = append(filter, l.assetCond())
	switch {
	case l.limited && l.debit():
		// The room's condition is the kind's too: a number there.
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{integer}},
			bson.E{Key: fieldFloorRoom, Value: bson.D{{Key: "$gte", Value: -l.delta}, integer}})
	case l.limited:
		filter = append(filter, l.kind(), bson.E{Key: fieldBalance, Value: bson.D{integer}},
			bson.E{Key: fieldCeilingRoom, Value: bson.D{{Key: "$gte", Value: l.delta}, integer}})
	default:
		filter = append(filter, l.kind())
	}
	switch {
	case l.limited:
	case l.debit() && !r.AllowNegative:
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{{Key: "$gte", Value: -l.delta}, integer}})
	case l.debit():
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{{Key: "$gte", Value: math.MinInt64 - l.delta}, integer}})
	default:
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{integer}}, creditGuard(l.delta))
	}
	update := bson.D{
		{Key: "$inc", Value: l.withRooms(l.applyInc())},
		{Key: "$push", Value: bson.D{{Key: fieldPending, Value: l.marker}}},
	}
	return updateByID(filter, append(update, moveLine(lineFor(mark, r))...))
}

// captureApplyModel is applyModel for a capture's leg l (of capture r):
// it pushes l's marker and moves no money (its part is held already). It
// matches only while the hold's leg is on the account (its marker
// pending) and the account holds the part for holds (pendingDebit at
// least a debit's part, pendingCredit a credit's), besides what every leg
// write requires of the account: l's own marker and fence absent, the
// line before r's own time (never the hold's: a hold older than the line
// is captured as a new one), the asset, the kind, and an integer balance
// (a balance a hand edit made a double takes no leg: its settle would add
// to the double). It moves the line as an apply does.
func captureApplyModel(r *record, l leg, mark time.Time) mongo.WriteModel {
	held := bson.E{Key: fieldPendingCredit, Value: bson.D{{Key: "$gte", Value: l.delta}, integer}}
	if l.debit() {
		held = bson.E{Key: fieldPendingDebit, Value: bson.D{{Key: "$gte", Value: -l.delta}, integer}}
	}
	filter := bson.D{
		{Key: "_id", Value: l.account},
		{Key: fieldPending, Value: bson.D{{Key: "$ne", Value: l.marker}, {Key: "$all", Value: bson.A{l.holdMarker}}}},
		{Key: fieldFencedLegs, Value: bson.D{{Key: "$type", Value: "array"}, {Key: "$ne", Value: l.fenceID}}},
		lineBefore(r.Created),
		l.assetCond(),
		l.kind(),
		{Key: fieldBalance, Value: bson.D{integer}},
		held,
	}
	update := bson.D{{Key: "$push", Value: bson.D{{Key: fieldPending, Value: l.marker}}}}
	return updateByID(filter, append(update, moveLine(lineFor(mark, r))...))
}

// legs returns r's legs, each with its marker; for a hold's, what its
// captures took of each (see releaseInc); for a capture's, the marker of
// the hold's leg each takes from.
func (r *record) legs() []leg {
	all := r.AllLegs()
	out := make([]leg, len(all))
	for i, l := range all {
		m := schema.Marker(r.ID, i)
		out[i] = leg{ledger: l.Ledger, account: l.Account, delta: l.Amount, marker: m, fenceID: schema.Fence(r.Created, m),
			asset: l.Asset, hold: r.Hold}
		if r.Hold && i < len(r.CapturedLegs) {
			out[i].taken = r.CapturedLegs[i]
		}
		if !r.CaptureOf.IsZero() && i < len(r.HoldLegs) {
			out[i].holdMarker = schema.Marker(r.CaptureOf, r.HoldLegs[i])
		}
	}
	return out
}

// closeModel is the guarded write that closes (settles) l of a committed
// transaction: it pulls the leg's marker from pendingTransactions while
// fencing it and moving a credit from pendingCredit to the balance (a
// debit's hold from pendingDebit), only while the marker is pending, so it
// happens once however often it is sent. It matches only an account of
// l's kind (see leg.limited).
func closeModel(l leg) mongo.WriteModel {
	update := bson.D{
		{Key: "$pull", Value: bson.D{{Key: fieldPending, Value: l.marker}}},
		{Key: "$addToSet", Value: l.addFence()},
	}
	if inc := l.settleInc(); inc != nil {
		update = append(update, bson.E{Key: "$inc", Value: l.withRooms(inc)})
	}
	return updateByID(bson.D{{Key: "_id", Value: l.account}, {Key: fieldPending, Value: l.marker}, l.kind()}, update)
}

// closeAllModel is closeModel for legs on one account (legs of different
// transactions), in one statement: it matches only while every one of
// their markers is pending ($all), and then pulls them all ($pullAll),
// fences them all ($addToSet with $each) and
// adds what they settle ($inc of the sums of their settleInc). One that
// finds a marker gone matches nothing and changes nothing; the caller then
// closes the legs one by one (see Ledger.closeLegs). ok is false, and
// there is no statement, when a sum would overflow int64 (each leg's
// amounts fit, their sum need not): those legs close one by one.
func closeAllModel(legs []leg) (_ mongo.WriteModel, ok bool) {
	markers := make(bson.A, len(legs))
	fences := make(bson.A, len(legs))
	var balance, credit, debit int64
	for i, lg := range legs {
		markers[i] = lg.marker
		fences[i] = lg.fenceID
		for _, e := range lg.settleInc() {
			v := e.Value.(int64)
			var sum *int64
			switch e.Key {
			case fieldBalance:
				sum = &balance
			case fieldPendingCredit:
				sum = &credit
			case fieldPendingDebit:
				sum = &debit
			default:
				return nil, false
			}
			if (v > 0 && *sum > math.MaxInt64-v) || (v < 0 && *sum < math.MinInt64-v) {
				return nil, false
			}
			*sum += v
		}
	}
	var inc bson.D
	for _, e := range []bson.E{{Key: fieldBalance, Value: balance}, {Key: fieldPendingCredit, Value: credit}, {Key: fieldPendingDebit, Value: debit}} {
		if e.Value.(int64) != 0 {
			inc = append(inc, e)
		}
	}
	if legs[0].limited {
		rooms, ok := roomInc(inc)
		if !ok {
			return nil, false
		}
		inc = append(inc, rooms...)
	}
	add := bson.D{{Key: fieldFencedLegs, Value: bson.D{{Key: "$each", Value: fences}}}}
	update := bson.D{
		{Key: "$pullAll", Value: bson.D{{Key: fieldPending, Value: markers}}},
		{Key: "$addToSet", Value: add},
	}
	if len(inc) > 0 {
		update = append(update, bson.E{Key: "$inc", Value: inc})
	}
	filter := bson.D{{Key: "_id", Value: legs[0].account}, {Key: fieldPending, Value: bson.D{{Key: "$all", Value: markers}}}, legs[0].kind()}
	return updateByID(filter, update), true
}

// fenceModel is the guarded write that fences l of canceling transaction
// r, so that no leg of it applies there from now on, whoever sends it. An
// upsert: if the account does not exist (it was deleted after the
// coordinator last read it, or while r was in flight), the fence is a
// tombstone that OpenAccount adopts, so that an account opened (or
// inserted by hand) later cannot take a stalled applier's leg. The fence is only added below the account's fence
// line, on an account that can take one: otherwise the account already
// refuses every leg of r (see applyModel), and a fence added past the line
// (a rollback delivered after the fences were removed) would never be
// removed.
func fenceModel(r *record, l leg) mongo.WriteModel {
	return updateByID(bson.D{
		{Key: "_id", Value: l.account},
		{Key: fieldFencedBefore, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: r.Created}}}}},
		fenceable,
	}, bson.D{
		{Key: "$addToSet", Value: l.addFence()},
		{Key: "$setOnInsert", Value: bson.D{{Key: fieldTombstone, Value: true}}},
	}).SetUpsert(true)
}

// lineModel is the write a rollback sends after its fences and undos, on
// each account it fenced: it moves the account's line up to line and drops
// the fences below it (moveLine), so that an account that only ever sees
// rollbacks keeps its fences bounded too (a fence write cannot do it
// itself: one update may not both add to fencedLegs and pull from it).
// Only on an account that can take it (fenceable), and only on one
// adopted (its line a date) or a tombstone: a line written on an account
// not yet adopted would make it look adopted without adoption's checks
// (a double balance left a double, and the account refused for good);
// its fences stay until a leg adopts it. Nil for a zero line.
func lineModel(l leg, line time.Time) mongo.WriteModel {
	update := moveLine(line)
	if update == nil {
		return nil
	}
	return updateByID(bson.D{{Key: "_id", Value: l.account}, fenceable, lineOrTombstone}, update)
}

// lineOrTombstone is the condition that an account is adopted (its line
// a date; fenceable keeps out an array holding one) or a tombstone.
var lineOrTombstone = bson.E{Key: "$or", Value: bson.A{
	bson.D{{Key: fieldFencedBefore, Value: bson.D{{Key: "$type", Value: "date"}}}},
	bson.D{{Key: fieldTombstone, Value: true}},
}}

// undoModel is the guarded write that undoes an applied l of a canceling
// transaction (see undoInc), only while its marker is pending, so it
// happens once; sent after the leg is fenced, it undoes an apply that
// raced ahead of the fence, and nothing can apply after it. It matches
// only an account of l's kind (see leg.limited): a rollback sends it for
// both kinds.
func undoModel(l leg) mongo.WriteModel {
	update := bson.D{{Key: "$pull", Value: bson.D{{Key: fieldPending, Value: l.marker}}}}
	if inc := l.undoInc(); inc != nil {
		update = append(update, bson.E{Key: "$inc", Value: l.withRooms(inc)})
	}
	return updateByID(bson.D{{Key: "_id", Value: l.account}, {Key: fieldPending, Value: l.marker}, l.kind()}, update)
}
