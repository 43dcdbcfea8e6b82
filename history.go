package twopc

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// prune moves to the archive (or removes) the final transactions whose
// recorded time to keep (WithHistory) has passed by now, since they were
// last modified: no leg of it can apply however late it is
// delivered, its fences or the fence lines refuse it (see WithHistory). Only those
// recorded for this coordinator's archive (or for removal, if it has
// none) are taken. Placeholders and keyed transactions (WithKey, and the
// reversals Reverse keys) are never removed: their _id would be free for
// the same key again, and a transaction with that _id has the same leg
// markers, which a late settle or undo of the removed one would then act
// on. It returns how many it removed from the transactions
// collection.
func (r *Recoverer) prune(ctx context.Context, b trips, now time.Time) (int, error) {
	c := r.c
	filter := bson.D{
		{Key: fieldState, Value: bson.D{{Key: "$in", Value: bson.A{StateDone, StateCanceled}}}},
		{Key: fieldKeep, Value: bson.D{{Key: "$gt", Value: 0}}},
		{Key: fieldKey, Value: bson.D{{Key: "$exists", Value: false}}},
	}
	if c.history.keep > 0 {
		// Scan only what this coordinator's own keep has passed for: a
		// transaction recorded with a shorter keep waits for it (later,
		// never sooner), and the pass does not read every kept one.
		// The created bound, which lastModified's implies up to the clocks'
		// difference (a transaction is stamped before its last write),
		// bounds the read by the {state, created} index to what is old
		// enough; one stamped ahead of the server waits that much longer.
		cutoff := now.Add(-c.history.keep)
		filter = append(filter, bson.E{Key: fieldCreated, Value: bson.D{{Key: "$exists", Value: true}, {Key: "$lt", Value: cutoff}}},
			bson.E{Key: fieldLastModified, Value: bson.D{{Key: "$lt", Value: cutoff}}})
	}
	total := 0
	var firstErr error
	err := r.each(ctx, b, filter, func(err error) { firstErr = cmpErr(firstErr, err) }, func(recs []*record) {
		// Each batch under the call bound: its error, if it ends one.
		if err := b.write(ctx, func(ctx context.Context) error {
			n, err := r.pruneBatch(ctx, recs, now)
			total += n
			return err
		}); err != nil {
			firstErr = cmpErr(firstErr, err)
		}
	})
	return total, cmpErr(firstErr, err)
}

// pruneBatch archives or removes those of recs, a batch of prune's, that
// are due at server time now; it returns how many it removed from the
// transactions collection, and the first error it met.
func (r *Recoverer) pruneBatch(ctx context.Context, recs []*record, now time.Time) (total int, firstErr error) {
	c := r.c
	start := time.Now()
	var due bson.A
	var dueRecs []*record
	states := map[any]State{}
	for _, t := range recs {
		if t.Placeholder || t.Key != "" || t.Archive != c.history.archiveName() ||
			!t.LastModified.Before(now.Add(-time.Duration(t.KeepMs)*time.Millisecond)) {
			continue
		}
		dueRecs = append(dueRecs, t)
	}
	// The feeds let go only what they published, and record it first.
	dueRecs, err := c.feedsAllow(ctx, dueRecs, now)
	if err != nil {
		firstErr = cmpErr(firstErr, errorf("history: %w", err))
		return
	}
	if c.history.archive == nil {
		// Removal: statements keep what they need first.
		dueRecs = r.checkpointRemoval(ctx, dueRecs, now)
	}
	for _, t := range dueRecs {
		due = append(due, t.ID)
		states[t.ID] = t.State
	}
	report := func(ids bson.A, outcome Outcome, err error) {
		for _, id := range ids {
			oid, _ := id.(bson.ObjectID)
			if raw, ok := id.(bson.RawValue); ok {
				oid, _ = raw.ObjectIDOK()
			}
			r.report(ctx, oid, states[oid], RecoveryRemove, start, outcome, StepScan, err)
		}
	}
	if len(due) == 0 {
		return
	}
	if c.history.archive != nil {
		// Readers of other archives learn first that entries through
		// these are where they do not read (see moved).
		var through time.Time
		for _, t := range dueRecs {
			if t.CommittedAt.After(through) {
				through = t.CommittedAt
			}
		}
		if !through.IsZero() {
			if err := c.markMoved(ctx, c.history.archive, through); err != nil {
				report(due, OutcomeError, err)
				firstErr = cmpErr(firstErr, errorf("archive: record the move: %w", err))
				return
			}
		}
		archived, err := r.archive(ctx, due)
		if err != nil {
			firstErr = cmpErr(firstErr, errorf("archive: %w", err))
		}
		due = archived // only what the archive holds is removed
		if len(due) == 0 {
			return
		}
	}
	// Guarded as the read was: final, no placeholder, no key.
	res, err := c.log.txns.DeleteMany(ctx, bson.D{
		{Key: "_id", Value: bson.D{{Key: "$in", Value: due}}},
		{Key: fieldState, Value: bson.D{{Key: "$in", Value: bson.A{StateDone, StateCanceled}}}},
		{Key: fieldPlaceholder, Value: bson.D{{Key: "$ne", Value: true}}},
		{Key: fieldKey, Value: bson.D{{Key: "$exists", Value: false}}},
	})
	if err != nil {
		report(due, OutcomeError, err)
		firstErr = cmpErr(firstErr, errorf("remove: %w", err))
		return
	}
	total += int(res.DeletedCount)
	if int(res.DeletedCount) == len(due) {
		report(due, OutcomeMoved, nil)
	} else {
		report(due, OutcomeNotMoved, nil)
	}
	return total, firstErr
}

