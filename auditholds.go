package twopc

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The audit's check of the holds held: each one's legs on their accounts
// (the call is in audit.go).

// holds checks every hold in StateHeld against its accounts, in batches:
// each leg's marker is on its account, and each account holds at least
// the held debits in pendingDebit and the held credits in pendingCredit,
// less what the hold's captures reserved (more when transfers or captures
// are in flight there too). A hold found wanting is
// read again: one captured or voided since is not a violation.
func (au *audit) holds(ctx context.Context) error {
	c, cfg, rep := au.c, &au.cfg, au.rep
	cur, err := roundTrip(ctx, au.b, func(ctx context.Context) (*mongo.Cursor, error) {
		return c.log.txns.Find(ctx, bson.D{{Key: fieldState, Value: StateHeld}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(cfg.batch)))
	})
	if err != nil {
		return err
	}
	defer au.b.close(ctx, cur)
	batch := make([]*record, 0, cfg.batch)
	// onAccounts checks a batch of holds against their accounts, a round
	// trip (see roundTrip) of the audit.
	onAccounts := func() error {
		return au.b.trip(ctx, func(ctx context.Context) error { return au.holdsOnAccounts(ctx, batch) })
	}
	for au.b.next(ctx, cur) {
		var r record
		if err := cur.Decode(&r); err != nil || r.check() != nil {
			continue // reported as malformed by the markers' check, if it has any
		}
		rep.Held++
		rep.HeldValue += r.Value
		if batch = append(batch, &r); len(batch) == cfg.batch {
			if err := onAccounts(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := cur.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return onAccounts()
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
			// What its captures reserved may have left the account
			// already (a capture closed there): what no capture took is
			// there for sure (see PROTOCOL.md, Holds).
			rest := max(l.delta, -l.delta) - l.taken
			if l.debit() {
				w.debit += rest
			} else {
				w.credit += rest
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
