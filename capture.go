package twopc

// Captures: a hold captured in parts, per leg, several times, each capture
// a transaction of its own reserved first in the hold's book (PROTOCOL.md,
// Holds).

import (
	"context"
	"errors"
	"math"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ErrCaptureExceeded reports a capture of more of a hold's leg than is
// left of it: more than the leg holds at all (a Capture of more than the
// hold's Value, a CaptureLegs part past its leg), refused before the
// hold's book is read, or more than what its captures made or in flight
// left of it; or a capture past MaxCaptures. Nothing is written (the call
// may first have given back the reservations of captures that can no
// longer move money).
var ErrCaptureExceeded = errors.New("twopc: capture exceeds what is left of the hold")

// MaxCaptures bounds the captures of one hold made or in flight: the
// hold's book holds at most this many.
const MaxCaptures = 100

// WithFinalCapture says whether a capture is the hold's last (true, the
// default): the rest of the hold is released once it commits, and no
// capture is reserved after it. With false, the rest stays held for more
// captures, until the hold is captured whole, voided or expires.
func WithFinalCapture(final bool) TransferOption {
	return func(tc *transferConfig) { tc.notFinal = !final }
}

// Capture captures amount of held hold id: for a hold of two legs, amount
// from its source to its destination, any amount up to what is left of it;
// for a hold of more legs, amount must be its Value and no capture made
// yet: it is captured whole (CaptureLegs takes a part of each leg). See
// CaptureLegs.
//
// Errors: CaptureLegs', where an amount past what is left of the hold,
// or more than its Value, is ErrCaptureExceeded, and one not positive,
// or not the Value of a hold of more than two legs, ErrInvalidTransfer.
func (c *Coordinator) Capture(ctx context.Context, id bson.ObjectID, amount int64, opts ...TransferOption) (_ *Txn, err error) {
	if amount <= 0 {
		return nil, errorf("%w: capture %s of %d: not positive", ErrInvalidTransfer, id.Hex(), amount)
	}
	return c.capture(ctx, id, func(r *record) ([]int64, error) {
		legs := r.AllLegs()
		parts := make([]int64, len(legs))
		switch {
		case amount > r.Value:
			return nil, errorf("%w: capture %s of %d: more than the %d held", ErrCaptureExceeded, id.Hex(), amount, r.Value)
		case len(legs) > 2 && amount != r.Value:
			return nil, errorf("%w: capture %s of %d: a hold of %d legs is captured whole (%d) by Capture; CaptureLegs takes a part of each leg",
				ErrInvalidTransfer, id.Hex(), amount, len(legs), r.Value)
		case len(legs) > 2:
			for i, l := range legs {
				parts[i] = l.Amount
			}
		default:
			for i, l := range legs {
				parts[i] = amount
				if l.Amount < 0 {
					parts[i] = -amount
				}
			}
		}
		return parts, nil
	}, opts)
}

// CaptureLegs captures a part of each leg of held hold id: amounts[i] of
// its leg i (AllLegs' order), of that leg's sign, at most what is left of
// it, 0 for none; the parts sum to zero per asset. The capture is a
// transaction of its own (its Txn.CaptureOf names the hold), with its own
// legs (the parts), entries, key and metadata (WithKey: a repeat returns
// the capture made under the key; WithMetadata), and it moves money once,
// however often any of its writes is delivered: each is guarded by its
// own markers and fences, never by the hold's alone.
//
// Before the capture's insert, one guarded write reserves its parts in the
// hold's book (the hold still held, no final capture reserved, the
// capture's id not there yet, each leg's part within what is left), so
// captures at once never take more of a leg than it holds: one past that
// is ErrCaptureExceeded, and writes nothing. A capture that ends canceled
// gives its reservation back. By default a capture is the hold's last
// (WithFinalCapture): once it commits, the hold ends (StateApplied, then
// StateDone) and the rest returns to the debited accounts; with
// WithFinalCapture(false) the rest stays held for more captures, and the
// hold ends when it is captured whole, voided or expired.
//
// It returns the capture, committed (applied, settling in the background
// unless WithSyncSettle; its credits are spendable at once), or with the
// error that refused it; a hold past its expiry by the server's clock is
// voided by the call. Capture is bounded as Transfer is (WithCallTimeout).
//
// Errors: with nothing written, ErrInvalidTransfer (parts not of their
// legs' signs, all 0, or not summing to zero per asset; a key or metadata
// Transfer refuses), ErrCaptureExceeded (a part past what is left of its
// leg, or past the leg itself), ErrTxnNotFound, ErrNotHold, ErrKeyConflict
// (a key of another transaction, or reserved for other parts), ErrShardKey
// and ErrClosed; the hold decided otherwise, ErrHoldCaptured (ended by its
// captures, or its final capture made or in flight), ErrHoldVoided,
// ErrHoldExpired, or for one canceled before it was held the error that
// canceled it (one of Hold's: ErrCanceled, ErrInsufficientFunds, ...);
// ErrInProgress for a hold not yet held, or a capture under the key still
// running elsewhere; the capture itself canceled, its reservation given
// back, ErrAccountNotFound, ErrAssetMismatch, ErrInvalidAccount (an
// account that no longer holds its part of the hold), ErrTooLate or
// ErrCanceled; ErrUnknownLedger for a hold with a leg on a ledger this
// coordinator was not given; ErrUnknownState or ErrMalformedTxn for a
// document edited by hand.
func (c *Coordinator) CaptureLegs(ctx context.Context, id bson.ObjectID, amounts []int64, opts ...TransferOption) (*Txn, error) {
	return c.capture(ctx, id, func(r *record) ([]int64, error) {
		return captureParts(r, amounts)
	}, opts)
}

// captureParts checks amounts, CaptureLegs' parts, against hold r.
func captureParts(r *record, amounts []int64) ([]int64, error) {
	legs := r.AllLegs()
	if len(amounts) != len(legs) {
		return nil, errorf("%w: capture %s: %d amounts for a hold of %d legs", ErrInvalidTransfer, r.ID.Hex(), len(amounts), len(legs))
	}
	sums := map[string]int64{}
	some := false
	for i, a := range amounts {
		l := legs[i]
		switch {
		case a == 0:
			continue
		case (a < 0) != (l.Amount < 0):
			return nil, errorf("%w: capture %s: leg %d (%v) takes %+d, not of its sign", ErrInvalidTransfer, r.ID.Hex(), i, l, a)
		case a == math.MinInt64 || max(a, -a) > max(l.Amount, -l.Amount):
			return nil, errorf("%w: capture %s: leg %d (%v) takes %+d, more than it holds", ErrCaptureExceeded, r.ID.Hex(), i, l, a)
		}
		some = true
		sums[l.Asset] += a
	}
	if !some {
		return nil, errorf("%w: capture %s: every amount is 0", ErrInvalidTransfer, r.ID.Hex())
	}
	for asset, sum := range sums {
		if sum != 0 {
			return nil, errorf("%w: capture %s: the parts of %s sum to %+d, not 0", ErrInvalidTransfer, r.ID.Hex(), assetLabel(asset), sum)
		}
	}
	return slices.Clone(amounts), nil
}

// capture captures from hold id the parts partsOf gives for it.
func (c *Coordinator) capture(ctx context.Context, id bson.ObjectID, partsOf func(*record) ([]int64, error), opts []TransferOption) (_ *Txn, err error) {
	if c.settler.isClosed() {
		return nil, ErrClosed
	}
	ctx, b := c.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	tc, err := transferOptions(opts)
	if err != nil {
		return nil, err
	}
	h, err := c.heldOne(ctx, id, "capture")
	if err != nil {
		return h.txn(), err
	}
	parts, err := partsOf(h)
	if err != nil {
		return nil, err
	}
	key := tc.key
	if !tc.keyed {
		key = "capture:" + id.Hex() + ":" + bson.NewObjectID().Hex()
	}
	e := captureEntry{ID: keyID(key), Amounts: parts, Final: !tc.notFinal}
	prior, err := c.log.read(ctx, e.ID)
	switch {
	case err == nil && !prior.Placeholder && prior.CaptureOf != h.ID:
		return prior.txn(), errorf("%w: key %q is transaction %s, not a capture of %s", ErrKeyConflict, key, prior.ID.Hex(), h.ID.Hex())
	case err == nil:
		// A repeat: the capture made under the key, as it stands.
	case errors.Is(err, ErrTxnNotFound):
		if h.State != StateHeld {
			return h.txn(), c.resolved(h, "capture")
		}
		if expired, cur, err := c.expireIfDue(ctx, h, "capture"); err != nil {
			return cur.txn(), err
		} else if expired {
			return cur.txn(), c.resolved(cur, "capture")
		}
		if err := c.at(ctx, StepCapture, h); err != nil {
			return h.txn(), err
		}
		if cur, err := (captureBook{c}).reserve(ctx, h, e); err != nil {
			return cur.txn(), err
		}
	default:
		return nil, errorf("twopc: capture %s: %w", h.ID.Hex(), err)
	}
	t := captureTxn(h, parts)
	holdLegs := captureHoldLegs(parts)
	txn, err := c.startKeyed(ctx, t, key, opts, func(r *record) { r.HoldLegs = holdLegs })
	switch {
	case txn != nil && txn.CaptureOf != h.ID:
		// The key names another transaction (another hold's capture made
		// under it at the same time): this capture can never be made.
		(captureBook{c}).release(ctx, h.ID, e.ID)
		if err == nil {
			err = errorf("%w: key %q is transaction %s, not a capture of %s", ErrKeyConflict, key, txn.ID.Hex(), h.ID.Hex())
		}
	case txn != nil && txn.State == StateCanceled:
		(captureBook{c}).release(ctx, h.ID, e.ID)
	case txn == nil && !tc.keyed && !errors.Is(err, ErrInProgress):
		(captureBook{c}).release(ctx, h.ID, e.ID) // nothing was written under a key no other call knows
	case err == nil && txn.State.Committed():
		c.endCaptured(ctx, h.ID)
	}
	return txn, err
}

// captureTxn is the capture of parts of hold h: the parts as its legs
// (those not 0), or for a hold of two legs the tutorial's shape.
func captureTxn(h *record, parts []int64) Txn {
	legs := h.AllLegs()
	t := Txn{CaptureOf: h.ID}
	if len(h.Legs) == 0 {
		t.Source, t.Destination, t.Value, t.Asset = h.Source, h.Destination, max(parts[0], parts[1]), h.Asset
		return t
	}
	for i, p := range parts {
		if p != 0 {
			t.Legs = append(t.Legs, Leg{Ledger: legs[i].Ledger, Account: legs[i].Account, Amount: p, Asset: legs[i].Asset})
			if p > 0 && legs[i].Asset == legs[0].Asset {
				t.Value += p
			}
		}
	}
	return t
}

// captureHoldLegs is, for parts, the hold's leg each leg of the capture
// takes from.
func captureHoldLegs(parts []int64) []int {
	var out []int
	for i, p := range parts {
		if p != 0 {
			out = append(out, i)
		}
	}
	return out
}