// checkpointRemoval records, for each account with an entry among recs
// (transactions about to be removed without an archive), a removal
// checkpoint: its balance through the latest of those entries (see
// ErrHistoryRemoved), so that statements and BalanceAt answer the same
// from there on and refuse times before it. It returns the transactions
// that may be removed: not those committed within the checkpoint horizon
// (a commit stamped earlier might not be visible yet) or on an account
// whose checkpoint could not be written; they wait for a later pass.
func (r *Recoverer) checkpointRemoval(ctx context.Context, recs []*record, now time.Time) []*record {
	c := r.c
	limit := now.Add(-c.checkpointHorizon)
	type acct struct {
		ledger  string
		account any
		through time.Time
		recs    []*record
	}
	accts := map[string]*acct{}
	var out []*record
	for _, t := range recs {
		if t.CommittedAt.IsZero() || !t.State.Committed() {
			out = append(out, t) // no entry
			continue
		}
		if t.CommittedAt.After(limit) {
			continue
		}
		for _, l := range t.AllLegs() {
			k, err := entryKey(l.Ledger, l.Account)
			if err != nil {
				continue
			}
			a := accts[k]
			if a == nil {
				a = &acct{ledger: l.Ledger, account: l.Account}
				accts[k] = a
			}
			if t.CommittedAt.After(a.through) {
				a.through = t.CommittedAt
			}
			a.recs = append(a.recs, t)
		}
	}
	refused := map[*record]bool{}
	for _, a := range accts {
		if err := c.checkpointThrough(ctx, a.ledger, a.account, a.through); err != nil {
			r.logger.Warn("twopc: history: no checkpoint for an account; nothing is lost: its transactions are kept, and the next pass tries again", "ledger", a.ledger, "account", a.account, "error", err)
			for _, t := range a.recs {
				refused[t] = true
			}
		}
	}
	seen := map[*record]bool{}
	for _, a := range accts {
		for _, t := range a.recs {
			if !refused[t] && !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// lookup reads transaction id for Get, GetByKey, Cancel, Reverse, Capture
// and Void. If WithHistory's archive holds it, the archive's record
// answers, and archived says so: it is the transaction's first record, and
// a document under the same id in the log is a copy that the removed
// transaction's own late writes brought back (see WithHistory). Otherwise
// the log answers.
//
// The three reads are not one snapshot, and a transaction may move from
// the log to the archive between any two of them. Archiving inserts into
// the archive before it deletes from the log, so a transaction that the
// log no longer holds when it is read is in the archive by then: a miss in
// the log is followed by a second read of the archive, and only a miss in
// that read too is ErrTxnNotFound.
func (g *txnLog) lookup(ctx context.Context, id bson.ObjectID) (r *record, archived bool, err error) {
	if r, archived, err = g.archived(ctx, id); archived || err != nil {
		return r, archived, err
	}
	r, err = g.read(ctx, id)
	if !errors.Is(err, ErrTxnNotFound) || g.history.archive == nil {
		return r, false, err
	}
	if a, archived, aerr := g.archived(ctx, id); archived || aerr != nil {
		return a, archived, aerr // moved between the two reads
	}
	return r, false, err
}

// archived reads transaction id from WithHistory's archive, if there is
// one and it holds the id.
func (g *txnLog) archived(ctx context.Context, id bson.ObjectID) (*record, bool, error) {
	a := g.history.archive
	if a == nil {
		return nil, false, nil
	}
	var r record
	err := g.try(ctx, StepRead, &record{Txn: Txn{ID: id}}, func(ctx context.Context) error {
		return a.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&r)
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errorf("twopc: read the archive: %w", err)
	}
	return &r, true, r.check()
}

// archive copies transactions ids, as stored, into the archive and
// returns those the archive then holds: a transaction is removed only once
// its copy is there, whatever a partly failed insert reported.
func (r *Recoverer) archive(ctx context.Context, ids bson.A) (bson.A, error) {
	c := r.c
	cur, err := c.log.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		return nil, err
	}
	var docs []bson.Raw
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	held := make(bson.A, 0, len(docs))
	all := make([]any, len(docs))
	for i, d := range docs {
		all[i] = d
		held = append(held, d.Lookup("_id"))
	}
	if len(all) == 0 {
		return held, nil
	}
	if _, err := c.history.archive.InsertMany(ctx, all, options.InsertMany().SetOrdered(false)); err == nil {
		return held, nil // acknowledged, at the write concern: all there
	}
	// Some failed, or the reply was lost: one at a time, so that each
	// one's fate is known. A duplicate key is a copy already archived (a
	// pass that stopped after its insert), which serves.
	held = held[:0]
	var firstErr error
	for _, d := range docs {
		_, err := c.history.archive.InsertOne(ctx, d)
		if err == nil || mongo.IsDuplicateKeyError(err) {
			held = append(held, d.Lookup("_id"))
			continue
		}
		firstErr = cmpErr(firstErr, err)
	}
	return held, firstErr
}
