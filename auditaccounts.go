package twopc

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The audit's checks of every ledger's accounts: their shape, bounds,
// limits and sums, and that each marker on them names a transaction in
// flight (the call is in audit.go).

// ledger checks the accounts of l in batches and returns the sum of
// their balances and held debits.
func (au *audit) ledger(ctx context.Context, l *Ledger) (int64, map[string]int64, error) {
	cfg, rep := &au.cfg, au.rep
	cur, err := roundTrip(ctx, au.b, func(ctx context.Context) (*mongo.Cursor, error) {
		return l.accounts.Find(ctx, bson.D{},
			options.Find().SetProjection(accountProjection).SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(cfg.batch)))
	})
	if err != nil {
		return 0, nil, err
	}
	defer au.b.close(ctx, cur)
	var sum int64
	perAsset := map[string]int64{}
	overflow := false
	batch := make([]*account, 0, cfg.batch)
	flush := func() error {
		err := au.b.trip(ctx, func(ctx context.Context) error { return au.markers(ctx, l, batch) })
		batch = batch[:0]
		return err
	}
	for au.b.next(ctx, cur) {
		var a account
		if err := cur.Decode(&a); err != nil {
			rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: cur.Current.Lookup("_id"), Detail: err.Error()})
			continue
		}
		if a.Tombstone {
			rep.Tombstones[l.name]++
		} else {
			rep.Accounts[l.name]++
		}
		id := rawID(a.ID)
		pending, fenced := a.pending(), len(a.fences())
		rep.Markers += len(pending)
		rep.Fences += fenced
		for _, f := range []struct {
			name string
			raw  bson.RawValue
		}{{fieldPending, a.PendingIDs}, {fieldFencedLegs, a.Fences}} {
			if _, ok := f.raw.ArrayOK(); f.raw.Type != 0 && !ok {
				rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: id, Detail: fmt.Sprintf("%s is a %s, not an array", f.name, f.raw.Type)})
			}
		}
		if len(pending) == 0 && (a.credit() != 0 || a.heldDebit() != 0) {
			rep.add(Violation{Kind: ViolationHeldWithoutMarker, Ledger: l.name, Account: id,
				Detail: fmt.Sprintf("pendingCredit %d and pendingDebit %d with no leg in flight", a.credit(), a.heldDebit())})
		}
		if len(pending) > cfg.pendingBound || fenced > cfg.fencedBound {
			rep.add(Violation{Kind: ViolationMarkerBound, Ledger: l.name, Account: id,
				Detail: fmt.Sprintf("%d markers of legs in flight (bound %d), %d fences (bound %d)", len(pending), cfg.pendingBound, fenced, cfg.fencedBound)})
		}
		if !a.Tombstone {
			b, ok := a.balance()
			asset, assetOK := a.assetOf()
			if !assetOK {
				rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: id, Detail: "its asset is " + assetName(a.Asset)})
			}
			if !ok {
				rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: id, Detail: fmt.Sprintf("balance is a %s, not an integer", a.Balance.Type)})
			} else if !overflow {
				// An account whose asset is malformed counts in its
				// ledger's total, in no asset's.
				s := perAsset[asset]
				for _, x := range []int64{b, a.heldDebit()} {
					if (x > 0 && (sum > math.MaxInt64-x || s > math.MaxInt64-x)) || (x < 0 && (sum < math.MinInt64-x || s < math.MinInt64-x)) {
						overflow = true
					}
					sum += x
					s += x
				}
				if assetOK {
					perAsset[asset] = s
				}
			}
			if ok && a.limited() {
				au.limits(l, id, &a, b)
			}
		}
		if len(pending) > 0 {
			acct := a
			if batch = append(batch, &acct); len(batch) == cfg.batch {
				if err := flush(); err != nil {
					return 0, nil, err
				}
			}
		}
	}
	if err := cur.Err(); err != nil {
		return 0, nil, err
	}
	if len(batch) > 0 {
		if err := flush(); err != nil {
			return 0, nil, err
		}
	}
	if overflow {
		rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Detail: "the sum of the ledger's balances is outside int64"})
	}
	return sum, perAsset, nil
}

