package twopc

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Canceler cancels transactions that have not reached their commit point:
// initial or pending goes to canceling, the legs that were applied are
// undone, then canceled. It shares its coordinator's application name,
// options and step hook.
type Canceler struct {
	c *Coordinator
}

// NewCanceler returns a canceler that works for c.
func NewCanceler(c *Coordinator) *Canceler { return &Canceler{c: c} }

// Cancel cancels transaction id and returns it canceled.
//
// A transaction that is initial or pending is claimed for this application
// and moved to canceling by one guarded write, if its owner is this
// application or its lastModified is older than StaleAfter by the server's
// clock; a fresh transaction of another application gives ErrInProgress.
// The owner, if it is still running, then finds its claim gone and can
// neither move the state nor apply a leg: the rollback fences both accounts
// before undoing.
//
// Cancel of a canceling transaction finishes its rollback; of a canceled
// one returns it. Applied and done transactions are past the commit point:
// Cancel returns ErrNotCancelable naming the state, and Coordinator.Reverse
// is the way to undo them. An unknown id gives ErrTxnNotFound.
func (k *Canceler) Cancel(ctx context.Context, id bson.ObjectID) (*Txn, error) {
	if k == nil || k.c == nil {
		return nil, errors.New("twopc: cancel: Canceler has no Coordinator (use NewCanceler)")
	}
	c := k.c
	for attempt := 0; attempt < 3; attempt++ {
		r, err := c.read(ctx, id)
		if err != nil {
			return r.txn(), fmt.Errorf("twopc: cancel: %w", err)
		}
		switch r.State {
		case StateApplied, StateDone:
			return r.txn(), fmt.Errorf("twopc: cancel %s: %w: it is %s; use Reverse", id.Hex(), ErrNotCancelable, r.State)
		case StateCanceled:
			return r.txn(), nil
		case StateCanceling:
			cur, err := c.rollback(ctx, r)
			if err != nil {
				return cur.txn(), fmt.Errorf("twopc: cancel %s: %w", id.Hex(), err)
			}
			return cur.txn(), nil
		}
		if r.Application != c.application {
			stale, err := c.stale(ctx, r)
			if err != nil {
				return r.txn(), fmt.Errorf("twopc: cancel %s: %w", id.Hex(), err)
			}
			if !stale {
				return r.txn(), fmt.Errorf("twopc: cancel %s: %w: %s, owned by %q and not stale", id.Hex(), ErrInProgress, r.State, r.Application)
			}
		}
		cur, moved, err := c.advance(ctx, r, move{
			step: StepCancel, from: r.State, to: StateCanceling,
			claim: r.Claim, lastModified: r.LastModified,
			newClaim: bson.NewObjectID(), application: c.application, lease: c.staleAfter,
			set: bson.D{{Key: fieldReason, Value: reasonCanceled}},
		})
		if err != nil {
			return cur.txn(), fmt.Errorf("twopc: cancel %s: %w", id.Hex(), err)
		}
		if !moved {
			continue // it moved under us: look again
		}
		cur, err = c.rollback(ctx, cur)
		if err != nil {
			return cur.txn(), fmt.Errorf("twopc: cancel %s: %w", id.Hex(), err)
		}
		return cur.txn(), nil
	}
	return nil, fmt.Errorf("twopc: cancel %s: %w: it kept moving", id.Hex(), ErrInProgress)
}

// rollback takes a canceling transaction to canceled: fence and undo its
// legs on both accounts, then canceled. Anyone may roll back a canceling
// transaction, concurrently: every write is guarded and idempotent.
func (c *Coordinator) rollback(ctx context.Context, r *record) (*record, error) {
	if err := c.fenceAndUndo(ctx, r); err != nil {
		return r, err
	}
	if err := c.at(ctx, StepCanceled, r); err != nil {
		return r, err
	}
	done, err := c.finish(ctx, []*record{r}, move{step: StepCanceled, from: StateCanceling, to: StateCanceled, anyClaim: true})
	if err != nil {
		return r, err
	}
	if len(done) == 1 {
		return done[0], nil
	}
	return c.read(ctx, r.ID)
}
