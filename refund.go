package twopc

// Refunds: a committed transfer returned in part, or whole (Reverse), each
// refund a transfer of its own, never more than the transfer moved.

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc/internal/schema"
)

// ErrRefundExceeded reports a refund (Refund, or Reverse) of more than is
// left to refund of a transfer: what it moved less its refunds made or in
// flight, or a refund past MaxRefunds. No refund is written (the call may
// first have given back the reservations of refunds that can no longer
// move money: see Refund).
var ErrRefundExceeded = errors.New("twopc: refund exceeds what is left of the transfer")

// MaxRefunds bounds the refunds of one transfer made or in flight: the
// refund book of a transfer (see Refund) holds at most this many.
const MaxRefunds = 100

// refundsSuffix names the refund books' collection after the transactions
// collection: "transactions_refunds" by default.
const refundsSuffix = schema.RefundsSuffix

// refundBooks are the refund books of a coordinator's transfers: the
// "<transactions>_refunds" collection.
type refundBooks struct {
	c    *Coordinator
	coll *mongo.Collection
}

// refundBook is what was refunded of one transfer: a document under the
// transfer's _id, created by its first refund.
type refundBook struct {
	ID      bson.ObjectID `bson:"_id"`     // the transfer's
	Left    int64         `bson:"left"`    // what may still be refunded
	Refunds []refundEntry `bson:"refunds"` // reservations: refunds made or in flight
}

// refundEntry is one refund's reservation.
type refundEntry struct {
	ID     bson.ObjectID `bson:"id"` // the refund transaction's _id
	Amount int64         `bson:"amount"`
	At     time.Time     `bson:"at"` // when reserved, by the clock corrected to the server's
	// LeaseMs is the refunder's lease (its StaleAfter): how long its
	// insert may take.
	LeaseMs int64 `bson:"leaseMs,omitempty"`
}

// Refund returns amount of committed transfer id (applied or done; a
// capture of a hold, not the hold itself) to where it came from: a transfer
// of its own, from the original's destination back to its source, or for
// a transfer of legs every leg turned, in proportion to amount over what
// the transfer credited (each leg rounded down, the units left given to
// the legs with the largest remainders, so the legs still sum to zero; a
// leg that rounds to nothing is left out). A transfer of several assets
// is refunded whole only (Reverse), and has no refund book: only
// Reverse's derived keys keep it from being reversed twice. The refund has Transfer's errors
// (ErrInsufficientFunds if the destination cannot cover it now, ...) and
// its options: WithKey (a repeat returns the first refund made under the
// key, and reserves nothing again), WithMetadata. Its Txn.RefundOf names
// the transfer, and statements list it as its own entries.
//
// What is refunded is kept in the transfer's refund book, a document
// under its _id in the "<transactions>_refunds" collection: before the
// refund's insert, one guarded write reserves amount there (what is left
// at least amount, the refund's _id not there yet: a reservation
// delivered twice counts once), so refunds at once, from any number of
// processes, never return more than the transfer moved: a refund past
// what is left is ErrRefundExceeded, and writes nothing. A refund that is
// canceled (refused, or rolled back by recovery) gives its reservation
// back, by a write guarded by its _id; one that can no longer be known
// (its insert lost, its caller gone) is given back by the next refund or
// Refundable of the transfer that needs the room, once its lease has run
// out, after Cancel has settled it. A refund keyed by the caller and
// refused before its insert (an account missing, an asset it does not
// hold) records nothing under the key in the log, and keeps its
// reservation: a repeat with the key within the refund's lease
// (StaleAfter) reuses it and is made; past the lease, the next refund of
// the transfer that needs the room cancels the key (Cancel's placeholder)
// and gives the reservation back. (Giving it back at once could let a
// refund of the same key made meanwhile by another process go unreserved.)
// A refund refused by the book (ErrRefundExceeded) reserves and writes
// nothing, and leaves its key free. The book is kept for good (at most MaxRefunds entries), whatever
// WithHistory does to the transfer. The whole call is bounded as Transfer
// is (WithCallTimeout).
//
// Errors: with nothing written, ErrInvalidTransfer (an amount not
// positive, a key or metadata Transfer refuses, a transfer of several
// assets, a leg on a ledger this coordinator was not given: with
// ErrUnknownLedger), ErrTxnNotFound, ErrNotRefundable (a transaction not
// applied or done, or a hold: see ErrNotRefundable), ErrRefundExceeded,
// ErrKeyConflict, ErrShardKey and ErrClosed; the refund itself canceled,
// its reservation given back, Transfer's refusals (ErrInsufficientFunds,
// ErrLimitExceeded, ErrAssetMismatch, ErrAccountNotFound,
// ErrBalanceOverflow, ErrInvalidAccount, ErrTooLate, ErrCanceled);
// ErrInProgress; ErrUnknownState or ErrMalformedTxn for a document edited
// by hand.
func (c *Coordinator) Refund(ctx context.Context, id bson.ObjectID, amount int64, opts ...TransferOption) (_ *Txn, err error) {
	ctx, b := c.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	if amount <= 0 {
		return nil, errorf("%w: refund amount %d is not positive", ErrInvalidTransfer, amount)
	}
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	r, err := c.refundable(ctx, id, "refund")
	if err != nil {
		return r.txn(), err
	}
	t, base, err := c.refundTxn(r, amount)
	if err != nil {
		return nil, err
	}
	key := tc.key
	if !tc.keyed {
		key = "refund:" + id.Hex() + ":" + bson.NewObjectID().Hex()
	}
	return c.refund(ctx, r, t, base, key, tc.keyed, opts)
}

