package twopc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxCommitGroup bounds the transactions one group commit writes.
const maxCommitGroup = 256

// committer makes the commit point, the move pending → applied, for the
// transactions its coordinator owns, in groups (group commit).
//
// A commit that finds no commit write of this coordinator in flight is
// written at once, and alone: the same single guarded find-and-modify as
// any other move ({_id, state: pending, claim} → applied), so a transfer
// on an idle coordinator still reaches its commit point in three round
// trips. Commits that arrive while a write is in flight wait for it, and
// then the first of them writes all of them in one guarded update:
//
//	{state: pending, $or: [{_id: id1, claim: c1}, {_id: id2, claim: c2}, ...]}
//	→ {$set: {state: applied}, $currentDate: {lastModified: true}}
//
// The guarantee: a group commit moves exactly the transactions the single
// commits would have moved, since the guard is the same per transaction:
// each moves only if it is still pending under its own claim, so a
// transaction taken over, canceled or committed by another process while
// it waited does not move, and each clause can match only its own
// transaction. A grouped write
// whose count says fewer moved than were asked for, or that failed, is
// followed by one read of the group, and a transaction is reported moved
// only if that read finds it applied under its own claim (moved by this
// write or by an attempt of it whose reply was lost); nothing is inferred
// from an error.
//
// Latency: a commit that arrives while a write is in flight waits for the
// rest of that write and then for its group's: up to two commit writes,
// where on its own it would wait for one plus whatever the server had
// queued ahead of it. A transaction moved by a grouped write is returned
// with the state applied and the lastModified it had before (the write
// does not return documents).
//
// Step hooks: StepCommit is called for each transaction by its own caller,
// with its caller's context, before it joins a group; a hook that fails
// keeps its transaction out of the write and its caller gets the error.
// A grouped write retried after a transient failure does not call the
// hooks again (a single one does, as every other step does).
//
// Contexts: a caller whose context ends while it waits returns at once
// with the context's error: if its commit was not yet taken into a write,
// it is not written; if it was, it is as ambiguous as any lost reply, and
// the transaction's state tells. A grouped write is made under the context
// of the caller that leads it; if that context ends before the outcome is
// known, the others of the group commit again under their own contexts
// (leading or joining the next group), which the guard makes harmless.
//
// Under load, k commits cost one command, one write acknowledgement (one
// majority wait on a replica set) and, on a server that uses the _id index
// only for a filter on _id alone, one collection scan, instead of k. Only
// the commits of one Coordinator are grouped.
type committer struct {
	c *Coordinator

	mu    sync.Mutex
	busy  bool          // a commit write is in flight, or its leader is being handed over
	queue []*commitWait // commits waiting for the next group, in arrival order

	// joined, if set (tests only), is called, under mu, when a commit
	// starts waiting for the next group.
	joined func()
}

// commitWait is one caller's commit waiting in the committer.
type commitWait struct {
	ctx  context.Context
	rec  *record
	turn chan struct{} // closed when the result is ready, or when this caller must lead

	// Under committer.mu:
	lead  bool // this caller leads the next group
	taken bool // in a group being written

	// Set by the group's leader before turn is closed:
	cur   *record
	moved bool
	err   error
	again bool // the outcome is unknown because the leader's context ended
}

// commit makes the move pending → applied of r, which this coordinator
// holds the claim of. It returns what advance returns: the transaction as
// it now stands and whether this call made the move.
func (g *committer) commit(ctx context.Context, r *record) (*record, bool, error) {
	for {
		if err := g.c.at(ctx, StepCommit, r); err != nil {
			return r, false, err
		}
		w := &commitWait{ctx: ctx, rec: r, turn: make(chan struct{})}
		g.mu.Lock()
		if !g.busy {
			// Nothing in flight: write this one alone, now.
			g.busy = true
			g.mu.Unlock()
			cur, moved, err := g.one(ctx, r)
			g.handOff()
			return cur, moved, err
		}
		g.queue = append(g.queue, w)
		if g.joined != nil {
			g.joined()
		}
		g.mu.Unlock()

		if !g.wait(w) {
			return r, false, ctx.Err()
		}
		if !w.lead {
			if w.again {
				continue // the leader's context ended: commit again under ours
			}
			return w.cur, w.moved, w.err
		}
		g.lead(w)
		if w.again {
			continue
		}
		return w.cur, w.moved, w.err
	}
}

// wait waits for w's turn: its outcome, or the lead of the next group. It
// returns false if w's context ended first, with w never written (still
// waiting, or handed a lead it passes on) or in a write whose outcome is
// not known yet.
func (g *committer) wait(w *commitWait) bool {
	select {
	case <-w.turn:
		return true
	case <-w.ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case w.lead:
		// Handed the lead as the context ended: pass it on.
		g.remove(w)
		g.handOffLocked()
		return false
	case w.taken:
		select {
		case <-w.turn:
			return true // the outcome came as the context ended
		default:
			return false // in a write under way: its outcome is unknown to us
		}
	default:
		g.remove(w) // never written
		return false
	}
}

