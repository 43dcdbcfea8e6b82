package twopc

// Refunds: a committed transfer returned in part, or whole (Reverse), each
// refund a transfer of its own, never more than the transfer moved.

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

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

// Refund returns amount of committed transfer id (applied or done; or a
// hold, as one order: see below) to where it came from: a transfer
// of its own, from the original's destination back to its source, or for
// a transfer of legs every leg turned, in proportion, exact over any
// sequence of refunds: on each side (the credits, the debits) the refunds
// made or in flight, amount included, are apportioned among the legs by
// the divisor method of Jefferson (D'Hondt: a unit at a time to the leg
// of the largest amount/(share+1), ties to the first leg), a rule
// under which no leg's share ever goes down as the total grows, and the
// refund takes from each leg its share less what it returned already. So
// no refund leg pays a party, no leg ever returns more than it received,
// the legs sum to zero, the last refund takes exactly what is left of
// every leg, and a canceled refund gives back exactly its own legs; a leg
// of nothing is left out. After refunds by leg (RefundLegs), a side is
// apportioned so over what its legs had left after the last one naming
// it: in proportion to what each leg has left. A repeat under the key
// takes the legs of the refund made, never computed again. A transfer of several assets
// (an exchange) is refunded whole only, by Reverse, under a book that is
// whole or nothing: reversed once, whatever keys ask. A hold whose
// captures took something (held, ended by its captures, voided or
// expired) is refunded as one order across all its captures: as the
// transfer they make together, of what they took of each of its legs (of
// those committed: the base grows as captures commit), under one book, the
// hold's, whose entries name the captures each refund takes from (the
// oldest first); the refund's RefundOf is the hold. A capture itself is not
// refunded on its own (ErrNotRefundable, naming its hold), so no money of
// it is ever refundable twice. The refund has Transfer's errors
// (ErrInsufficientFunds if the destination cannot cover it now, ...) and
// its options: WithKey (a repeat returns the first refund made under the
// key, and reserves nothing again), WithMetadata. Its Txn.RefundOf names
// the transfer, and statements list it as its own entries.
//
// What is refunded is kept in the transfer's refund book, a document
// under its _id in the "<transactions>_refunds" collection, with what
// each leg returned and each refund's own legs: before the refund's
// insert, a compare-and-set on the book as read (its sequence number)
// reserves amount and its legs there (what is left at least amount, the
// refund's _id not there yet: a reservation delivered twice, or late,
// counts once), tried again while other refunds' writes come first (a
// refund of a held hold whose book a refund of the order grown since by a
// capture wrote reads the hold again), within
// the call's bound, so refunds at once, from any number of
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
// nothing, and leaves its key free. The book's writes are retried on
// transient errors, and after one whose outcome is unknown the book is
// read back (an entry of the refund's own id and amount: reserved
// already, the refund goes on); a keyed refund whose call fails so is
// answered by its repeat at once, and an unkeyed one settles its own id
// before it returns (Cancel's placeholder, then the release), so its
// amount is refundable again at once. The book is kept for good (at most MaxRefunds entries), whatever
// WithHistory does to the transfer. The whole call is bounded as Transfer
// is (WithCallTimeout).
//
// Errors: with nothing written, ErrInvalidTransfer (an amount not
// positive, a key or metadata Transfer refuses, a transfer of several
// assets, a leg on a ledger this coordinator was not given: with
// ErrUnknownLedger), ErrTxnNotFound, ErrNotRefundable (a transaction not
// applied or done, a hold with nothing captured, or a capture: see
// ErrNotRefundable), ErrRefundExceeded,
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
	base, err := refundBase(r)
	if err != nil {
		return nil, err
	}
	if amount > base {
		return nil, errorf("%w: transaction %s moved %d; a refund of %d", ErrRefundExceeded, r.ID.Hex(), base, amount)
	}
	key := tc.key
	if !tc.keyed {
		key = "refund:" + id.Hex() + ":" + bson.NewObjectID().Hex()
	}
	return c.refund(ctx, r, base, amount, key, tc.keyed, opts)
}

// Refundable returns what is left to refund of committed transfer id (see
// Refund): what it moved (a hold: what its committed captures took), less
// its refunds made or in flight. It first
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
	return base - book.reserved(), nil
}

