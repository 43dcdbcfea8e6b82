package twopc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Audit checks, on a live system and without stopping it, the invariants
// the protocol keeps, over the transactions collection and every ledger's
// accounts:
//
//   - every marker of a leg in flight on an account names a transaction
//     that exists and is not final (ViolationOrphanMarker); a marker seen
//     with a final transaction is read again, at majority, before it is
//     reported, so a transfer that settled during the audit is not one;
//   - no unfinished transaction has been left untouched past its recorded
//     lease plus the grace (ViolationStale);
//   - an account holds a pending credit or a held debit only while a leg
//     is in flight on it (ViolationHeldWithoutMarker);
//   - every account's marker arrays are within their bounds
//     (ViolationMarkerBound), and every account and transaction has the
//     shape the protocol writes (ViolationMalformed);
//   - every held hold has each leg's marker on its account, and each
//     account holds at least its held holds' debits in pendingDebit and
//     credits in pendingCredit (ViolationHoldNotOnAccount);
//   - optionally, each ledger holds the total the caller states
//     (ViolationTotal, WithExpectedTotal).
//
// Two reads are never one snapshot: a check that compares documents read
// apart (a marker with its transaction, a hold with its accounts) reports
// only what a second look, read in the order that cannot mislead, finds
// again, so a transfer settling or a hold captured or voided during the
// audit is not reported. A total is decided only if no transaction was
// in flight or written while the accounts were read.
//
// It reads at majority, in batches, and writes nothing. The error is for
// an audit that could not read; what it found is in the report (see
// AuditReport.Err).
func (c *Coordinator) Audit(ctx context.Context, opts ...AuditOption) (*AuditReport, error) {
	cfg := auditConfig{batch: DefaultAuditBatch, pendingBound: DefaultPendingBound, fencedBound: DefaultFencedBound,
		grace: DefaultInterval, totals: map[totalKey]int64{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for _, k := range cfg.totalsOrdered {
		if _, err := c.Ledger(k.ledger); err != nil {
			return nil, errorf("twopc: audit: %w", err)
		}
	}
	now, err := c.log.serverNow(ctx)
	if err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	rep := &AuditReport{Started: now, Transactions: map[State]int{}, Accounts: map[string]int{}, Tombstones: map[string]int{}}
	au := &audit{c: c, cfg: cfg, rep: rep}
	if err := au.transactions(ctx); err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	if err := au.holds(ctx); err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	inFlight := rep.Unfinished > 0
	sums := map[totalKey]int64{}
	for _, name := range c.ledgerNames() {
		sum, perAsset, err := au.ledger(ctx, c.ledgers[name])
		if err != nil {
			return nil, errorf("twopc: audit: ledger %q: %w", name, err)
		}
		sums[totalKey{ledger: name}] = sum
		for asset, s := range perAsset {
			sums[totalKey{ledger: name, asset: asset, byAsset: true}] = s
		}
	}
	if len(cfg.totals) > 0 && !inFlight {
		// Nothing was in flight at the start. Was anything by the end, or
		// did a transfer run from start to end while the accounts were
		// read? Either way it was written since the audit began.
		n, err := c.log.txns.CountDocuments(ctx, bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldState, Value: bson.D{{Key: "$in", Value: unfinishedStates}}}},
			bson.D{{Key: fieldLastModified, Value: bson.D{{Key: "$gte", Value: rep.Started}}}},
		}}})
		if err != nil {
			return nil, errorf("twopc: audit: %w", err)
		}
		inFlight = n > 0
	}
	for _, k := range cfg.totalsOrdered {
		tc := TotalCheck{Ledger: k.ledger, Asset: k.asset, ByAsset: k.byAsset, Expected: cfg.totals[k], Actual: sums[k], Decided: !inFlight}
		tc.OK = tc.Actual == tc.Expected
		if tc.Decided && !tc.OK {
			of := "the accounts"
			if k.byAsset {
				of = "the accounts of " + assetLabel(k.asset)
			}
			rep.add(Violation{Kind: ViolationTotal, Ledger: k.ledger,
				Detail: fmt.Sprintf("%s hold %d, want %d (%+d)", of, tc.Actual, tc.Expected, tc.Actual-tc.Expected)})
		}
		rep.Totals = append(rep.Totals, tc)
	}
	if rep.Finished, err = c.log.serverNow(ctx); err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	return rep, nil
}

// ledgerNames returns the coordinator's ledgers, the default first, then
// in the order they were given.
func (c *config) ledgerNames() []string {
	names := []string{""}
	for _, spec := range c.ledgers {
		names = append(names, spec.name)
	}
	return names
}

// audit is one Audit call's state: the coordinator it reads, its options,
// and the report it fills in.
type audit struct {
	c   *Coordinator
	cfg auditConfig
	rep *AuditReport
}

