package twopc

// Spendable on return: a debit its account refuses for funds first closes
// there the legs of committed transfers still waiting for the background
// settle, then is tried again, once. So the money a Transfer moved is
// spendable when it returns, while the settle stays off the caller's path.

import (
	"context"
	"errors"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// shortDebit is a debit leg of an apply call that its account refused for
// funds (balance or floor room), with the account as the round read it.
type shortDebit struct {
	q   *applyCall
	l   leg
	a   *account
	why error
}

// spendable reports whether the debit refused in s may be tried again
// after settleFirst: its transfer has not tried so yet, and its account
// holds markers of other transactions, some of which may be committed.
func (s shortDebit) spendable() bool {
	if s.q.o.settledFirst || !s.l.debit() || !errors.Is(s.why, ErrInsufficientFunds) {
		return false
	}
	for _, m := range s.a.pending() {
		if schema.TxnOfMarker(m) != s.q.o.rec.ID {
			return true
		}
	}
	return false
}

// settleFirst closes, on the accounts of the debits in short, the legs of
// the transactions the log holds in state applied (committed, not yet
// settled: never pending, never held) whose markers those accounts hold,
// with closeModel: guarded by the marker, so a leg closes once whoever
// else settles it (the background settler closes the others and moves the
// transaction to done). It returns, by index in short, the debits worth
// trying again: those whose account had a leg to close and took the
// closes without error, and those whose account holds a marker of a
// transaction no longer pending, held or applied, or no longer in the log
// (two reads are not one snapshot: since the account was read, it may
// have been settled, rolled back or moved out of the log, giving the
// account back what the round judged by); and the errors of those whose read
// of the log or closes failed (an unknown outcome, never a refusal). A
// close the server refused (a write error, not transient) did not apply:
// its debit is judged as it was.
//
// Nothing here reads the archive, takes a transaction over or changes its
// state: a committed transaction may be settled by anyone, any number of
// times (see settle).
func settleFirst(ctx context.Context, g *txnLog, ls ledgers, short []shortDebit) (map[int]bool, map[int]error) {
	var ids bson.A
	seen := map[bson.ObjectID]bool{}
	for _, s := range short {
		for _, m := range s.a.pending() {
			if t := schema.TxnOfMarker(m); t != s.q.o.rec.ID && !seen[t] {
				seen[t] = true
				ids = append(ids, t)
			}
		}
	}
	committed, states, err := g.committed(ctx, ids)
	if err != nil {
		failed := map[int]error{}
		for i := range short {
			failed[i] = err
		}
		return nil, failed
	}
	type target struct {
		models []mongo.WriteModel
		of     []int // the indexes in short the models serve
	}
	byLedger := map[string]*target{}
	var order []string
	for i, s := range short {
		key, err := schema.IDKey(s.l.account)
		if err != nil {
			continue
		}
		pending := s.a.pending()
		var models []mongo.WriteModel
		for _, r := range committed {
			for _, lg := range r.legs() {
				if lg.ledger != s.l.ledger || !has(pending, lg.marker) {
					continue
				}
				if k, err := schema.IDKey(lg.account); err != nil || k != key {
					continue
				}
				lg.limited = s.a.limited()
				models = append(models, closeModel(lg))
			}
		}
		if len(models) == 0 {
			continue
		}
		t := byLedger[s.l.ledger]
		if t == nil {
			t = &target{}
			byLedger[s.l.ledger] = t
			order = append(order, s.l.ledger)
		}
		t.models = append(t.models, models...)
		t.of = append(t.of, i)
	}
	again := map[int]bool{}
	// The round read the account before the log: a transaction that has
	// left pending, held and applied since (settled, rolled back, or
	// moved out of the log by WithHistory once final) may have given the
	// account back what the round judged by. Its debit goes again: only a
	// debit whose account holds nothing but legs still pending or held,
	// and committed ones that did not close, is refused now.
	for i, s := range short {
		for _, m := range s.a.pending() {
			t := schema.TxnOfMarker(m)
			if t == s.q.o.rec.ID {
				continue
			}
			switch state, ok := states[t]; {
			case !ok, state != StatePending && state != StateHeld && state != StateApplied:
				again[i] = true
			}
		}
	}
	failed := map[int]error{}
	for _, name := range order {
		t := byLedger[name]
		l, err := ls.get(name)
		if err == nil {
			_, err = l.write(ctx, t.models)
		}
		for _, i := range t.of {
			switch {
			case err == nil:
				again[i] = true
			case !refusedWrite(err):
				failed[i] = err
			}
		}
	}
	return again, failed
}

// refusedWrite reports whether err, a write's, says only that the server
// refused statements (write errors, none transient, and no write-concern
// error): they did not apply, and would not if sent again.
func refusedWrite(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if transientWrite(bwe, we) {
			return false
		}
	}
	return true
}

// committed reads the transactions of ids, in one find by _id: it
// returns those in state applied (committed, not yet settled), and the
// state of every one the log holds, of this library's.
func (g *txnLog) committed(ctx context.Context, ids bson.A) ([]*record, map[bson.ObjectID]State, error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	var applied []*record
	var states map[bson.ObjectID]State
	err := g.retry(ctx, func(ctx context.Context) error {
		cur, err := g.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		if err != nil {
			return err
		}
		var all []*record
		if err := cur.All(ctx, &all); err != nil {
			return err
		}
		applied, states = applied[:0], map[bson.ObjectID]State{}
		for _, r := range all {
			if r.check() != nil || r.foreign() {
				continue
			}
			states[r.ID] = r.State
			if r.State == StateApplied {
				applied = append(applied, r)
			}
		}
		return nil
	})
	return applied, states, err
}

// committedCredit is what settling the committed transactions whose
// markers account a of ledger holds adds to its balance: their credits,
// and the part of a partly captured hold's debit not captured.
func (g *txnLog) committedCredit(ctx context.Context, ledger string, id any, pending []bson.ObjectID) (int64, error) {
	var ids bson.A
	seen := map[bson.ObjectID]bool{}
	for _, m := range pending {
		if t := schema.TxnOfMarker(m); !seen[t] {
			seen[t] = true
			ids = append(ids, t)
		}
	}
	committed, _, err := g.committed(ctx, ids)
	if err != nil {
		return 0, err
	}
	key, err := schema.IDKey(id)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, r := range committed {
		for _, lg := range r.legs() {
			if lg.ledger != ledger || !has(pending, lg.marker) {
				continue
			}
			if k, err := schema.IDKey(lg.account); err != nil || k != key {
				continue
			}
			for _, e := range lg.settleInc() {
				if e.Key == fieldBalance {
					sum += e.Value.(int64)
				}
			}
		}
	}
	return sum, nil
}
