package twopc

// Refunds by leg: the caller names what a leg gives back (the seller's part
// only, the fee kept), against the transfer's refund book; a side it names
// no leg of is apportioned over what its legs have left (PROTOCOL.md,
// Refunds).

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The sides of a transfer a refund's caller named legs of (RefundLegs),
// as refundEntry.Fixed records them: the legs that received (credits) and
// the legs that paid (debits). 0: none, a proportional refund (Refund).
const (
	fixedCredits = 1
	fixedDebits  = 2
)

// legSide is the side of a transfer's leg of signed amount l.
func legSide(l int64) int {
	if l > 0 {
		return fixedCredits
	}
	return fixedDebits
}

// RefundLegs refunds part of committed transfer id as Refund does (a
// transfer of its own, against the same refund book, with the same
// options, errors, repeats and bounds), in amounts its caller chooses per
// leg: each of legs names a leg of the transfer by its Ledger and Account,
// and its Amount is what that leg takes back, of no sign: what a party
// that received (a seller, a fee account) gives back, or what one that
// paid (a buyer) gets back. A leg not named of a side named takes
// nothing: {seller 30} refunds 30 of the seller's part and keeps the fee.
// A side of which no leg is named is apportioned over what each of its
// legs has left (its amount less what refunds made or in flight returned
// of it), by the rule Refund uses: so when several legs paid (x −5,
// y −5 → s +10), {s 4} gives back x 2 and y 2, and a refund leg never
// pays a party. Naming legs of both sides, they must sum to the same
// amount. The refund's Value is that amount.
//
// Each named leg's amount is checked against what that leg has left in
// the book, by the same compare-and-set on the book as read that reserves
// it: a leg asked more than it has left is ErrRefundExceeded, and nothing
// is written. A repeat under the key takes the legs of the refund made
// under it; one that names other amounts is ErrKeyConflict. After refunds by leg, a proportional Refund takes from each leg
// in proportion to what it has left (see Refund).
//
// Errors, with nothing written: ErrInvalidTransfer for a leg named twice
// or not a leg of the transfer, an amount negative, an asset that is not
// the leg's, legs of both sides whose sums differ, or a sum of zero; and
// Refund's errors.
func (c *Coordinator) RefundLegs(ctx context.Context, id bson.ObjectID, legs []Leg, opts ...TransferOption) (_ *Txn, err error) {
	ctx, b := c.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	for i, l := range legs {
		if l.Amount < 0 {
			return nil, errorf("%w: leg %d (%v): a refund's amount per leg is what the leg takes back, of no sign; %d is negative", ErrInvalidTransfer, i, l.Account, l.Amount)
		}
	}
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	r, err := c.refundable(ctx, id, "refund")
	if err != nil {
		return r.txn(), err
	}
	base, err := refundBase(r)
	if err != nil {
		return nil, err
	}
	ask, err := askedLegs(r, legs)
	if err != nil {
		return nil, err
	}
	if ask.Amount > base {
		return nil, errorf("%w: transaction %s moved %d; a refund of %d", ErrRefundExceeded, r.ID.Hex(), base, ask.Amount)
	}
	key := tc.key
	if !tc.keyed {
		key = "refund:" + id.Hex() + ":" + bson.NewObjectID().Hex()
	}
	return c.refundAs(ctx, r, base, ask, key, tc.keyed, opts)
}

// askedLegs is the refund of transfer r that named asks for: its amount,
// the sides named (Fixed) and, per leg of r's SettledLegs, what it
// takes back of each leg of a side named (Legs; 0 on the other side).
func askedLegs(r *record, named []Leg) (refundEntry, error) {
	settled := r.txn().SettledLegs()
	at := map[string]int{}
	for i, l := range settled {
		at[legKey(l.Ledger, l.Account)] = i
	}
	ask := refundEntry{Legs: make([]int64, len(settled))}
	seen := map[int]int{}
	var credits, debits int64
	for k, l := range named {
		i, ok := at[legKey(l.Ledger, l.Account)]
		switch {
		case !ok:
			return ask, errorf("%w: leg %d: %v is not a leg of transaction %s", ErrInvalidTransfer, k, Leg{Ledger: l.Ledger, Account: l.Account}, r.ID.Hex())
		case seen[i] > 0:
			return ask, errorf("%w: legs %d and %d name the same leg %v", ErrInvalidTransfer, seen[i]-1, k, l.Account)
		case l.Asset != "" && l.Asset != settled[i].Asset:
			return ask, errorf("%w: leg %d: %v moved %s, not %s", ErrInvalidTransfer, k, l.Account, assetLabel(settled[i].Asset), assetLabel(l.Asset))
		}
		seen[i] = k + 1
		got := settled[i].Amount
		if l.Amount > max(got, -got) {
			return ask, errorf("%w: transaction %s: leg %v moved %d; a refund of %d of it", ErrRefundExceeded, r.ID.Hex(), l.Account, max(got, -got), l.Amount)
		}
		ask.Legs[i] = l.Amount
		ask.Fixed |= legSide(got)
		if got > 0 {
			credits += l.Amount // each at most its leg's amount: the sums are what the transfer moved at most
		} else {
			debits += l.Amount
		}
	}
	switch {
	case ask.Fixed == fixedCredits|fixedDebits && credits != debits:
		return ask, errorf("%w: the legs named that received sum to %d, those that paid to %d: a refund's sides move the same amount", ErrInvalidTransfer, credits, debits)
	case ask.Fixed&fixedCredits != 0:
		ask.Amount = credits
	default:
		ask.Amount = debits
	}
	if ask.Amount == 0 {
		return ask, errorf("%w: the legs named sum to nothing: a refund moves a positive amount", ErrInvalidTransfer)
	}
	return ask, nil
}

