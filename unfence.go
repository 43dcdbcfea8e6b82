package twopc

// The unfence step: removing the fences of final transactions from their
// accounts and moving each account's fence line past them, once no older
// unfinished transaction shares the account.

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// unfence removes the fences of final transactions from their accounts and
// moves each account's fence line forward past them, in one atomic update
// per account, and then clears the transactions' fences flag. The fence
// line then refuses their legs however late they arrive, so removing a
// fence never depends on time.
//
// A fence line is moved past a transaction only if no transaction still
// unfinished (initial, pending, canceling) that touches the same account
// was created at or before it: the line would refuse that transaction's
// remaining legs (which is safe, it rolls back, but needless). Time and
// retention only decide when fences go, never whether a leg applies.
//
// It tells report what became of each transaction it takes on: unfenced
// (moved), held back by an older unfinished transaction (not moved), or
// failed.
func (c *Coordinator) unfence(ctx context.Context, recs []*record, report func(r *record, outcome Outcome, err error)) (int, error) {
	var firstErr error
	var due []*record
	for _, r := range recs {
		if r.foreign() || r.Placeholder {
			continue
		}
		if err := c.at(ctx, StepUnfence, r); err != nil {
			firstErr = cmpErr(firstErr, err)
			report(r, OutcomeError, err)
			continue
		}
		due = append(due, r)
	}
	if len(due) == 0 {
		return 0, firstErr
	}
	open, err := c.log.openBefore(ctx, due)
	if err != nil {
		for _, r := range due {
			report(r, OutcomeError, err)
		}
		return 0, cmpErr(firstErr, err)
	}
	var ready []*record
	for _, r := range due {
		if open.clear(r) { // else an older unfinished transaction shares an account
			ready = append(ready, r)
		} else {
			report(r, OutcomeNotMoved, nil)
		}
	}
	failed, err := c.ledgers.unfenceLegs(ctx, ready)
	firstErr = cmpErr(firstErr, err)
	var ids bson.A
	var cleared []*record
	for i, r := range ready {
		if why := failed[i]; why != nil {
			report(r, OutcomeError, why)
			continue
		}
		ids = append(ids, r.ID)
		cleared = append(cleared, r)
	}
	if len(ids) == 0 {
		return 0, firstErr
	}
	var n int64
	err = c.retry(ctx, func(ctx context.Context) error {
		res, err := c.log.txns.UpdateMany(ctx,
			bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: fieldFences, Value: true}},
			bson.D{{Key: "$unset", Value: bson.D{{Key: fieldFences, Value: ""}}}})
		if res != nil {
			n = res.ModifiedCount
		}
		return err
	})
	for _, r := range cleared {
		report(r, outcomeOf(err == nil, err), err)
	}
	return int(n), cmpErr(firstErr, err)
}

// maxOpenScan bounds the unfinished transactions one unfence reads.
const maxOpenScan = 1000

// openTxns is what unfence knows of the unfinished transactions: the
// earliest transaction time of those touching each account, and, if it
// could not read them all, a time before which it saw every one.
type openTxns struct {
	earliest map[string]time.Time
	cut      time.Time // zero: all were read
}

// clear reports whether r's fences may go: no unfinished transaction on
// its accounts was created at or before it.
func (o openTxns) clear(r *record) bool {
	if !o.cut.IsZero() && !r.Created.Before(o.cut) {
		return false
	}
	for _, l := range r.legs() {
		if t, ok := o.earliest[legKey(l.ledger, l.account)]; ok && !r.Created.Before(t) {
			return false
		}
	}
	return true
}

