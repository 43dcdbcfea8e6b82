package twopc

import (
	"context"
	"fmt"
	"math"

	"github.com/twopc/twopc/internal/schema"
)

// MaxLegs is the most legs one transfer may have. It keeps every write of
// a transfer's legs one small command (see WithWriteBatch).
const MaxLegs = 32

// TransferLegs moves money between any number of accounts at once: a
// payment split with a fee account, a payout to several accounts. The
// amounts must sum to zero; every leg applies or none remains, with the
// guarantees and errors of Transfer (which is the two-leg case: Transfer(a,
// b, v) is TransferLegs({a, -v}, {b, v})). Legs are applied in one write
// command, so the transfer still reaches its commit point in three round
// trips.
//
// It returns ErrInvalidTransfer, and writes nothing, for fewer than two or
// more than MaxLegs legs, an amount of zero or MinInt64, amounts that do
// not sum to zero (or whose debits or credits overflow int64), the same
// account in two legs (as the server sees ids: see Transfer), any id
// Transfer refuses, and a ledger the coordinator was not given (the error
// also matches ErrUnknownLedger).
//
// Errors: Transfer's, with ErrUnknownLedger: ErrInvalidTransfer (with
// ErrInvalidAccountID for an id, ErrUnknownLedger for a ledger; a leg
// above WithMaxAmount), ErrAccountNotFound, ErrAssetMismatch (an asset
// the accounts do not hold, as last read), ErrShardKey or ErrClosed,
// nothing written;
// ErrInsufficientFunds, ErrLimitExceeded, ErrAssetMismatch,
// ErrAccountNotFound, ErrBalanceOverflow, ErrInvalidAccount or ErrTooLate,
// the transaction canceled, nothing moved; ErrCanceled, ErrInProgress,
// ErrKeyConflict; ErrUnknownState, ErrMalformedTxn or ErrTxnNotFound for a
// transaction document edited or deleted by hand.
func (c *Coordinator) TransferLegs(ctx context.Context, legs []Leg, opts ...TransferOption) (*Txn, error) {
	t, err := c.legsTxn(legs)
	if err != nil {
		return nil, err
	}
	return c.start(ctx, t, opts)
}

// legsTxn validates legs, and returns the transfer they make.
func (c *Coordinator) legsTxn(legs []Leg) (Txn, error) {
	credited, err := validateLegs(legs)
	if err != nil {
		return Txn{}, err
	}
	for i, l := range legs {
		if _, err := c.ledgers.get(l.Ledger); err != nil {
			return Txn{}, errorf("%w: leg %d: %w", ErrInvalidTransfer, i, err)
		}
	}
	return Txn{Legs: append([]Leg(nil), legs...), Value: credited}, nil
}

// legKey is the canonical form of account id of ledger: two legs are on
// one account when their keys are equal.
func legKey(ledger string, id any) string {
	key, _ := schema.IDKey(id)
	return ledger + "\x00" + key
}

// validateLegs checks TransferLegs' input before anything is written, and
// returns the total credited.
func validateLegs(legs []Leg) (int64, error) {
	if len(legs) < 2 || len(legs) > MaxLegs {
		return 0, errorf("%w: %d legs; want 2 to %d", ErrInvalidTransfer, len(legs), MaxLegs)
	}
	seen := map[string]int{}
	type sums struct{ debits, credits int64 }
	perAsset := map[string]*sums{}
	var assets []string // in the order of their first leg
	for i, l := range legs {
		if err := validateAccountID(fmt.Sprintf("leg %d", i), l.Account); err != nil {
			return 0, errorf("%w: %w", ErrInvalidTransfer, err)
		}
		if l.Asset != "" {
			if err := schema.ValidAsset(l.Asset); err != nil {
				return 0, errorf("%w: leg %d: %w", ErrInvalidTransfer, i, err)
			}
		}
		s := perAsset[l.Asset]
		if s == nil {
			s = &sums{}
			perAsset[l.Asset] = s
			assets = append(assets, l.Asset)
		}
		switch {
		case l.Amount == 0:
			return 0, errorf("%w: leg %d has an amount of zero", ErrInvalidTransfer, i)
		case l.Amount == math.MinInt64:
			return 0, errorf("%w: leg %d has an amount of MinInt64", ErrInvalidTransfer, i)
		case l.Amount < 0 && s.debits < math.MinInt64-l.Amount, l.Amount > 0 && s.credits > math.MaxInt64-l.Amount:
			return 0, errorf("%w: the amounts overflow int64 at leg %d", ErrInvalidTransfer, i)
		case l.Amount < 0:
			s.debits += l.Amount
		default:
			s.credits += l.Amount
		}
		key := legKey(l.Ledger, l.Account)
		if j, ok := seen[key]; ok {
			return 0, errorf("%w: legs %d and %d are the same account %v", ErrInvalidTransfer, j, i, l.Account)
		}
		seen[key] = i
	}
	for _, a := range assets {
		if s := perAsset[a]; s.debits+s.credits != 0 {
			if len(assets) == 1 {
				return 0, errorf("%w: the amounts sum to %d, not zero", ErrInvalidTransfer, s.debits+s.credits)
			}
			return 0, errorf("%w: the amounts of %s sum to %d, not zero (every asset's must)", ErrInvalidTransfer, assetLabel(a), s.debits+s.credits)
		}
	}
	// Value: what the first leg's asset credits (the total credited, for
	// a transfer of one asset).
	return perAsset[assets[0]].credits, nil
}