// refundable reads transfer id for op (refund, reverse or refundable),
// and refuses one that moved nothing to give back (notRefundable). A hold
// is returned as its order (orderOf): what its captures took.
func (c *Coordinator) refundable(ctx context.Context, id bson.ObjectID, op string) (*record, error) {
	r, _, err := c.log.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := notRefundable(r, op); err != nil {
		return r, err
	}
	if r.Hold {
		o, err := c.orderOf(ctx, r)
		if err != nil {
			return r, errorf("twopc: %s %s: %w", op, id.Hex(), err)
		}
		return o, nil
	}
	return r, nil
}

// notRefundable is the refusal of op (refund, reverse or refundable) of
// transaction r, ErrNotRefundable with advice that fits its state; nil
// for a committed transfer, which moved what it is to give back, and for
// a hold whose captures took something (committed, held, or voided or
// expired after captures), refunded as one order (see orderOf). A capture
// is refused: its hold's book holds it.
func notRefundable(r *record, op string) error {
	verb := op // what the caller does instead, spliced into the advice
	if op == "refundable" {
		verb = "refund"
	}
	var why string
	switch {
	case r.Placeholder:
		why = "it was canceled before it was made (Cancel's placeholder): it moved nothing"
	case !r.CaptureOf.IsZero():
		why = fmt.Sprintf("it is a capture of hold %s, whose captures are refunded as one order, under one book: %s the hold instead (what its captures took, across all of them)",
			r.CaptureOf.Hex(), verb)
	case r.State.Committed():
		return nil // a hold committed was ended by its captures
	case r.State == StateHeld:
		if chargedSomething(r) {
			return nil
		}
		why = "it is a hold, still held, nothing captured: it moves nothing until captured; release it with Void"
	case r.State == StateCanceling || r.State == StateCanceled:
		state := string(r.State)
		if r.Reason != "" {
			state += " (" + r.Reason + ")"
		}
		switch {
		case r.Hold && chargedSomething(r):
			return nil
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

// settledRefundLegs returns r's legs (SettledLegs) and their amounts, after
// checking that a refund of them can be written (every ledger known to
// this coordinator): before anything is reserved.
func (c *Coordinator) settledRefundLegs(r *record) ([]Leg, []int64, error) {
	legs := r.txn().SettledLegs()
	if len(r.Legs) > 0 {
		var turned []Leg // of a hold's order, the legs its captures took of
		for _, l := range legs {
			if l.Amount != 0 {
				l.Amount = -l.Amount
				turned = append(turned, l)
			}
		}
		if _, err := c.legsTxn(turned); err != nil {
			return nil, nil, err
		}
	}
	return legs, legAmounts(legs), nil
}

// refundTxn is the refund of r that takes take (of no sign, per leg of
// legs, r's SettledLegs) back, amount in all: from r's destination back
// to its source, or every leg of r turned, scaled to its take, those of
// none left out.
func (c *Coordinator) refundTxn(r *record, legs []Leg, take []int64, amount int64) (Txn, error) {
	if len(r.Legs) == 0 {
		return Txn{Source: r.Destination, Destination: r.Source, Value: amount, Asset: r.Asset, RefundOf: r.ID}, nil
	}
	var back []Leg
	for i, l := range legs {
		if i >= len(take) || take[i] == 0 {
			continue
		}
		l.Amount = take[i]
		if legs[i].Amount > 0 {
			l.Amount = -take[i] // a credit of the original is a debit of the refund
		}
		back = append(back, l)
	}
	t, err := c.legsTxn(back)
	t.RefundOf = r.ID
	return t, err
}

// refund refunds amount of r, whose base is what it moved, under key
// (keyed: the caller's): it reserves amount in r's book, which says what
// it takes of each leg (see refundTake), under the key's _id; then makes
// the refund, and gives the reservation back if it is canceled or was
// never made. A repeat of a refund made under the key takes its legs
// from that refund as made, never computed again (legs depend on the
// refunds before); one whose reservation stands but no transaction, from
// its entry in the book.
func (c *Coordinator) refund(ctx context.Context, r *record, base, amount int64, key string, keyed bool, opts []TransferOption) (*Txn, error) {
	return c.refundAs(ctx, r, base, refundEntry{Amount: amount}, key, keyed, opts)
}

// refundAs is refund of what ask asks: its Amount, and for a refund by
// leg (RefundLegs) the sides it names (Fixed) and its legs on them.
func (c *Coordinator) refundAs(ctx context.Context, r *record, base int64, ask refundEntry, key string, keyed bool, opts []TransferOption) (*Txn, error) {
	amount := ask.Amount
	legs, amounts, err := c.settledRefundLegs(r)
	if err != nil {
		return nil, err
	}
	refundID := keyID(key)
	prior, err := c.log.read(ctx, refundID)
	var t Txn
	switch {
	case err == nil && !prior.Placeholder && prior.RefundOf != r.ID:
		return prior.txn(), errorf("%w: key %q is transaction %s, not a refund of %s", ErrKeyConflict, key, prior.ID.Hex(), r.ID.Hex())
	case err == nil && ask.Fixed != 0 && !prior.Placeholder && !priorAsks(r, prior, ask):
		return prior.txn(), errorf("%w: key %q refunded other amounts of the legs of %s", ErrKeyConflict, key, r.ID.Hex())
	case err == nil:
		// A repeat: the refund made under the key, as it stands (the
		// transfer below returns it, or ErrKeyConflict). One canceled
		// stays canceled: nothing is reserved for it again.
		t = Txn{Source: r.Destination, Destination: r.Source, Value: amount, Asset: r.Asset, RefundOf: r.ID}
		if len(r.Legs) > 0 {
			t, err = c.repeatTxn(r, prior, legs, amounts, amount)
			if err != nil {
				return nil, err
			}
		}
	case errors.Is(err, ErrTxnNotFound):
		ask.ID = refundID
		var take []int64
		for tries := 1; ; tries++ {
			if c.refundHook != nil {
				c.refundHook(r)
			}
			ask.of = r.Captures // a hold's order: its committed captures (orderOf)
			take, err = c.books.reserve(ctx, r.ID, amounts, base, ask)
			if !errors.Is(err, errOrderMoved) || r.State != StateHeld || tries >= maxBookWrites {
				break
			}
			// A capture committed since the order was read, and a refund
			// of the order grown reserved: read it again, as a lost
			// compare-and-set does the book.
			if r, err = c.refundable(ctx, r.ID, "refund"); err != nil {
				break
			}
			if base, err = refundBase(r); err != nil {
				break
			}
			if legs, amounts, err = c.settledRefundLegs(r); err != nil {
				break
			}
		}
		if err != nil {
			if !keyed && !errors.Is(err, ErrRefundExceeded) && !errors.Is(err, ErrKeyConflict) {
				c.books.settle(ctx, r.ID, refundID, amount) // its reservation may have applied
			}
			return nil, err
		}
		if t, err = c.refundTxn(r, legs, take, amount); err != nil {
			c.books.release(ctx, r.ID, refundID, amount)
			return nil, err
		}
	default:
		return nil, errorf("twopc: refund %s: %w", r.ID.Hex(), err)
	}
	txn, err := c.startKeyed(ctx, t, key, opts, nil)
	switch {
	case txn != nil && txn.State == StateCanceled:
		c.books.release(ctx, r.ID, refundID, amount)
	case txn == nil && !keyed && !errors.Is(err, ErrInProgress):
		// Nothing was written under a key no other call knows.
		c.books.release(ctx, r.ID, refundID, amount)
	}
	return txn, err
}

// repeatTxn is the refund of amount of r asked again under the key that
// made prior: prior's own legs when it refunded amount (so the repeat
// matches it); otherwise legs computed as for a first refund, which the
// repeat then finds not the same call (ErrKeyConflict) or, for a
// placeholder, canceled.
func (c *Coordinator) repeatTxn(r, prior *record, legs []Leg, amounts []int64, amount int64) (Txn, error) {
	if !prior.Placeholder && refundAmount(prior.txn()) == amount && len(prior.Legs) > 0 {
		t, err := c.legsTxn(prior.txn().AllLegs())
		t.RefundOf = r.ID
		return t, err
	}
	take, err := refundTake(amounts, nil, amount)
	if err != nil {
		return Txn{}, errorf("%w: transaction %s: a refund of %d: %v", ErrRefundExceeded, r.ID.Hex(), amount, err)
	}
	return c.refundTxn(r, legs, take, amount)
}