// Refundable returns what is left to refund of committed transfer id (see
// Refund): what it moved, less its refunds made or in flight. It first
// gives back the reservations of refunds known canceled. A transaction
// Refund refuses is refused as Refund refuses it: ErrTxnNotFound,
// ErrNotRefundable, ErrInvalidTransfer for a transfer of several assets.
func (c *Coordinator) Refundable(ctx context.Context, id bson.ObjectID) (_ int64, err error) {
	ctx, b := c.readBound(ctx, "refundable")
	defer func() { err = b.explain(err); b.end() }()
	r, err := c.refundable(ctx, id, "refundable")
	if err != nil {
		return 0, err
	}
	base, err := refundBase(r)
	if err != nil {
		return 0, err
	}
	book, err := c.books.readBook(ctx, id)
	if err != nil || book == nil {
		return base, err
	}
	if _, err := c.books.sweepBook(ctx, book); err != nil {
		return 0, err
	}
	if book, err = c.books.readBook(ctx, id); err != nil || book == nil {
		return base, err
	}
	return book.Left, nil
}

// refundable reads transfer id for op (refund, reverse or refundable),
// and refuses one that moved nothing to give back (notRefundable).
func (c *Coordinator) refundable(ctx context.Context, id bson.ObjectID, op string) (*record, error) {
	r, _, err := c.log.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	return r, notRefundable(r, op)
}

// notRefundable is the refusal of op (refund, reverse or refundable) of
// transaction r, ErrNotRefundable with advice that fits its state; nil
// for a committed transfer, which moved what it is to give back.
func notRefundable(r *record, op string) error {
	verb := op // what the caller does instead, spliced into the advice
	if op == "refundable" {
		verb = "refund"
	}
	captures := fmt.Sprintf("%s its captures instead (each capture's CaptureOf names the hold)", verb)
	var why string
	switch {
	case r.Placeholder:
		why = "it was canceled before it was made (Cancel's placeholder): it moved nothing"
	case r.State.Committed() && !r.Hold:
		return nil
	case r.State.Committed():
		return errorf("twopc: %s %s: %w: %w: a hold moves nothing itself, its captures moved what it took: %s",
			op, r.ID.Hex(), ErrNotRefundable, ErrInvalidTransfer, captures)
	case r.State == StateHeld:
		why = "it is a hold, still held: it moves nothing until captured; release it with Void"
		if len(r.Captures) > 0 {
			why += ", and " + captures
		}
	case r.State == StateCanceling || r.State == StateCanceled:
		state := string(r.State)
		if r.Reason != "" {
			state += " (" + r.Reason + ")"
		}
		switch {
		case r.Hold && len(r.Captures) > 0:
			why = fmt.Sprintf("it is a hold, %s: it moved nothing itself, its captures moved what they took: %s", state, captures)
		case r.Hold:
			why = fmt.Sprintf("it is a hold, %s: it moved nothing", state)
		default:
			why = fmt.Sprintf("it is %s: it moved nothing", state)
		}
	default: // initial or pending
		why = fmt.Sprintf("it is %s, not yet at its commit point: let it finish (wait, or repeat its call with its key), read it with Get, and %s it once it is applied or done", r.State, verb)
		if r.Hold {
			why = fmt.Sprintf("it is a hold, %s: it moves nothing itself; once it is held, release it with Void or capture it", r.State)
		}
	}
	return errorf("twopc: %s %s: %w: %s", op, r.ID.Hex(), ErrNotRefundable, why)
}