// openBefore reads the unfinished transactions created no later than the
// latest of recs, oldest first, at most maxOpenScan of them.
func (g *txnLog) openBefore(ctx context.Context, recs []*record) (openTxns, error) {
	latest := recs[0].Created
	for _, r := range recs[1:] {
		if r.Created.After(latest) {
			latest = r.Created
		}
	}
	o := openTxns{earliest: map[string]time.Time{}}
	var open []struct {
		Source      bson.RawValue `bson:"source"`
		Destination bson.RawValue `bson:"destination"`
		Legs        []struct {
			Ledger  string        `bson:"ledger"`
			Account bson.RawValue `bson:"account"`
		} `bson:"legs"`
		Created time.Time `bson:"created"`
	}
	err := g.retry(ctx, func(ctx context.Context) error {
		cur, err := g.txns.Find(ctx, bson.D{
			// Not applied, done or held: every leg of those applied, and
			// what closes them (settle, undo) is guarded by its marker,
			// not by the fence line.
			{Key: fieldState, Value: bson.D{{Key: "$in", Value: bson.A{StateInitial, StatePending, StateCanceling}}}},
			{Key: fieldCreated, Value: bson.D{{Key: "$lte", Value: latest}}},
		}, options.Find().
			SetProjection(bson.D{{Key: "source", Value: 1}, {Key: "destination", Value: 1}, {Key: fieldLegs + ".account", Value: 1}, {Key: fieldLegs + ".ledger", Value: 1}, {Key: fieldCreated, Value: 1}}).
			SetSort(bson.D{{Key: fieldCreated, Value: 1}}).
			SetLimit(maxOpenScan))
		if err != nil {
			return err
		}
		open = open[:0]
		return cur.All(ctx, &open)
	})
	if err != nil {
		return o, err
	}
	for _, t := range open {
		keys := map[string]bool{}
		for _, id := range []bson.RawValue{t.Source, t.Destination} {
			if id.Type != 0 {
				keys[legKey("", id)] = true
			}
		}
		for _, l := range t.Legs {
			keys[legKey(l.Ledger, l.Account)] = true
		}
		for key := range keys {
			if e, ok := o.earliest[key]; !ok || t.Created.Before(e) {
				o.earliest[key] = t.Created
			}
		}
	}
	if len(open) == maxOpenScan {
		o.cut = open[len(open)-1].Created
	}
	return o, nil
}

// unfenceLegs removes the fences of final transactions recs on every
// ledger (see Ledger.unfenceLegs).
func (ls ledgers) unfenceLegs(ctx context.Context, recs []*record) (map[int]error, error) {
	return ls.eachFailed(ctx, recs, (*Ledger).unfenceLegs)
}

// unfence removes the fences of final transactions whose retention has
// passed by now: the longest of this coordinator's and those recorded in
// the transaction by every process that claimed or finished it. Removing
// them is safe at any time (see Coordinator.unfence); the retention only
// keeps recent fences in place, so that the fence line does not move for
// every transfer.
func (r *Recoverer) unfence(ctx context.Context, now time.Time) (int, error) {
	filter := bson.D{
		{Key: fieldFences, Value: true},
		{Key: fieldLastModified, Value: bson.D{{Key: "$lt", Value: now.Add(-r.c.fenceRetention)}}},
	}
	total := 0
	var firstErr error
	err := r.each(ctx, filter, func(err error) { firstErr = cmpErr(firstErr, err) }, func(recs []*record) {
		var due []*record
		for _, t := range recs {
			// Final for its retention, and created no later than now by
			// the server's clock: a line is never moved into the future,
			// so a host whose clock runs ahead cannot close the accounts
			// it touched to everyone else's transfers (its own
			// transactions keep their fences until the server's clock
			// passes their time).
			if t.LastModified.Before(now.Add(-t.retention(r.c.fenceRetention))) && !t.Created.After(now) {
				due = append(due, t)
			}
		}
		start := time.Now()
		n, err := r.c.unfence(ctx, due, func(t *record, outcome Outcome, err error) {
			r.report(ctx, t.ID, t.State, RecoveryUnfence, start, outcome, StepUnfence, err)
		})
		total += n
		firstErr = cmpErr(firstErr, err)
	})
	return total, cmpErr(firstErr, err)
}