// limits checks account a with limits, whose balance is b: its rooms are
// what its balance, sums in flight and limits make them, and it is within
// its limits. One document, read at once: no second look is needed.
func (au *audit) limits(l *Ledger, id any, a *account, b int64) {
	rep := au.rep
	lim, ok := a.limits()
	floorRoom, ceilingRoom, rok := a.rooms()
	if !ok || !rok {
		rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: id,
			Detail: fmt.Sprintf("limits of BSON types floor %s, ceiling %s, floorRoom %s, ceilingRoom %s", a.Floor.Type, a.Ceiling.Type, a.FloorRoom.Type, a.CeilingRoom.Type)})
		return
	}
	wantFloor, wantCeiling, fits := lim.rooms(b, a.heldDebit(), a.credit())
	if !fits || floorRoom != wantFloor || ceilingRoom != wantCeiling {
		rep.add(Violation{Kind: ViolationRooms, Ledger: l.name, Account: id,
			Detail: fmt.Sprintf("floorRoom %d and ceilingRoom %d, but balance %d, pendingDebit %d, pendingCredit %d, floor %d and ceiling %d make them %d and %d (a hand edit?)",
				floorRoom, ceilingRoom, b, a.heldDebit(), a.credit(), lim.floor, lim.ceiling, wantFloor, wantCeiling)})
	}
	if fits && (wantFloor < 0 || wantCeiling < 0) {
		rep.add(Violation{Kind: ViolationOutsideLimits, Ledger: l.name, Account: id,
			Detail: fmt.Sprintf("balance %d with %d in flight out and %d in, limits [%d, %d]", b, a.heldDebit(), a.credit(), lim.floor, lim.ceiling)})
	}
}

// rawID is an account's _id as a Go value, for the report.
func rawID(v bson.RawValue) any {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if n, ok := v.AsInt64OK(); ok {
		return n
	}
	return v.String()
}

// markers checks that every marker on accts names a transaction that
// exists and is not final. A marker found with a final or missing
// transaction is checked again on a fresh majority read of its account:
// the transfer may have settled or rolled back since the account was read.
func (au *audit) markers(ctx context.Context, l *Ledger, accts []*account) error {
	c, rep := au.c, au.rep
	ids := map[bson.ObjectID]bool{}
	for _, a := range accts {
		for _, m := range a.pending() {
			ids[schema.TxnOfMarker(m)] = true
		}
	}
	list := make(bson.A, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	state := map[bson.ObjectID]State{}
	// At most auditLookup ids a query: accounts near their marker bound
	// must not make one query larger than a command may be.
	for len(list) > 0 {
		part := list[:min(len(list), auditLookup)]
		list = list[len(part):]
		cur, err := c.log.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: part}}}},
			options.Find().SetProjection(bson.D{{Key: fieldState, Value: 1}}))
		if err != nil {
			return err
		}
		var found []struct {
			ID    bson.ObjectID `bson:"_id"`
			State State         `bson:"state"`
		}
		if err := cur.All(ctx, &found); err != nil {
			return err
		}
		for _, t := range found {
			state[t.ID] = t.State
		}
	}
	for _, a := range accts {
		var suspects []bson.ObjectID
		for _, m := range a.pending() {
			if s, ok := state[schema.TxnOfMarker(m)]; !ok || s.Final() {
				suspects = append(suspects, m)
			}
		}
		if len(suspects) == 0 {
			continue
		}
		var fresh account
		err := l.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: a.ID}}, options.FindOne().SetProjection(accountProjection)).Decode(&fresh)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return err
		}
		for _, m := range suspects {
			if !has(fresh.pending(), m) {
				continue // settled or undone since the first read
			}
			what := "does not exist"
			if s, ok := state[schema.TxnOfMarker(m)]; ok {
				what = "is " + string(s)
			}
			rep.add(Violation{Kind: ViolationOrphanMarker, Ledger: l.name, Account: rawID(a.ID), Txn: schema.TxnOfMarker(m),
				Detail: fmt.Sprintf("the account holds marker %s of a leg in flight, but its transaction %s", m.Hex(), what)})
		}
	}
	return nil
}