// refundBase is what transfer r moved: what it credited, by its settled
// legs (a hold's, by what it captured).
func refundBase(r *record) (int64, error) {
	var base int64
	assets := map[string]bool{}
	for _, l := range r.txn().SettledLegs() {
		assets[l.Asset] = true
		if l.Amount > 0 {
			base += l.Amount
		}
	}
	if len(assets) > 1 {
		return 0, errorf("%w: transaction %s moves several assets: refund it whole (Reverse)", ErrInvalidTransfer, r.ID.Hex())
	}
	return base, nil
}

// refundTxn is the transfer that refunds amount of r, and r's base.
func (c *Coordinator) refundTxn(r *record, amount int64) (Txn, int64, error) {
	base, err := refundBase(r)
	if err != nil {
		return Txn{}, 0, err
	}
	if amount > base {
		return Txn{}, 0, errorf("%w: transaction %s moved %d; a refund of %d", ErrRefundExceeded, r.ID.Hex(), base, amount)
	}
	legs := r.txn().SettledLegs()
	if len(r.Legs) == 0 {
		return Txn{Source: r.Destination, Destination: r.Source, Value: amount, Asset: r.Asset, RefundOf: r.ID}, base, nil
	}
	back := proportional(legs, amount, base)
	t, err := c.legsTxn(back)
	t.RefundOf = r.ID
	return t, base, err
}

// proportional returns legs turned and scaled by amount/base: each leg's
// share rounded down, then the units left, on the credits' side and on
// the debits' side apart, one each to the legs with the largest remainders
// (the first such leg on a tie), so that each side sums to amount; legs
// of no units are left out.
func proportional(legs []Leg, amount, base int64) []Leg {
	type share struct {
		i    int
		rem  *big.Int
		side bool // a credit of the original
	}
	out := make([]Leg, len(legs))
	var shares []share
	given := map[bool]int64{}
	b, a := big.NewInt(base), big.NewInt(amount)
	for i, l := range legs {
		mag := l.Amount
		if mag < 0 {
			mag = -mag
		}
		q, rem := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(mag), a), b, new(big.Int))
		out[i] = l
		out[i].Amount = q.Int64()
		given[l.Amount > 0] += q.Int64()
		shares = append(shares, share{i, rem, l.Amount > 0})
	}
	slices.SortStableFunc(shares, func(x, y share) int { return y.rem.Cmp(x.rem) })
	for _, s := range shares {
		if given[s.side] < amount {
			out[s.i].Amount++
			given[s.side]++
		}
	}
	var back []Leg
	for i, l := range out {
		if l.Amount == 0 {
			continue
		}
		if legs[i].Amount > 0 {
			l.Amount = -l.Amount // a credit of the original is a debit of the refund
		}
		back = append(back, l)
	}
	return back
}

// refund reserves t's amount in r's book, under the _id key gives the
// refund, then makes t, and gives the reservation back if t is canceled
// or was never made. keyed says the key is the caller's.
func (c *Coordinator) refund(ctx context.Context, r *record, t Txn, base int64, key string, keyed bool, opts []TransferOption) (*Txn, error) {
	refundID := keyID(key)
	prior, err := c.log.read(ctx, refundID)
	switch {
	case err == nil && !prior.Placeholder && prior.RefundOf != r.ID:
		return prior.txn(), errorf("%w: key %q is transaction %s, not a refund of %s", ErrKeyConflict, key, prior.ID.Hex(), r.ID.Hex())
	case err == nil:
		// A repeat: the refund made under the key, as it stands (the
		// transfer below returns it, or ErrKeyConflict). One canceled
		// stays canceled: nothing is reserved for it again.
	case errors.Is(err, ErrTxnNotFound):
		if err := c.books.reserve(ctx, r.ID, base, refundEntry{ID: refundID, Amount: t.Value}); err != nil {
			return nil, err
		}
	default:
		return nil, errorf("twopc: refund %s: %w", r.ID.Hex(), err)
	}
	txn, err := c.startKeyed(ctx, t, key, opts, nil)
	switch {
	case txn != nil && txn.State == StateCanceled:
		c.books.release(ctx, r.ID, refundID, t.Value)
	case txn == nil && !keyed && !errors.Is(err, ErrInProgress):
		// Nothing was written under a key no other call knows.
		c.books.release(ctx, r.ID, refundID, t.Value)
	}
	return txn, err
}

