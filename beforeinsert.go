package twopc

// What a call can know before its insert is checked before its insert, and
// leaves its key free: an amount above the coordinator's ceiling
// (WithMaxAmount), and the assets of the accounts its legs name, as the
// ledger last read or wrote them (see accountKinds). A leg that names no
// asset takes its account's; one that names another is refused. The leg
// writes still carry the asset clause, so an account changed since is
// refused by the server, after the insert, as before.

import (
	"context"
	"math"
)

// refuseAbove answers, writing nothing, each transfer of ts with a leg
// whose amount is above the coordinator's ceiling (WithMaxAmount).
func (e *engine) refuseAbove(ctx context.Context, ts []*transfer) {
	ceiling := e.c.maxAmount
	if ceiling <= 0 {
		return
	}
	for _, t := range ts {
		if t.over {
			continue
		}
		for i, l := range t.rec.AllLegs() {
			if a := l.Amount; a > ceiling || a < -ceiling || a == math.MinInt64 {
				e.refuse(ctx, t, errorf("%w: leg %d (%v) moves %d, above WithMaxAmount's %d", ErrInvalidTransfer, i, l.Account, a, ceiling))
				break
			}
		}
	}
}

// fitAssets gives each leg of ts that names no asset its account's, and
// answers, writing nothing, each transfer with a leg whose account holds
// another asset than it names (ErrAssetMismatch) or whose legs, once
// given their accounts' assets, do not balance in each asset. Accounts
// whose asset the ledger has not seen (a ledger the coordinator lacks, an
// asset field of another type) are left to the server's guards. A
// transfer of two legs takes an asset only when both accounts hold it.
//
// A refusal is made only by what a read of this call found: a transfer
// judged by assets the ledger remembered from before has its accounts'
// assets read again (with the existence read, refuseMissing) and is judged
// once more, so an account whose asset changed since it was seen does not
// refuse a transfer that fits it now.
func (e *engine) fitAssets(ctx context.Context, ts []*transfer) {
	var again []*transfer
	for _, t := range ts {
		if !t.over && e.c.fitAssetsOf(t.rec) != nil {
			e.c.forgetAssets(t.rec)
			again = append(again, t)
		}
	}
	e.refuseMissing(ctx, again)
	for _, t := range again {
		if t.over {
			continue
		}
		if why := e.c.fitAssetsOf(t.rec); why != nil {
			e.refuse(ctx, t, why)
		}
	}
}

// forgetAssets makes the assets of r's accounts to be read again.
func (c *Coordinator) forgetAssets(r *record) {
	for _, lg := range r.AllLegs() {
		if l, key, ok := c.ledgers.kindsOf(lg.Ledger, lg.Account); ok {
			l.kinds.forgetAsset(key)
		}
	}
}

// fitAssetsOf is fitAssets for one transaction r, which it changes: nil,
// or why r cannot be made.
func (c *Coordinator) fitAssetsOf(r *record) error {
	legs := r.AllLegs()
	changed := false
	for i, lg := range legs {
		l, key, ok := c.ledgers.kindsOf(lg.Ledger, lg.Account)
		if !ok {
			continue
		}
		held, ok := l.kinds.assetOf(key)
		switch {
		case !ok || held == lg.Asset:
		case lg.Asset == "":
			legs[i].Asset, changed = held, true
		default:
			return errorf("%w: account %v%s holds %s, leg %d moves %s", ErrAssetMismatch, lg.Account, ledgerLabel(lg.Ledger), assetLabel(held), i, assetLabel(lg.Asset))
		}
	}
	if !changed {
		return nil
	}
	if len(r.Legs) == 0 {
		if legs[0].Asset != legs[1].Asset {
			return errorf("%w: account %v holds %s, account %v holds %s", ErrAssetMismatch, r.Source, assetLabel(legs[0].Asset), r.Destination, assetLabel(legs[1].Asset))
		}
		r.Asset = legs[0].Asset
		return nil
	}
	credited, err := validateLegs(legs)
	if err != nil {
		return errorf("%w: with each leg in its account's asset, %v", ErrAssetMismatch, err)
	}
	r.Legs, r.Value = legs, credited
	return nil
}
