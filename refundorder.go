package twopc

// A hold refunded as one order: one refund book for the hold across all
// its captures, whose base is what its committed captures took
// (PROTOCOL.md, Refunds).

import (
	"context"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// orderOf is hold h as its refunds see it: a transfer that moved what its
// committed captures took of each leg, under the hold's _id (its refund
// book's): a hold of two legs, from its source to its destination, Value
// what they took; a hold of legs, each leg signed as the hold's and of
// what they took of it (0 for a leg none took). Refund, RefundLegs,
// Refundable and Reverse then treat it as any committed transfer. A hold
// that ended (applied, done, or canceled after captures) took what its
// book's capturedLegs say, every capture in it committed before the end;
// a hold still held, what its committed captures took, each read (one in
// flight is not counted until it commits: the base follows the captures
// as they commit, and only grows). Its Captures are the hold's committed
// captures, which its refunds take from (captureTakes).
func (c *Coordinator) orderOf(ctx context.Context, h *record) (*record, error) {
	taken, committed := slices.Clone(h.CapturedLegs), h.Captures
	if h.State == StateHeld {
		now := c.mark.stamp(ctx)
		taken, committed = make([]int64, len(h.AllLegs())), nil
		for _, e := range h.Captures {
			f, err := (captureBook{c}).fateOf(ctx, h, e, now)
			if err != nil {
				return nil, err
			}
			if f != fateCommitted {
				continue
			}
			committed = append(committed, e)
			for i, p := range e.Amounts {
				if i < len(taken) {
					taken[i] += max(p, -p)
				}
			}
		}
	}
	o := *h
	o.Hold, o.Captures, o.CapturedLegs = false, committed, nil
	legs := h.AllLegs()
	at := func(i int) int64 {
		if i < len(taken) {
			return taken[i]
		}
		return 0
	}
	if len(h.Legs) == 0 {
		o.Value = at(1) // the credit's; the debit's is the same
		return &o, nil
	}
	o.Legs = make([]Leg, len(legs))
	o.Value = 0
	for i, l := range legs {
		l.Amount = at(i)
		if legs[i].Amount < 0 {
			l.Amount = -l.Amount
		}
		o.Legs[i] = l
		if l.Amount > 0 && l.Asset == legs[0].Asset {
			o.Value += l.Amount
		}
	}
	return &o, nil
}

// chargedSomething reports whether hold h's captures took anything, as
// far as its book says (made or in flight, while it is held).
func chargedSomething(h *record) bool {
	return slices.ContainsFunc(h.CapturedLegs, func(n int64) bool { return n != 0 })
}

// captureTake is what one refund of a hold's order takes from one of its
// captures.
type captureTake struct {
	ID     bson.ObjectID `bson:"id"` // the capture's _id
	Amount int64         `bson:"amount"`
}

// captureTakes names the captures a refund of amount of a hold's order
// takes from, given of, the hold's committed captures (in the order of
// its book), and book (nil: none), the refunds made or in flight: the
// oldest capture first, each for what it credited (its parts' credits,
// whatever their assets, as the order's base counts them: wholeBase)
// less what the book's entries took of it already. nil for a refund of
// anything else (of empty). A capture committed since the order was read
// may have been taken from by another refund; an amount the captures in
// of cannot cover is an error, and nothing is written (the call, made
// again, reads the hold again).
func captureTakes(of []captureEntry, book *refundBook, amount int64) ([]captureTake, error) {
	if len(of) == 0 {
		return nil, nil
	}
	took := map[bson.ObjectID]int64{}
	if book != nil {
		for _, e := range book.Refunds {
			for _, t := range e.Captures {
				took[t.ID] += t.Amount
			}
		}
	}
	var out []captureTake
	for _, cap := range of {
		if amount == 0 {
			break
		}
		var credit int64
		for _, p := range cap.Amounts {
			credit += max(p, 0)
		}
		if n := min(amount, credit-took[cap.ID]); n > 0 {
			out = append(out, captureTake{ID: cap.ID, Amount: n})
			amount -= n
		}
	}
	if amount > 0 {
		return nil, errorf("%w: its captures as read cover %d less than the refund: one committed since, refunded meanwhile; refund again", ErrRefundExceeded, amount)
	}
	return out, nil
}
