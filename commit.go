package twopc

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// commitCall is one transfer's commit, the move pending → applied of a
// transaction its coordinator holds the claim of, in the commit stage:
// the transaction as it now stands and whether the write made the move.
type commitCall struct {
	rec   *record
	cur   *record
	moved bool
	err   error
}

// commitAll is the commit stage's write: it makes the commit point of
// concurrent transfers in groups (group commit; see stage), and a hold's
// move to held alone, as a guarded find-and-modify (its capture needs the
// heldAt it returns). A commit written alone is a group of one, so a
// transfer on an idle coordinator still reaches its commit point in three
// round trips, with an update that returns no document (it costs the
// server less than a find-and-modify). A group is one unordered update
// command of one single-document statement per transaction, by _id, each
// with the filter of that transaction's commit alone (commitMove's: _id,
// state pending, its claim, and lastModified where its mover read it):
//
//	update transactions, ordered: false, updates: [
//	  {q: {_id: id1, state: pending, claim: c1, lastModified: l1}, u: ...},
//	  {q: {_id: id2, state: pending, claim: c2}, u: ...}, ...]
//	u: {$set: {state: applied}, $currentDate: {lastModified: true, committedAt: true}}
//
// Not an update of many: a command of single-document statements is a
// retryable write, is routed to one shard per statement on a sharded log,
// and counts exactly (an update of many on a sharded collection may apply
// to a document zero, one or several times during a chunk migration).
//
// The guarantee: a group commit moves exactly the transactions the single
// commits would have moved, since each statement is the single commit's
// guard: each moves only if it is still pending under its own claim, so a
// transaction taken over, canceled or committed by another process while
// it waited does not move, and each statement can match only its own
// transaction. All are reported moved when the count says every statement
// modified its document. A shorter count or an error (the command's, or
// statements' write errors, each taken at its own index) is followed by
// one read of the group, and a transaction is reported moved only if that
// read finds it applied under its own claim (moved by this write or by an
// attempt of it whose reply was lost); nothing is inferred from a count or
// an error. A transaction still pending under its claim whose statement
// failed gets that statement's error (its outcome unknown: a transient one
// is retried, never read as a refusal). A transaction moved by a grouped
// write is returned with the state applied and the lastModified it had
// before (the write does not return documents).
//
// Step hooks: StepCommit is called for each transaction by its own caller,
// with its caller's context, before it joins the stage; a hook that fails
// keeps its transaction out of the write and its caller gets the error. A
// grouped write retried after a transient failure (see transient) does not
// call the hooks again (a single one does, as every other step does).
//
// Under load, k commits cost one command and one write acknowledgement
// (one majority wait on a replica set) instead of k. Only the commits of
// one Coordinator are grouped.
func (g *txnLog) commitAll(ctx context.Context, calls []*commitCall) {
	// A hold's move (pending → held) is written alone: a group's update
	// sets one state.
	var group []*commitCall
	for _, q := range calls {
		if q.rec.Hold {
			q.cur, q.moved, q.err = g.advanceHooked(ctx, q.rec, commitMove(q.rec), true)
			continue
		}
		group = append(group, q)
	}
	calls = group
	if len(calls) == 0 {
		return
	}
	// A commit alone goes the same way, one statement by _id: an update,
	// which returns no document, costs the server less than a
	// find-and-modify, and the transfer needs none back.
	models := make([]mongo.WriteModel, len(calls))
	ids := make(bson.A, len(calls))
	for i, q := range calls {
		m := commitMove(q.rec)
		models[i] = updateByID(m.filter(q.rec.ID), m.update())
		ids[i] = q.rec.ID
	}
	start := time.Now()
	modified, failed := g.bulkByID(ctx, models)
	defer func() {
		m := move{step: StepCommit, from: StatePending, to: StateApplied}
		for _, q := range calls {
			g.transition(ctx, q.rec.ID, m, start, len(calls), q.moved, q.err)
		}
	}()
	if len(failed) == 0 && modified == int64(len(calls)) {
		// Every statement names one document by _id: k modified are the
		// k transactions.
		for _, q := range calls {
			cp := *q.rec // lastModified is the server's, not read back
			cp.State, cp.guessed = StateApplied, true
			q.cur, q.moved = &cp, true
		}
		return
	}
	// Fewer moved than asked, or the write failed (maybe after it
	// happened, its reply cut off by ctx's end), as a whole or for some
	// statements: read which moved, on a context of its own if ctx has
	// ended (see readAfter). A transaction moved if it is applied under
	// its own claim.
	var err error // the first statement's error, for a read that fails too
	for i := range calls {
		if err = failed[i]; err != nil {
			break
		}
	}
	var now []record
	rerr := readAfter(ctx, func(ctx context.Context) error {
		return g.retry(ctx, func(ctx context.Context) error {
			cur, err := g.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
			if err != nil {
				return err
			}
			now = now[:0]
			return cur.All(ctx, &now)
		})
	})
	if rerr != nil {
		for _, q := range calls {
			q.cur, q.err = q.rec, commitUnknown(err, rerr)
		}
		return
	}
	for i, q := range calls {
		q.cur, q.moved = q.rec, false
		q.err = errorf("%w: %s", ErrTxnNotFound, q.rec.ID.Hex())
		for k := range now {
			if now[k].ID != q.rec.ID {
				continue
			}
			switch cur := &now[k]; {
			case cur.check() != nil:
				q.err = cur.check()
			case cur.State == StatePending && cur.Claim == q.rec.Claim && failed[i] != nil:
				// Still ours and pending: its statement failed before
				// reaching it (its own write error, or the command's), or
				// has yet to. Say so, as a failed single write would: a
				// transient error is retried by its caller, never taken
				// for a refusal.
				q.err = failed[i]
			default:
				q.cur, q.err = cur, nil
				q.moved = cur.State == StateApplied && cur.Claim == q.rec.Claim
			}
		}
	}
}

// commitMove is r's move at its commit step: pending → applied, or for a
// hold, pending → held.
//
// The move also requires the lastModified its mover holds, when the mover
// read it from the log (its insert alone, a renewal, a takeover: every
// write but a grouped insert returns the document; after a grouped insert
// it is read back for the transactions WithHistory moves out of the log,
// the ones a late insert could rebuild unseen: see
// txnLog.readBackMovable). That refuses the
// commit, delivered again late, of a transaction removed from the log
// (WithHistory) whose insert, delivered again too, brought a copy back:
// the copy's lastModified is the server's clock at that late insert, not
// the one the commit was sent with, so the copy is never committed, and
// recovery cancels it (see Coordinator.begun). A document's lastModified
// changes only by a move of it, and a pending transaction is moved only
// by its owner (renewals) or after a takeover (a new claim), so this adds
// no refusal of its owner's own commit.
func commitMove(r *record) move {
	m := move{step: StepCommit, from: StatePending, to: StateApplied, claim: r.Claim}
	if r.Hold {
		m = move{step: StepCommit, from: StatePending, to: StateHeld, claim: r.Claim, stampHeldAt: true}
	}
	if !r.guessed {
		m.lastModified = r.LastModified
	}
	return m
}

// commitUnknown is the error of a commit whose write failed with err (nil:
// it modified fewer documents than it named) and whose read back failed
// with rerr: its outcome is unknown.
func commitUnknown(err, rerr error) error {
	const unknown = "the commit's outcome is unknown (Get tells; a Recoverer finishes the transfer either way): reading it back"
	if err == nil {
		return errorf("%s: %w", unknown, rerr)
	}
	return errorf("%w; %s: %v", err, unknown, rerr)
}