// unfinishedStates are the states of transactions under way, each within
// its lease. A held hold is not among them: it waits for its caller as long
// as the caller likes, and moves no ledger's total while it does (a debit
// is held in pendingDebit, which the totals count).
var unfinishedStates = bson.A{StateInitial, StatePending, StateApplied, StateCanceling}

// transactions counts the transactions by state and checks every
// unfinished one against its lease, reading them in batches.
func (au *audit) transactions(ctx context.Context) error {
	c, cfg, rep := au.c, &au.cfg, au.rep
	for _, s := range []State{StateInitial, StatePending, StateApplied, StateDone, StateCanceling, StateCanceled, StateHeld} {
		n, err := c.log.txns.CountDocuments(ctx, bson.D{{Key: fieldState, Value: s}})
		if err != nil {
			return err
		}
		rep.Transactions[s] = int(n)
	}
	cur, err := c.log.txns.Find(ctx, bson.D{{Key: fieldState, Value: bson.D{{Key: "$in", Value: unfinishedStates}}}},
		options.Find().SetSort(bson.D{{Key: fieldLastModified, Value: 1}}).SetBatchSize(int32(cfg.batch)))
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		rep.Unfinished++
		var r record
		if err := cur.Decode(&r); err != nil {
			rep.add(Violation{Kind: ViolationMalformed, Detail: fmt.Sprintf("transaction %v: %v", cur.Current.Lookup("_id"), err)})
			continue
		}
		if err := r.check(); err != nil {
			rep.add(Violation{Kind: ViolationMalformed, Txn: r.ID, Detail: err.Error()})
			continue
		}
		age := rep.Started.Sub(r.LastModified)
		if rep.Unfinished == 1 {
			rep.OldestUnfinished = max(age, 0)
		}
		if limit := r.lease(c.staleAfter) + cfg.grace; age > limit {
			rep.add(Violation{Kind: ViolationStale, Txn: r.ID, Detail: fmt.Sprintf("%s, untouched for %v, past its lease and grace of %v (application %q)",
				r.State, age.Round(time.Millisecond), limit, r.Application)})
		}
	}
	return cur.Err()
}

// auditLedger checks the accounts of l in batches and returns the sum of
// their balances and held debits.
func (au *audit) ledger(ctx context.Context, l *Ledger) (int64, map[string]int64, error) {
	cfg, rep := &au.cfg, au.rep
	cur, err := l.accounts.Find(ctx, bson.D{},
		options.Find().SetProjection(accountProjection).SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(cfg.batch)))
	if err != nil {
		return 0, nil, err
	}
	defer cur.Close(ctx)
	var sum int64
	perAsset := map[string]int64{}
	overflow := false
	batch := make([]*account, 0, cfg.batch)
	flush := func() error {
		err := au.markers(ctx, l, batch)
		batch = batch[:0]
		return err
	}
	for cur.Next(ctx) {
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

// auditMarkers checks that every marker on accts names a transaction that
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

// holds checks every hold in StateHeld against its accounts, in batches:
// each leg's marker is on its account, and each account holds at least
// the held debits in pendingDebit and the held credits in pendingCredit
// (more when transfers are in flight there too). A hold found wanting is
// read again: one captured or voided since is not a violation.
func (au *audit) holds(ctx context.Context) error {
	c, cfg, rep := au.c, &au.cfg, au.rep
	cur, err := c.log.txns.Find(ctx, bson.D{{Key: fieldState, Value: StateHeld}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(cfg.batch)))
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	batch := make([]*record, 0, cfg.batch)
	for cur.Next(ctx) {
		var r record
		if err := cur.Decode(&r); err != nil || r.check() != nil {
			continue // reported as malformed by the markers' check, if it has any
		}
		rep.Held++
		rep.HeldValue += r.Value
		if batch = append(batch, &r); len(batch) == cfg.batch {
			if err := au.holdsOnAccounts(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := cur.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return au.holdsOnAccounts(ctx, batch)
	}
	return nil
}

// holdsOnAccounts checks held holds recs against their accounts (see
// holds). The holds were read before their accounts, and a hold captured
// or voided between the two reads takes its amount and marker off its
// account: the holds that share an account with one found wanting are
// looked at again, their accounts first, then the holds themselves, and
// only what that second look finds is reported. A hold still held then
// was held when its account was read again (held is never entered twice),
// so its legs were on the account: what is missing there is a violation.
func (au *audit) holdsOnAccounts(ctx context.Context, recs []*record) error {
	wants := holdWants(recs)
	found, err := au.holdAccounts(ctx, wants)
	if err != nil {
		return err
	}
	suspects := wants.wanting(found)
	if len(suspects) == 0 {
		return nil
	}
	// The second look, at every hold sharing an account with a suspect
	// (the sums on that account are theirs): the accounts first, then the
	// holds.
	var again []*record
	seen := map[bson.ObjectID]bool{}
	for _, accounts := range wants {
		for _, w := range accounts {
			if !w.anyOf(suspects) {
				continue
			}
			for _, r := range w.holds {
				if !seen[r.ID] {
					seen[r.ID] = true
					again = append(again, r)
				}
			}
		}
	}
	fresh, err := au.holdAccounts(ctx, holdWants(again))
	if err != nil {
		return err
	}
	var held []*record
	for list := again; len(list) > 0; {
		part := list[:min(len(list), auditLookup)]
		list = list[len(part):]
		ids := make(bson.A, len(part))
		for i, r := range part {
			ids[i] = r.ID
		}
		cur, err := au.c.log.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: fieldState, Value: StateHeld}})
		if err != nil {
			return err
		}
		var now []*record
		if err := cur.All(ctx, &now); err != nil {
			return err
		}
		held = append(held, now...)
	}
	confirmed := holdWants(held).wanting(fresh)
	ids := make([]bson.ObjectID, 0, len(confirmed))
	for id := range confirmed {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b bson.ObjectID) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		au.rep.add(Violation{Kind: ViolationHoldNotOnAccount, Txn: id, Detail: "held, but " + confirmed[id]})
	}
	return nil
}

