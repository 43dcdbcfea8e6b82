package twopc

// Reverse: the transfer that undoes a committed one, under a key derived
// from its id.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Reverse undoes a committed transfer the way the tutorial says to: a new
// transfer that moves back what it moved (see Txn.SettledLegs): for a
// Transfer, the same value from its destination back to its source; for
// TransferLegs, every leg with its sign turned; a hold that ended (by its
// captures, or voided or expired after some), what its committed captures
// took, every capture at once, as one transfer (see Refund: a capture is
// reversed only with its hold, ErrNotRefundable on its own). A hold still
// held is ErrNotRefundable, and nothing is written: a reversal returns all
// its captures took, which is not whole while more may be captured; void
// it (or let its last capture end it) and reverse it then, or refund what
// its captures took so far with Refund or RefundLegs, which stay allowed.
// A transfer of any assets is reversed
// at most once, whatever keys ask: the reversal reserves all that the
// transfer moved in its refund book (see Refund) before it is made, so
// a second Reverse under another key (or none) is ErrRefundExceeded and
// writes nothing, and so is Reverse of a transfer refunded in part; a
// transfer of several assets (an exchange), which Refund refuses, has a
// book too, whole or nothing: only its reversal, every leg whole, is ever
// reserved in it. A reversal that is canceled (say the destination lacked
// the funds then) gives its reservation back, so a later Reverse is made.
// Without WithKey, its idempotency key is derived from id ("reverse:<id>",
// then "reverse:<id>:2", ... after one canceled), so a repeat returns the
// reversal that committed or is in progress; a repeat with other metadata
// (WithMetadata) than the reversal's is, like any keyed repeat,
// ErrKeyConflict, with that reversal as the Txn. A key given in opts is
// used as it is, and its repeat returns the reversal made under it. A
// repeat answers, as it stands, the refund of the transfer its key made
// (by Reverse, or by Refund under that key): its own legs, never computed
// again from what the transfer moved. The
// reversal is a transfer of its own, with Transfer's errors
// (ErrInsufficientFunds if the destination cannot cover it now, ...). An
// id that names no transaction gives ErrTxnNotFound; a transaction not
// applied or done, ErrNotRefundable, saying what to do instead (a pending
// one is finished first, a held hold voided, a canceled one moved
// nothing), and nothing is written. The whole call, its reads and the
// reversal, is bounded as Transfer is (WithCallTimeout).
//
// Errors: with nothing written, ErrInvalidTransfer (a key or metadata
// Transfer refuses, a WithAsset other than the assets it moved, a leg on a
// ledger this coordinator was not given: with ErrUnknownLedger; credits
// of several assets past MaxInt64 in all), ErrTxnNotFound,
// ErrNotRefundable (see there), ErrRefundExceeded (reversed, or refunded
// in part, already), ErrKeyConflict, ErrShardKey and ErrClosed;
// the reversal itself canceled, Transfer's refusals (ErrInsufficientFunds,
// ErrLimitExceeded, ErrAssetMismatch, ErrAccountNotFound,
// ErrBalanceOverflow, ErrInvalidAccount, ErrTooLate, ErrCanceled);
// ErrInProgress; ErrUnknownState or ErrMalformedTxn for a document edited
// by hand.
func (c *Coordinator) Reverse(ctx context.Context, id bson.ObjectID, opts ...TransferOption) (_ *Txn, err error) {
	ctx, b := c.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	r, err := c.refundable(ctx, id, "reverse")
	if err != nil {
		return r.txn(), err
	}
	if tc.assetSet {
		for _, l := range r.AllLegs() {
			if l.Asset != tc.asset {
				return r.txn(), errorf("%w: reverse %s: it moved %s, not WithAsset's %s", ErrInvalidTransfer, id.Hex(), assetLabel(l.Asset), tc.asset)
			}
		}
	}
	if tc.keyed {
		prior, err := c.log.read(ctx, keyID(tc.key))
		switch {
		case errors.Is(err, ErrTxnNotFound):
			return c.reverse(ctx, r, tc.key, opts)
		case err != nil:
			return nil, errorf("twopc: reverse %s: %w", id.Hex(), err)
		}
		return c.reverseAgain(ctx, r, prior, tc.key, opts)
	}
	for n := 1; n <= maxReverseAttempts; n++ {
		key := "reverse:" + id.Hex()
		if n > 1 {
			key = fmt.Sprintf("%s:%d", key, n)
		}
		prior, err := c.log.read(ctx, keyID(key))
		switch {
		case errors.Is(err, ErrTxnNotFound):
			return c.reverse(ctx, r, key, opts)
		case err != nil:
			return nil, errorf("twopc: reverse %s: %w", id.Hex(), err)
		case prior.State == StateCanceled:
			continue // that attempt failed: the next key is a new attempt
		}
		return c.reverseAgain(ctx, r, prior, key, opts)
	}
	return nil, errorf("twopc: reverse %s: %d attempts were canceled", id.Hex(), maxReverseAttempts)
}