// lead writes the group w leads: the commits waiting now, w among them.
func (g *committer) lead(w *commitWait) {
	g.mu.Lock()
	if err := w.ctx.Err(); err != nil {
		g.remove(w)
		g.handOffLocked()
		g.mu.Unlock()
		w.cur, w.err = w.rec, err
		return
	}
	n := min(len(g.queue), maxCommitGroup)
	group := g.queue[:n:n]
	g.queue = g.queue[n:]
	if len(g.queue) == 0 {
		g.queue = nil
	}
	for _, q := range group {
		q.taken = true
	}
	g.mu.Unlock()

	start := time.Now()
	grouped := g.write(w, group)
	type decided struct {
		ctx   context.Context
		id    bson.ObjectID
		moved bool
		err   error
	}
	outcomes := make([]decided, len(grouped))
	for i, q := range grouped {
		outcomes[i] = decided{q.ctx, q.rec.ID, q.moved, q.err}
	}
	for _, q := range group {
		if q != w {
			close(q.turn)
		}
	}
	g.handOff()
	// The observers hear of the group's moves once its members and the
	// next group have gone on: only this leader waits for them.
	m := move{step: StepCommit, from: StatePending, to: StateApplied}
	for _, o := range outcomes {
		g.c.transition(o.ctx, o.id, m, start, len(outcomes), o.moved, o.err)
	}
}

// handOff ends a write: the first commit that waits leads the next group.
func (g *committer) handOff() {
	g.mu.Lock()
	g.handOffLocked()
	g.mu.Unlock()
}

func (g *committer) handOffLocked() {
	if len(g.queue) == 0 {
		g.busy = false
		return
	}
	next := g.queue[0]
	next.lead = true
	close(next.turn)
}

func (g *committer) remove(w *commitWait) {
	for i, q := range g.queue {
		if q == w {
			g.queue = append(g.queue[:i:i], g.queue[i+1:]...)
			return
		}
	}
}

func commitMove(r *record) move {
	return move{step: StepCommit, from: StatePending, to: StateApplied, claim: r.Claim}
}

// one commits r alone: advance's find-and-modify, whose first attempt's
// step hook commit has already called.
func (g *committer) one(ctx context.Context, r *record) (*record, bool, error) {
	return g.c.advanceHooked(ctx, r, commitMove(r), true)
}

// write commits group, led by leader, under the leader's context, and
// leaves each member's outcome in it. It returns the members whose
// outcome a grouped write decided, for the observers (a write of one is
// advance's, which tells them itself; a member that will commit again has
// no outcome yet).
func (g *committer) write(leader *commitWait, group []*commitWait) []*commitWait {
	var live []*commitWait
	for _, q := range group {
		if err := q.ctx.Err(); err != nil && q != leader {
			q.cur, q.err = q.rec, err // its caller has given up: not written
			continue
		}
		live = append(live, q)
	}
	if len(live) == 1 {
		q := live[0]
		q.cur, q.moved, q.err = g.one(q.ctx, q.rec)
		return nil
	}
	c := g.c
	ctx := leader.ctx
	or := make(bson.A, len(live))
	ids := make(bson.A, len(live))
	for i, q := range live {
		or[i] = bson.D{{Key: "_id", Value: q.rec.ID}, {Key: fieldClaim, Value: q.rec.Claim}}
		ids[i] = q.rec.ID
	}
	filter := bson.D{{Key: fieldState, Value: StatePending}, {Key: "$or", Value: or}}
	update := commitMove(leader.rec).update()
	var modified int64
	err := c.retry(ctx, func(ctx context.Context) error {
		res, err := c.txns.UpdateMany(ctx, filter, update)
		if res != nil {
			modified = res.ModifiedCount
		}
		return err
	})
	if err == nil && modified == int64(len(live)) {
		for _, q := range live {
			cp := *q.rec // lastModified is the server's, not read back
			cp.State = StateApplied
			q.cur, q.moved = &cp, true
		}
		return live
	}
	// Fewer moved than asked, or the write failed (maybe after it
	// happened): read which moved. A transaction moved if it is applied
	// under its own claim.
	var now []record
	var rerr error
	if ctx.Err() == nil {
		rerr = c.retry(ctx, func(ctx context.Context) error {
			cur, err := c.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
			if err != nil {
				return err
			}
			now = now[:0]
			return cur.All(ctx, &now)
		})
	}
	if ctx.Err() != nil {
		// The leader gave up: its own outcome is its context's error;
		// the others commit again under their own contexts.
		for _, q := range live {
			q.cur = q.rec
			if q == leader {
				q.err = cmpErr(err, ctx.Err())
			} else {
				q.again = true
			}
		}
		return []*commitWait{leader}
	}
	if rerr != nil {
		for _, q := range live {
			q.cur, q.err = q.rec, cmpErr(err, rerr)
		}
		return live
	}
	for _, q := range live {
		q.cur, q.moved = q.rec, false
		q.err = fmt.Errorf("%w: %s", ErrTxnNotFound, q.rec.ID.Hex())
		for i := range now {
			if now[i].ID != q.rec.ID {
				continue
			}
			switch cur := &now[i]; {
			case cur.check() != nil:
				q.err = cur.check()
			case cur.State == StatePending && cur.Claim == q.rec.Claim && err != nil:
				// Still ours and pending: the write failed before reaching
				// it, or has yet to. Say so, as a failed single write would.
				q.err = err
			default:
				q.cur, q.err = cur, nil
				q.moved = cur.State == StateApplied && cur.Claim == q.rec.Claim
			}
		}
	}
	return live
}
