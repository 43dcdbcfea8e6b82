package twopc

// A transfer's refund book: the refunds reserved of it, per leg, by a
// compare-and-set on the book as read; their give-back; the sweep of those
// that can no longer move money (PROTOCOL.md, Refunds).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// refundBooks are the refund books of a coordinator's transfers: the
// "<transactions>_refunds" collection.
type refundBooks struct {
	c    *Coordinator
	coll *mongo.Collection
}

// refundBook is what was refunded of one transfer: a document under the
// transfer's _id, created by its first refund (a hold's, for its order:
// see orderOf). Left plus the entries' amounts is what the transfer
// moved (for a hold, what its captures had taken at the book's first
// write: what is left is computed as the base less the entries, see
// reserved), and Returned is the sum of the entries' legs, leg by leg:
// every write changes them together, under Seq as read.
type refundBook struct {
	ID   bson.ObjectID `bson:"_id"`  // the transfer's
	Seq  int64         `bson:"seq"`  // one more at every write: the compare-and-set
	Left int64         `bson:"left"` // what may still be refunded
	// Returned is, per leg of the transfer (its SettledLegs, in order),
	// what the refunds made or in flight take back of it, of no sign.
	Returned []int64       `bson:"returned"`
	Refunds  []refundEntry `bson:"refunds"` // reservations: refunds made or in flight
}

// refundEntry is one refund's reservation.
type refundEntry struct {
	ID     bson.ObjectID `bson:"id"` // the refund transaction's _id
	Amount int64         `bson:"amount"`
	// Legs is what the refund takes back of each leg of the transfer, of
	// no sign (see refundTake): its own, given back with it.
	Legs []int64   `bson:"legs"`
	At   time.Time `bson:"at"` // when reserved, by the clock corrected to the server's
	// LeaseMs is the refunder's lease (its StaleAfter): how long its
	// insert may take.
	LeaseMs int64 `bson:"leaseMs,omitempty"`
	// Fixed is, for a refund by leg (RefundLegs), the sides its caller
	// named legs of (fixedCredits, fixedDebits): there Legs are the
	// caller's; 0 for a proportional refund (see bookTake).
	Fixed int `bson:"fixed,omitempty"`
	// Captures is, for a refund of a hold (its order: see orderOf), the
	// captures it takes from and how much of each (see captureTakes).
	Captures []captureTake `bson:"captures,omitempty"`
	// of are, for a refund of a hold, its committed captures, which
	// Captures is computed from; not stored.
	of []captureEntry
}

// reserved is what book's entries reserve: what its refunds made or in
// flight take in all. What is left to refund is the base less it (Left,
// for a transfer whose base never changes; a hold's order grows as its
// captures commit: see orderOf).
func (b *refundBook) reserved() int64 {
	var n int64
	for _, e := range b.Refunds {
		n += e.Amount
	}
	return n
}

// maxBookWrites bounds the compare-and-set attempts of one write to a
// refund book: each one lost is another write that won.
const maxBookWrites = 8 * MaxRefunds