// reverse makes the reversal of r under key, no transaction made under it
// yet: with what it moves reserved in r's refund book (its base, what r
// moved: see wholeBase), as the refund of all of it, whose legs the book
// gives (every leg whole, when nothing was refunded; otherwise it is
// ErrRefundExceeded). A hold still held is refused (ErrNotRefundable):
// what its captures took is not whole while more may be captured.
func (c *Coordinator) reverse(ctx context.Context, r *record, key string, opts []TransferOption) (*Txn, error) {
	if r.State == StateHeld {
		return nil, errorf("twopc: reverse %s: %w: it is a hold, still held: a reversal returns all its captures took, and more may be captured; void it (or let its last capture end it) and reverse it then, or refund what its captures took so far with Refund or RefundLegs", r.ID.Hex(), ErrNotRefundable)
	}
	// What it moved is reserved in its refund book (see Refund): a
	// transfer refunded in part cannot be reversed whole, and one of
	// several assets, whole or not at all, is reversed once.
	base, err := wholeBase(r)
	if err != nil {
		return nil, err
	}
	return c.refund(ctx, r, base, base, key, true, opts)
}

// reverseAgain answers a Reverse of r under key, which made prior: a
// refund of r is answered as it stands (the refund the key made, its own
// legs, never computed again from r's base, which for a hold's order may
// have grown since; ErrKeyConflict if the call's metadata is not its);
// anything else (a placeholder, another transfer's) as a refund under the
// key answers it (canceled; ErrKeyConflict).
func (c *Coordinator) reverseAgain(ctx context.Context, r, prior *record, key string, opts []TransferOption) (*Txn, error) {
	if prior.Placeholder || prior.RefundOf != r.ID {
		base, err := wholeBase(r)
		if err != nil {
			return nil, err
		}
		return c.refund(ctx, r, base, base, key, true, opts)
	}
	t := Txn{Source: prior.Source, Destination: prior.Destination, Value: prior.Value, Asset: prior.Asset}
	if len(prior.Legs) > 0 {
		var err error
		if t, err = c.legsTxn(prior.txn().AllLegs()); err != nil {
			return nil, err
		}
	}
	t.RefundOf = r.ID
	return c.startKeyed(ctx, t, key, opts, nil)
}

// wholeBase is what committed transfer r credited, by its settled legs,
// whatever their assets: the base of its refund book. For a transfer of
// one asset it is what it moved (refundBase); for one of several, a sum
// of amounts of different assets that only a refund of all of it (the
// reversal: every leg whole) ever reserves, so the book is whole or
// nothing, and reversed once whatever keys ask.
// Credits of several assets past MaxInt64 in all are ErrInvalidTransfer.
func wholeBase(r *record) (int64, error) {
	var base int64
	for _, l := range r.txn().SettledLegs() {
		if l.Amount > 0 {
			if base > math.MaxInt64-l.Amount {
				return 0, errorf("%w: reverse %s: its credits, of several assets, sum past MaxInt64: reverse it by TransferLegs", ErrInvalidTransfer, r.ID.Hex())
			}
			base += l.Amount
		}
	}
	return base, nil
}

// refundAmount is what refund t reserved in its transfer's book: what it
// credits, whatever its assets (see wholeBase); for a refund of one asset,
// its Value.
func refundAmount(t *Txn) int64 {
	var amount int64
	for _, l := range t.AllLegs() {
		if l.Amount > 0 {
			amount += l.Amount
		}
	}
	return amount
}

// startKeyed makes t, a transfer the library built (its asset, if any,
// given as WithAsset), under key, with the caller's opts; prepare (if
// not nil) is given its record first (see startWith).
func (c *Coordinator) startKeyed(ctx context.Context, t Txn, key string, opts []TransferOption, prepare func(*record)) (*Txn, error) {
	opts = append(slices.Clone(opts), WithKey(key))
	if t.Asset != "" {
		opts = append([]TransferOption{WithAsset(t.Asset)}, opts...)
		t.Asset = ""
	}
	return c.startWith(ctx, t, opts, prepare)
}

// maxReverseAttempts bounds the reversals of one transfer that Reverse
// tries after earlier ones were canceled.
const maxReverseAttempts = 100
