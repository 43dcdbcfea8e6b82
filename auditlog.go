package twopc

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The audit's check of the log: the transactions by state, and every
// unfinished one against its lease (the call is in audit.go).

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
		n, err := roundTrip(ctx, au.b, func(ctx context.Context) (int64, error) {
			return c.log.txns.CountDocuments(ctx, bson.D{{Key: fieldState, Value: s}})
		})
		if err != nil {
			return err
		}
		rep.Transactions[s] = int(n)
	}
	cur, err := roundTrip(ctx, au.b, func(ctx context.Context) (*mongo.Cursor, error) {
		return c.log.txns.Find(ctx, bson.D{{Key: fieldState, Value: bson.D{{Key: "$in", Value: unfinishedStates}}}},
			options.Find().SetSort(bson.D{{Key: fieldLastModified, Value: 1}}).SetBatchSize(int32(cfg.batch)))
	})
	if err != nil {
		return err
	}
	defer au.b.close(ctx, cur)
	for au.b.next(ctx, cur) {
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