// bookTake returns what refund e takes back of each leg of a transfer of
// legs (signed, as its SettledLegs), of no sign, with book (nil: none) as
// read. On a side e names (e.Fixed), e's own Legs, each within what its
// leg has left (else ErrRefundExceeded). On any other side, by refundTake
// over the side's refunds since the last refund that named legs of it:
// each leg's basis is its amount less what the refunds up to that one
// returned (what it had left then), and the refunds after it are
// apportioned over that basis as refunds over a transfer's amounts are. So
// with no refund by leg this is refundTake over the book's sums, and the
// first proportional refund after one by leg takes in proportion to what
// each leg has left.
func bookTake(legs []int64, book *refundBook, e refundEntry) ([]int64, error) {
	var entries []refundEntry
	returned := make([]int64, len(legs))
	if book != nil {
		entries = book.Refunds
		copy(returned, book.Returned)
	}
	last := map[int]int{fixedCredits: -1, fixedDebits: -1} // the last entry naming each side
	for k, x := range entries {
		for _, side := range []int{fixedCredits, fixedDebits} {
			if x.Fixed&side != 0 {
				last[side] = k
			}
		}
	}
	basis, since := slices.Clone(legs), make([]int64, len(legs))
	for i, l := range legs {
		var before int64
		for k := 0; k <= last[legSide(l)]; k++ {
			if i < len(entries[k].Legs) {
				before += entries[k].Legs[i]
			}
		}
		if l > 0 {
			basis[i] = l - before
		} else if l < 0 {
			basis[i] = l + before
		}
		since[i] = returned[i] - before
	}
	take, err := refundTake(basis, since, e.Amount)
	if err != nil {
		return nil, err
	}
	for i, l := range legs {
		if l == 0 || e.Fixed&legSide(l) == 0 {
			continue
		}
		want := int64(0)
		if i < len(e.Legs) {
			want = e.Legs[i]
		}
		if left := max(l, -l) - returned[i]; want > left {
			return nil, errorf("%w: leg %d has %d left; a refund of %d of it", ErrRefundExceeded, i, left, want)
		}
		take[i] = want
	}
	return take, nil
}

// sameAsk reports whether x, an entry in a book, is the refund e asks
// for again: the same amount, the same sides named, and on them the same
// legs.
func sameAsk(legs []int64, x, e refundEntry) bool {
	if x.Amount != e.Amount || x.Fixed != e.Fixed {
		return false
	}
	for i, l := range legs {
		if l != 0 && e.Fixed&legSide(l) != 0 && legAt(x.Legs, i) != legAt(e.Legs, i) {
			return false
		}
	}
	return true
}

// legAt is take[i], 0 past its end.
func legAt(take []int64, i int) int64 {
	if i < len(take) {
		return take[i]
	}
	return 0
}

// priorAsks reports whether prior, the refund of r made under a key, took
// on the sides ask names the legs ask names: a repeat of RefundLegs with
// the key.
func priorAsks(r, prior *record, ask refundEntry) bool {
	took := map[string]int64{}
	for _, l := range prior.txn().AllLegs() {
		took[legKey(l.Ledger, l.Account)] = max(l.Amount, -l.Amount)
	}
	for i, l := range r.txn().SettledLegs() {
		if l.Amount != 0 && ask.Fixed&legSide(l.Amount) != 0 && took[legKey(l.Ledger, l.Account)] != legAt(ask.Legs, i) {
			return false
		}
	}
	return prior.Value == ask.Amount
}