// reserve records e in the book of transfer id, whose legs (signed, as
// SettledLegs) moved base, and returns e's legs: what it takes back of
// each leg, computed by refundTake from the book's live sums. It writes
// by a compare-and-set on the book as read (its seq), once, and only if
// what is left covers e and the book has room; a write lost to another is
// tried again on the book read again, within the call's bound. An entry
// of e's id already there is e reserved already (a repeat, or an attempt
// whose answer was lost): its own legs are returned; of another amount,
// ErrKeyConflict. If e does not fit, the reservations of refunds that can
// no longer move money are given back (see sweepBook) and it is tried
// once more.
func (bk *refundBooks) reserve(ctx context.Context, id bson.ObjectID, legs []int64, base int64, e refundEntry) ([]int64, error) {
	c := bk.c
	if err := c.shards.log.need(ctx); err != nil {
		return nil, err
	}
	e.At, e.LeaseMs = c.mark.stamp(ctx), c.staleAfter.Milliseconds()
	swept := false
	for range maxBookWrites {
		book, err := bk.readBook(ctx, id)
		if err != nil {
			return nil, err
		}
		left, seq, n := base, int64(0), 0
		if book != nil {
			if i := slices.IndexFunc(book.Refunds, func(x refundEntry) bool { return x.ID == e.ID }); i >= 0 {
				if x := book.Refunds[i]; !sameAsk(legs, x, e) {
					// Another call's refund under the same key: it may be
					// the one the key makes, of another amount or legs.
					return nil, errorf("%w: refund %s: a refund of %d (other legs, or another amount) is reserved under this key", ErrKeyConflict, id.Hex(), x.Amount)
				}
				return book.Refunds[i].Legs, nil // reserved already
			}
			if e.of != nil && orderMoved(book, legs, base, e.of) {
				return nil, errorf("twopc: refund %s: %w", id.Hex(), errOrderMoved)
			}
			left, seq, n = base-book.reserved(), book.Seq, len(book.Refunds)
		}
		if left < e.Amount || n >= MaxRefunds {
			if book != nil && !swept {
				swept = true
				released, err := bk.sweepBook(ctx, book)
				if err != nil {
					return nil, err
				}
				if released > 0 {
					continue
				}
			}
			if n >= MaxRefunds {
				return nil, errorf("%w: refund %s: %d refunds made or in flight (MaxRefunds)", ErrRefundExceeded, id.Hex(), n)
			}
			return nil, errorf("%w: refund %s: %d left to refund; a refund of %d", ErrRefundExceeded, id.Hex(), left, e.Amount)
		}
		take, err := bookTake(legs, book, e)
		switch {
		case errors.Is(err, ErrRefundExceeded) && book != nil && !swept:
			swept = true // a leg short: the reservations of refunds that can no longer move money may hold it
			if released, err := bk.sweepBook(ctx, book); err != nil || released > 0 {
				if err != nil {
					return nil, err
				}
				continue
			}
			return nil, errorf("twopc: refund %s: %w", id.Hex(), err)
		case errors.Is(err, ErrRefundExceeded):
			return nil, errorf("twopc: refund %s: %w", id.Hex(), err)
		case err != nil:
			return nil, errorf("twopc: refund %s: the refund book does not add up: %v", id.Hex(), err)
		}
		e.Legs = take
		if e.Captures, err = captureTakes(e.of, book, e.Amount); err != nil {
			return nil, errorf("twopc: refund %s: %w", id.Hex(), err)
		}
		var applied bool
		if book == nil {
			err = c.retry(ctx, func(ctx context.Context) error {
				_, err := bk.coll.InsertOne(ctx, refundBook{ID: id, Seq: 1, Left: base - e.Amount, Returned: take, Refunds: []refundEntry{e}})
				applied = err == nil
				if mongo.IsDuplicateKeyError(err) {
					return nil // made meanwhile (or by an attempt before): read again
				}
				return err
			})
		} else {
			inc := bson.D{{Key: "seq", Value: int64(1)}, {Key: "left", Value: -e.Amount}}
			for i, p := range take {
				if p != 0 {
					inc = append(inc, bson.E{Key: fmt.Sprintf("returned.%d", i), Value: p})
				}
			}
			err = c.retry(ctx, func(ctx context.Context) error {
				res, err := bk.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "seq", Value: seq}},
					bson.D{{Key: "$inc", Value: inc}, {Key: "$push", Value: bson.D{{Key: "refunds", Value: e}}}})
				applied = err == nil && res.MatchedCount == 1
				return err
			})
		}
		if err != nil {
			// The write's outcome is unknown (it may have applied before
			// it failed): the book read back says.
			if got, rerr := bk.readBook(ctx, id); rerr == nil && got != nil {
				if i := slices.IndexFunc(got.Refunds, func(x refundEntry) bool { return x.ID == e.ID && x.Amount == e.Amount }); i >= 0 {
					return got.Refunds[i].Legs, nil // reserved already
				}
			}
			return nil, errorf("twopc: refund %s: reserve: %w", id.Hex(), err)
		}
		if applied {
			return take, nil
		}
		// Another write came first (or an attempt of this one applied and
		// its answer was lost: the book read again shows its entry).
	}
	return nil, errorf("twopc: refund %s: reserve: the book changed %d times while read", id.Hex(), maxBookWrites)
}

// errOrderMoved reports a refund of a held hold's order read before a
// capture committed, whose book another refund, of the order as it grew,
// wrote since: the order as read no longer covers the book (see
// orderMoved). Never returned to a caller: refundAs reads the order again
// and reserves again, within the call's bound.
var errOrderMoved = errors.New("the order grew since it was read: a capture committed, and a refund of it reserved")

// orderMoved reports whether book was written by a refund of an order
// that grew since legs, base and of (its committed captures) were read:
// more reserved than base, a leg returning more than legs says it took,
// or an entry naming a capture not in of. An order only grows as its
// captures commit, so an order read again covers the book.
func orderMoved(book *refundBook, legs []int64, base int64, of []captureEntry) bool {
	if book.reserved() > base {
		return true
	}
	for i, got := range book.Returned {
		if l := legAt(legs, i); got > max(l, -l) {
			return true
		}
	}
	for _, x := range book.Refunds {
		for _, t := range x.Captures {
			if !slices.ContainsFunc(of, func(c captureEntry) bool { return c.ID == t.ID }) {
				return true
			}
		}
	}
	return false
}