// holdWant is what the held holds of one batch want of one account: the
// sums of their debits and credits there, and each leg with its hold.
type holdWant struct {
	debit, credit int64
	legs          []leg
	holds         []*record
}

// anyOf reports whether a hold of w is among suspects.
func (w *holdWant) anyOf(suspects map[bson.ObjectID]string) bool {
	for _, r := range w.holds {
		if _, ok := suspects[r.ID]; ok {
			return true
		}
	}
	return false
}

// holdWantsByLedger is what holds want of each account, by ledger name and
// the account's canonical id.
type holdWantsByLedger map[string]map[string]*holdWant

// holdWants sums what held holds recs want of their accounts.
func holdWants(recs []*record) holdWantsByLedger {
	byLedger := holdWantsByLedger{}
	for _, r := range recs {
		for _, l := range r.legs() {
			key, err := schema.IDKey(l.account)
			if err != nil {
				continue
			}
			if byLedger[l.ledger] == nil {
				byLedger[l.ledger] = map[string]*holdWant{}
			}
			w := byLedger[l.ledger][key]
			if w == nil {
				w = &holdWant{}
				byLedger[l.ledger][key] = w
			}
			if l.debit() {
				w.debit -= l.delta
			} else {
				w.credit += l.delta
			}
			w.legs = append(w.legs, l)
			w.holds = append(w.holds, r)
		}
	}
	return byLedger
}

// holdAccounts reads the accounts wants names, by ledger and canonical id,
// from the ledgers this coordinator was given (one of another is not
// audited).
func (au *audit) holdAccounts(ctx context.Context, wants holdWantsByLedger) (map[string]map[string]*account, error) {
	out := map[string]map[string]*account{}
	for name, accounts := range wants {
		l, ok := au.c.ledgers[name]
		if !ok {
			continue
		}
		found := map[string]*account{}
		out[name] = found
		ids := make(bson.A, 0, len(accounts))
		for _, w := range accounts {
			ids = append(ids, w.legs[0].account)
		}
		for list := ids; len(list) > 0; {
			part := list[:min(len(list), auditLookup)]
			list = list[len(part):]
			cur, err := l.accounts.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: part}}}}, options.Find().SetProjection(accountProjection))
			if err != nil {
				return nil, err
			}
			var accts []*account
			if err := cur.All(ctx, &accts); err != nil {
				return nil, err
			}
			for _, a := range accts {
				if key, err := schema.IDKey(a.ID); err == nil {
					found[key] = a
				}
			}
		}
	}
	return out, nil
}

// wanting returns the holds whose accounts in found lack what they want:
// the account, the marker of the hold's leg, or the sums of the holds'
// debits and credits. Ledgers found has no entry for are not audited.
func (wants holdWantsByLedger) wanting(found map[string]map[string]*account) map[bson.ObjectID]string {
	suspects := map[bson.ObjectID]string{}
	for name, accounts := range wants {
		inLedger, ok := found[name]
		if !ok {
			continue
		}
		for key, w := range accounts {
			a := inLedger[key]
			for i, lg := range w.legs {
				switch {
				case a == nil:
					suspects[w.holds[i].ID] = fmt.Sprintf("its leg on account %v of ledger %q finds no account", lg.account, name)
				case !has(a.pending(), lg.marker):
					suspects[w.holds[i].ID] = fmt.Sprintf("account %v of ledger %q does not hold the marker %s of its leg", lg.account, name, lg.marker.Hex())
				case a.heldDebit() < w.debit || a.credit() < w.credit:
					suspects[w.holds[i].ID] = fmt.Sprintf("account %v of ledger %q holds pendingDebit %d and pendingCredit %d, less than its holds' %d and %d",
						lg.account, name, a.heldDebit(), a.credit(), w.debit, w.credit)
				}
			}
		}
	}
	return suspects
}
