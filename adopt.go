package twopc

// Adoption: an account the library did not open (inserted by hand, as the
// tutorial does, or by another program) is adopted by one guarded write
// the first time a leg meets it: its fences ([]) and its fence line (a
// date at most the low-water mark), and a whole-number double balance
// made a long, and it marks the account adopted (adopted: true, as
// OpenAccount does). Every leg write requires what adoption sets (an
// array of fences, a date line, an integer balance: see applyModel), so
// it stays short, and an account not adopted, or broken by a hand edit
// since, matches no leg write. The mark keeps an account whose line a hand
// edit removed (or set to null) from being adopted again at an older mark
// (a coordinator's last reading), under which a late duplicate of a leg
// whose fence the line had dropped would apply a second time. A hand edit
// that removes both the line and the mark cannot be told from an account
// never adopted (nor can one of an account adopted or opened before the
// mark was written): it is adopted again.

import (
	"context"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// adoptable reports what adoption would do to account a, which judge
// found neither closed to the leg nor holding it: nothing (false, nil:
// it is adopted), adopt it (true, nil), or nothing, for it cannot take
// legs (false, and why: ErrInvalidAccount).
//
// An account is adopted once its fence line is a date. Adoption needs its
// line missing or null, its fences missing or an array, no adopted mark,
// and its balance an integer or a double holding a whole number in
// int64's range. An adopted account whose fences are missing, or whose
// balance is a double, or a marked one whose line is missing or null, was
// edited by hand: it is not adopted again (its fences, or its line, could
// have refused legs that would then apply), and it takes no leg. An
// account with fences, no line and no mark was fenced before its first
// leg (a rollback reached it first): it is adopted.
func (a *account) adoptable(l leg) (bool, error) {
	adopted := a.FencedBefore.Type == bson.TypeDateTime
	switch {
	case a.Fences.Type != 0 && a.Fences.Type != bson.TypeArray:
		return false, errorf("%w: account %v has fencedLegs of BSON type %s", ErrInvalidAccount, l.account, a.Fences.Type)
	case a.FencedBefore.Type != 0 && a.FencedBefore.Type != bson.TypeNull && !adopted:
		return false, errorf("%w: account %v has fencedBefore of BSON type %s", ErrInvalidAccount, l.account, a.FencedBefore.Type)
	case a.Adopted.Type != 0 && !adopted:
		return false, errorf("%w: account %v is marked %s and has no fence line (fencedBefore removed or null by hand)", ErrInvalidAccount, l.account, fieldAdopted)
	case adopted && a.Fences.Type == 0:
		return false, errorf("%w: account %v has a fence line and no fencedLegs", ErrInvalidAccount, l.account)
	}
	switch a.Balance.Type {
	case bson.TypeInt32, bson.TypeInt64:
		return !adopted, nil
	case bson.TypeDouble:
		if _, ok := wholeDouble(a.Balance.Double()); ok && !adopted {
			return true, nil
		}
		return false, errorf("%w: account %v has a balance of BSON type double (%v), not a whole number of minor units the library can make a long",
			ErrInvalidAccount, l.account, a.Balance.Double())
	}
	return false, errorf("%w: account %v has balance of BSON type %s", ErrInvalidAccount, l.account, a.Balance.Type)
}

// wholeDouble returns f as an int64 if it holds a whole number that fits.
func wholeDouble(f float64) (int64, bool) {
	if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}

// adoptModel is the write that adopts account a (see adoptable), guarded
// by what the read found: its line missing or null, no adopted mark, its
// fences missing or an array as read, its balance the double read or an
// integer. It sets the line to line (at most the low-water mark: below
// every transaction that may still apply a leg), the mark, the fences to
// [] where they were missing, and a double balance to the long of the
// same value. It changes nothing else: legs in flight on the account, if
// any, are untouched. Idempotent: once adopted, the account no longer
// matches, and the mark keeps it so should a hand edit remove its line
// (this write delivered again then matches nothing either).
func adoptModel(a *account, l leg, line time.Time) mongo.WriteModel {
	filter := bson.D{{Key: "_id", Value: l.account}, {Key: fieldFencedBefore, Value: nil},
		{Key: fieldAdopted, Value: bson.D{{Key: "$exists", Value: false}}}}
	set := bson.D{{Key: fieldFencedBefore, Value: line}, {Key: fieldAdopted, Value: true}}
	if a.Fences.Type == 0 {
		filter = append(filter, bson.E{Key: fieldFencedLegs, Value: bson.D{{Key: "$exists", Value: false}}})
		set = append(set, bson.E{Key: fieldFencedLegs, Value: bson.A{}})
	} else {
		filter = append(filter, bson.E{Key: fieldFencedLegs, Value: bson.D{{Key: "$type", Value: "array"}}})
	}
	if a.Balance.Type == bson.TypeDouble {
		n, _ := wholeDouble(a.Balance.Double())
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{{Key: "$type", Value: "double"}, {Key: "$eq", Value: a.Balance.Double()}}})
		set = append(set, bson.E{Key: fieldBalance, Value: n})
	} else {
		filter = append(filter, bson.E{Key: fieldBalance, Value: bson.D{integer}})
	}
	return updateByID(filter, bson.D{{Key: "$set", Value: set}})
}

// adoptionLine is the line adoption sets: the low-water mark, read now if
// none was read yet; zero if it cannot be read (then nothing is adopted).
func (l *Ledger) adoptionLine(ctx context.Context) time.Time {
	if m := l.mark.line(); !m.IsZero() {
		return m
	}
	m, err := l.mark.readNow(ctx)
	if err != nil || m.UnixMilli() <= 0 {
		return time.Time{}
	}
	return m
}

// adopt sends adoptModel for each of accts (legs[i]'s account, as read),
// in one unordered command: each adopts its account at most once however
// often it is sent. Nothing is sent without a mark to set the line to.
func (l *Ledger) adopt(ctx context.Context, accts []*account, legs []leg) error {
	line := l.adoptionLine(ctx)
	if line.IsZero() {
		return errorf("twopc: ledger %q: no low-water mark to adopt accounts at", l.name)
	}
	models := make([]mongo.WriteModel, len(accts))
	for i, a := range accts {
		models[i] = adoptModel(a, legs[i], line)
	}
	_, err := l.write(ctx, models)
	return err
}