// readBook reads the refund book of transfer id; nil if it has none.
func (bk *refundBooks) readBook(ctx context.Context, id bson.ObjectID) (*refundBook, error) {
	c := bk.c
	var book refundBook
	err := c.retry(ctx, func(ctx context.Context) error {
		return bk.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&book)
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, errorf("twopc: read the refunds of %s: %w", id.Hex(), err)
	}
	return &book, nil
}

// release gives back the reservation of refund refundID of amount in the
// book of transfer id: the entry of that id and that amount, read first,
// removed by a compare-and-set on the book as read (read again if another
// write came first), which adds back its amount to what is left and takes
// its own legs off each leg's sum. So a give-back, whoever sends it and
// however often, removes at most that entry and gives back exactly what
// it reserved. A failure leaves it to sweepBook.
func (bk *refundBooks) release(ctx context.Context, id, refundID bson.ObjectID, amount int64) {
	c := bk.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	err := func() error {
		for range maxBookWrites {
			book, err := bk.readBook(ctx, id)
			if err != nil || book == nil {
				return err
			}
			i := slices.IndexFunc(book.Refunds, func(e refundEntry) bool { return e.ID == refundID && e.Amount == amount })
			if i < 0 {
				return nil // given back already, or never reserved
			}
			inc := bson.D{{Key: "seq", Value: int64(1)}, {Key: "left", Value: amount}}
			for j, p := range book.Refunds[i].Legs {
				if p != 0 {
					inc = append(inc, bson.E{Key: fmt.Sprintf("returned.%d", j), Value: -p})
				}
			}
			var done bool
			err = c.retry(ctx, func(ctx context.Context) error {
				res, err := bk.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "seq", Value: book.Seq}}, bson.D{
					{Key: "$inc", Value: inc},
					{Key: "$pull", Value: bson.D{{Key: "refunds", Value: bson.D{{Key: "id", Value: refundID}, {Key: "amount", Value: amount}}}}},
				})
				done = err == nil && res.ModifiedCount == 1
				return err
			})
			if err != nil || done {
				return err
			}
		}
		return errors.New("the book kept changing")
	}()
	if err != nil {
		c.logger.Info("twopc: a canceled refund's reservation was not given back yet; the next refund of the transfer that needs it does", "transaction", id.Hex(), "refund", refundID.Hex(), "error", err)
	}
}

// sweepBook gives back the reservations in book of refunds that can no
// longer move money: canceled, or never inserted and reserved longer ago
// than the longer of their refunder's lease and this coordinator's (by the
// clock corrected to the server's, as their time is), which Cancel then
// settles (a placeholder refuses a late insert). It returns how many it
// gave back.
func (bk *refundBooks) sweepBook(ctx context.Context, book *refundBook) (int, error) {
	c := bk.c
	now := c.mark.stamp(ctx)
	released := 0
	for _, e := range book.Refunds {
		var state State
		r, _, err := c.log.lookup(ctx, e.ID)
		switch {
		case errors.Is(err, ErrTxnNotFound):
			if now.Sub(e.At) < max(time.Duration(e.LeaseMs)*time.Millisecond, c.staleAfter) {
				continue // its insert may be on its way
			}
			txn, err := NewCanceler(c).Cancel(ctx, e.ID)
			if err != nil {
				continue // settled by a later sweep
			}
			state = txn.State
		case err != nil:
			return released, err
		default:
			state = r.State
			if !r.Placeholder && r.RefundOf != book.ID {
				state = StateCanceled // another transfer's refund took the key: this one was never made
			}
		}
		if state == StateCanceled {
			bk.release(ctx, book.ID, e.ID, e.Amount)
			released++
		}
	}
	return released, nil
}

// settle settles refund refundID of amount of transfer id, unkeyed, whose
// call fails with its reservation's outcome unknown: no other call knows
// its key, so nothing will make it. Cancel's placeholder first (a late
// insert of it can then never move money, and a reservation of it applied
// late is given back by the next sweep, which finds it canceled), then the
// release, so the amount is refundable again at once. On a context of its
// own: the call's may have ended. A failure leaves it to sweepBook.
func (bk *refundBooks) settle(ctx context.Context, id, refundID bson.ObjectID, amount int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	txn, err := NewCanceler(bk.c).Cancel(ctx, refundID)
	if err != nil || txn.State != StateCanceled {
		return
	}
	bk.release(ctx, id, refundID, amount)
}

// releaseRefund gives back the reservation of refund r, just canceled.
func (bk *refundBooks) releaseRefund(ctx context.Context, r *record) {
	if r != nil && !r.RefundOf.IsZero() && r.State == StateCanceled {
		bk.release(ctx, r.RefundOf, r.ID, refundAmount(r.txn()))
	}
}