// reserve records e in the book of transfer id, whose base is what it
// moved: once, and only if what is left covers it and the book has room.
// If it does not, the reservations of refunds that can no longer move
// money are given back (see sweepBook) and it is tried once more.
func (bk *refundBooks) reserve(ctx context.Context, id bson.ObjectID, base int64, e refundEntry) error {
	c := bk.c
	if err := c.shards.log.need(ctx); err != nil {
		return err
	}
	e.At, e.LeaseMs = c.mark.stamp(ctx), c.staleAfter.Milliseconds()
	if e.Amount <= base {
		_, err := bk.coll.InsertOne(ctx, refundBook{ID: id, Left: base - e.Amount, Refunds: []refundEntry{e}})
		if err == nil {
			return nil
		}
		if !mongo.IsDuplicateKeyError(err) {
			return errorf("twopc: refund %s: reserve: %w", id.Hex(), err)
		}
	}
	for attempt := 0; ; attempt++ {
		res, err := bk.coll.UpdateOne(ctx, bson.D{
			{Key: "_id", Value: id},
			{Key: "left", Value: bson.D{{Key: "$gte", Value: e.Amount}}},
			{Key: "refunds.id", Value: bson.D{{Key: "$ne", Value: e.ID}}},
			{Key: fmt.Sprintf("refunds.%d", MaxRefunds-1), Value: bson.D{{Key: "$exists", Value: false}}},
		}, bson.D{
			{Key: "$inc", Value: bson.D{{Key: "left", Value: -e.Amount}}},
			{Key: "$push", Value: bson.D{{Key: "refunds", Value: e}}},
		})
		if err != nil {
			return errorf("twopc: refund %s: reserve: %w", id.Hex(), err)
		}
		if res.MatchedCount == 1 {
			return nil
		}
		book, err := bk.readBook(ctx, id)
		if err != nil {
			return err
		}
		if book == nil {
			return errorf("%w: refund %s: the transfer moved %d; a refund of %d", ErrRefundExceeded, id.Hex(), base, e.Amount)
		}
		if i := slices.IndexFunc(book.Refunds, func(x refundEntry) bool { return x.ID == e.ID }); i >= 0 {
			if book.Refunds[i].Amount != e.Amount {
				// Another call's refund under the same key: it may be
				// the one the key makes, of another amount.
				return errorf("%w: refund %s: a refund of %d is reserved under this key", ErrKeyConflict, id.Hex(), book.Refunds[i].Amount)
			}
			return nil // reserved already: a repeat
		}
		released := 0
		if attempt == 0 {
			if released, err = bk.sweepBook(ctx, book); err != nil {
				return err
			}
		}
		if released == 0 {
			if len(book.Refunds) >= MaxRefunds {
				return errorf("%w: refund %s: %d refunds made or in flight (MaxRefunds)", ErrRefundExceeded, id.Hex(), len(book.Refunds))
			}
			return errorf("%w: refund %s: %d left to refund; a refund of %d", ErrRefundExceeded, id.Hex(), book.Left, e.Amount)
		}
	}
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
// book of transfer id: the entry of that id and that amount, by its place
// in the array, read first (read again if entries before it moved), so a
// give-back, whoever sends it and however often, removes at most that
// entry and adds back its own amount. A failure leaves it to sweepBook.
func (bk *refundBooks) release(ctx context.Context, id, refundID bson.ObjectID, amount int64) {
	c := bk.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	err := func() error {
		for range MaxRefunds {
			book, err := bk.readBook(ctx, id)
			if err != nil || book == nil {
				return err
			}
			i := slices.IndexFunc(book.Refunds, func(e refundEntry) bool { return e.ID == refundID && e.Amount == amount })
			if i < 0 {
				return nil // given back already, or never reserved
			}
			at := fmt.Sprintf("refunds.%d.", i)
			res, err := bk.coll.UpdateOne(ctx, bson.D{
				{Key: "_id", Value: id},
				{Key: at + "id", Value: refundID},
				{Key: at + "amount", Value: amount},
			}, bson.D{
				{Key: "$inc", Value: bson.D{{Key: "left", Value: amount}}},
				{Key: "$pull", Value: bson.D{{Key: "refunds", Value: bson.D{{Key: "id", Value: refundID}, {Key: "amount", Value: amount}}}}},
			})
			if err != nil || res.ModifiedCount == 1 {
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

// releaseRefund gives back the reservation of refund r, just canceled.
func (bk *refundBooks) releaseRefund(ctx context.Context, r *record) {
	if r != nil && !r.RefundOf.IsZero() && r.State == StateCanceled {
		bk.release(ctx, r.RefundOf, r.ID, r.Value)
	}
}
