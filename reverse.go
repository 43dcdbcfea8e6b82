package twopc

// Reverse: the transfer that undoes a committed one, under a key derived
// from its id.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Reverse undoes a committed transfer the way the tutorial says to: a new
// transfer that moves back what it moved (see Txn.SettledLegs): for a
// Transfer, the same value from its destination back to its source; for
// TransferLegs, every leg with its sign turned; a capture of a hold is a
// transfer of its parts, reversed so (a hold itself moves nothing, and is
// not reversed: ErrNotRefundable). Its idempotency key is derived from id
// ("reverse:<id>", then "reverse:<id>:2", ...), so reversing twice moves
// the money back once: a reversal that committed or is in progress is
// returned, and one that was canceled (say the destination lacked the
// funds then) is followed by a new attempt under the next key; a repeat
// with other metadata (WithMetadata) than the reversal's is, like any
// keyed repeat, ErrKeyConflict, with that reversal as the Txn. A key given
// in opts is used as it is. The reversal is a transfer of its own, with
// Transfer's errors (ErrInsufficientFunds if the destination cannot cover
// it now, ...). An id that names no transaction gives ErrTxnNotFound; a
// transaction not applied or done, ErrNotRefundable, saying what to do
// instead (a pending one is finished first, a held hold voided, a
// canceled one moved nothing), and nothing is written. What it moves is
// reserved in the transfer's refund book (see Refund): a transfer
// refunded in part is not reversed whole (ErrRefundExceeded). The whole
// call, its reads and the reversal, is bounded as Transfer is
// (WithCallTimeout).
//
// Errors: with nothing written, ErrInvalidTransfer (a key or metadata
// Transfer refuses, a WithAsset other than the assets it moved, a leg on a
// ledger this coordinator was not given: with ErrUnknownLedger),
// ErrTxnNotFound, ErrNotRefundable (see there), ErrRefundExceeded
// (refunded in part already), ErrKeyConflict, ErrShardKey and ErrClosed;
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
	t, err := c.reverseTxn(r)
	if err != nil {
		return nil, err
	}
	// What it moved is reserved in its refund book (see Refund): a
	// transfer refunded in part cannot be reversed whole. One of several
	// assets, which Refund refuses, has no book.
	base, err := refundBase(r)
	if err != nil {
		base = -1
	}
	if tc.keyed {
		return c.reverse(ctx, r, t, base, tc.key, opts)
	}
	for n := 1; n <= maxReverseAttempts; n++ {
		key := "reverse:" + id.Hex()
		if n > 1 {
			key = fmt.Sprintf("%s:%d", key, n)
		}
		prior, err := c.log.read(ctx, keyID(key))
		switch {
		case errors.Is(err, ErrTxnNotFound):
		case err != nil:
			return nil, errorf("twopc: reverse %s: %w", id.Hex(), err)
		case prior.State == StateCanceled:
			continue // that attempt failed: the next key is a new attempt
		}
		return c.reverse(ctx, r, t, base, key, opts)
	}
	return nil, errorf("twopc: reverse %s: %d attempts were canceled", id.Hex(), maxReverseAttempts)
}

// reverseTxn is the transfer that undoes committed transfer r: what it
// moved (a capture of a hold is a transfer of its parts; a hold itself is
// refused before this).
func (c *Coordinator) reverseTxn(r *record) (Txn, error) {
	legs := r.txn().SettledLegs()
	if len(r.Legs) == 0 {
		return Txn{Source: r.Destination, Destination: r.Source, Value: legs[1].Amount, Asset: r.Asset, RefundOf: r.ID}, nil
	}
	for i := range legs {
		legs[i].Amount = -legs[i].Amount
	}
	t, err := c.legsTxn(legs)
	t.RefundOf = r.ID
	return t, err
}

// reverse makes t, the reversal of r, under key: with what it moves
// reserved in r's refund book (base, what r moved; -1: no book), as the
// refund of all of base, whose legs the book gives (t's, when nothing
// was refunded; otherwise it is ErrRefundExceeded).
func (c *Coordinator) reverse(ctx context.Context, r *record, t Txn, base int64, key string, opts []TransferOption) (*Txn, error) {
	if base < 0 {
		return c.startKeyed(ctx, t, key, opts, nil)
	}
	return c.refund(ctx, r, base, base, key, true, opts)
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
