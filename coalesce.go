package twopc

// Coalesced applies: the legs of one apply round that name one account
// (of one ledger, one kind, one asset) go to it in one statement, so a
// hot account costs one apply per round, not one per transfer. The merged
// statement matches only where every one of its legs would apply in some
// serial order; one that does not match, or whose outcome is unknown, is
// followed by its legs one statement each (applyModel) before any leg is
// judged.

import (
	"fmt"
	"math"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// applyStmt is one statement of an apply command: the indexes, in the
// round's legs, of the legs it applies; more than one for a merged apply.
type applyStmt []int

// coalesce plans the statements that apply legs (each of transaction
// recs[i], written for its kind): the legs that name one account, of one
// kind and one asset, in one statement when applyAllModel can merge them,
// each other leg alone. Statements keep the order of their first leg. A
// leg whose marker another leg of the round already carries (one leg
// named twice) goes alone, and so do a leg whose account id has no
// canonical form and a capture's leg (its guard is its hold's).
func coalesce(recs []*record, legs []leg) []applyStmt {
	var out []applyStmt
	at := map[string]int{} // group key → index in out
	seen := map[bson.ObjectID]bool{}
	for i, l := range legs {
		id, err := schema.IDKey(l.account)
		if err != nil || seen[l.marker] || l.capture() {
			out = append(out, applyStmt{i})
			continue
		}
		seen[l.marker] = true
		key := fmt.Sprintf("%s\x00%t\x00%s", id, l.limited, l.asset)
		if j, ok := at[key]; ok {
			out[j] = append(out[j], i)
			continue
		}
		at[key] = len(out)
		out = append(out, applyStmt{i})
	}
	// A group whose legs cannot share a statement (a sum past int64, more
	// holds than MaxHolds leaves room for) goes leg by leg.
	var plan []applyStmt
	for _, s := range out {
		if len(s) > 1 {
			if _, ok := applyAllModel(s.recs(recs), s.legs(legs), time.Time{}); !ok {
				for _, i := range s {
					plan = append(plan, applyStmt{i})
				}
				continue
			}
		}
		plan = append(plan, s)
	}
	return plan
}

func (s applyStmt) legs(all []leg) []leg {
	out := make([]leg, len(s))
	for j, i := range s {
		out[j] = all[i]
	}
	return out
}

func (s applyStmt) recs(all []*record) []*record {
	out := make([]*record, len(s))
	for j, i := range s {
		out[j] = all[i]
	}
	return out
}

// model is the statement's write: applyModel for one leg, applyAllModel
// for several.
func (s applyStmt) model(recs []*record, legs []leg, mark time.Time) mongo.WriteModel {
	if len(s) == 1 {
		return applyModel(recs[s[0]], legs[s[0]], mark)
	}
	m, _ := applyAllModel(s.recs(recs), s.legs(legs), mark)
	return m
}

// applyAllModel is applyModel for legs on one account (of one kind and one
// asset), legs[i] of transaction recs[i], in one statement. It matches
// only if each leg would pass its own guard in some serial order (debits
// that forbid a negative balance first, then the rest):
//
//   - none of their markers pending ($nin) and none of their fences there
//     ($nin, in an array), and the account's line a date before the
//     earliest of their transaction times (lineBefore);
//   - for an account without limits, the balance an integer at least the
//     sum of the debits whose recorded policy forbids negative balances,
//     and at least MinInt64 plus the sum of all debits; the credits'
//     int64 bound on their sum: creditGuard's for one credit, its bound
//     for a busy account for several (mergedCreditGuard);
//   - for an account with limits, floorRoom at least the sum of the debits
//     and ceilingRoom at least the sum of the credits;
//   - for k legs among which a hold's, pendingTransactions holding fewer
//     than MaxHolds−k+1 markers (see MaxHolds);
//   - the asset and the kind, as applyModel.
//
// It pushes every marker and adds the sums (with the rooms' share, for an
// account with limits), and moves the line up to the mark, never past the
// earliest transaction's time less a millisecond (lineFor). ok is false,
// and there is no statement, when a sum would overflow int64, the holds
// bound leaves no room for k legs, or several credits sum past the busy
// bound.
func applyAllModel(recs []*record, legs []leg, mark time.Time) (_ mongo.WriteModel, ok bool) {
	k := len(legs)
	markers := make(bson.A, k)
	fences := make(bson.A, k)
	earliest := recs[0]
	var strict, debits, credits int64 // strict: the debits that forbid a negative balance
	hold, forbids := false, false
	nCredits := 0
	for i, l := range legs {
		r := recs[i]
		markers[i], fences[i] = l.marker, l.fenceID
		if r.Created.Before(earliest.Created) {
			earliest = r
		}
		hold = hold || r.Hold
		v := l.delta
		if l.debit() {
			v = -v
		}
		switch {
		case l.debit() && debits > math.MaxInt64-v, !l.debit() && credits > math.MaxInt64-v:
			return nil, false
		case l.debit():
			debits += v
			if !r.AllowNegative {
				strict += v
				forbids = true
			}
		default:
			credits += v
			nCredits++
		}
	}
	// Credits after the first meet a leg in flight: in any serial order
	// they pass creditGuard only by its bound for a busy account, which
	// the sum of the credits must then meet (see mergedCreditGuard).
	if hold && MaxHolds-k < 0 || nCredits > 1 && credits > 2*creditQuarter {
		return nil, false
	}
	filter := make(bson.D, 0, 12)
	filter = append(filter,
		bson.E{Key: "_id", Value: legs[0].account},
		bson.E{Key: fieldPending, Value: bson.D{{Key: "$nin", Value: markers}}},
		bson.E{Key: fieldFencedLegs, Value: bson.D{{Key: "$type", Value: "array"}, {Key: "$nin", Value: fences}}},
		lineBefore(earliest.Created),
	)
	if hold {
		filter = append(filter, bson.E{Key: fmt.Sprintf("%s.%d", fieldPending, MaxHolds-k), Value: bson.D{{Key: "$exists", Value: false}}})
	}
	filter = append(filter, legs[0].assetCond())
	if legs[0].limited {
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{integer}})
		if debits > 0 {
			filter = append(filter, bson.E{Key: fieldFloorRoom, Value: bson.D{{Key: "$gte", Value: debits}, integer}})
		} else {
			filter = append(filter, legs[0].kind())
		}
		if credits > 0 {
			filter = append(filter, bson.E{Key: fieldCeilingRoom, Value: bson.D{{Key: "$gte", Value: credits}, integer}})
		}
	} else {
		filter = append(filter, legs[0].kind())
		switch {
		case forbids:
			filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{{Key: "$gte", Value: strict}, integer}})
		case debits > 0:
			filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{{Key: "$gte", Value: math.MinInt64 + debits}, integer}})
		default:
			filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{integer}})
		}
		if credits > 0 {
			filter = append(filter, mergedCreditGuard(credits, nCredits))
		}
	}
	var inc bson.D
	if debits > 0 {
		inc = append(inc, bson.E{Key: fieldBalance, Value: -debits}, bson.E{Key: fieldPendingDebit, Value: debits})
	}
	if credits > 0 {
		inc = append(inc, bson.E{Key: fieldPendingCredit, Value: credits})
	}
	if legs[0].limited {
		rooms, ok := roomInc(inc)
		if !ok {
			return nil, false
		}
		inc = append(inc, rooms...)
	}
	update := bson.D{
		{Key: "$push", Value: bson.D{{Key: fieldPending, Value: bson.D{{Key: "$each", Value: markers}}}}},
	}
	if len(inc) > 0 {
		update = append(bson.D{{Key: "$inc", Value: inc}}, update...)
	}
	return updateByID(filter, append(update, moveLine(lineFor(mark, earliest))...)), true
}

// mergedCreditGuard is creditGuard for n credits summing to value in one
// statement. One credit keeps creditGuard. Of several, applied one after
// the other, every one after the first finds a leg in flight, so that it
// passes only by creditGuard's bound for a busy account (balance and
// pendingDebit at most creditQuarter, pendingCredit plus the credits at
// most twice it), never by the exact bound of an idle one: the merged
// statement requires that bound on the sum.
func mergedCreditGuard(value int64, n int) bson.E {
	if n < 2 {
		return creditGuard(value)
	}
	busy := bson.D{
		balanceAtMostQuarter,
		pendingDebitAtMostQuarter,
		{Key: fieldPendingCredit, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gt", Value: 2*creditQuarter - value}}}}},
	}
	return bson.E{Key: "$or", Value: bson.A{busy}}
}
