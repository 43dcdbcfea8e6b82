package twopc

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Canceler cancels transactions that have not reached their commit point:
// initial or pending goes to canceling, the legs that were applied are
// fenced and undone, then canceled; a held hold is voided. It shares its
// coordinator's application name, options and step hook.
type Canceler struct {
	c *Coordinator
}

// NewCanceler returns a canceler that works for c.
func NewCanceler(c *Coordinator) *Canceler { return &Canceler{c: c} }

// Cancel cancels transaction id and returns it canceled.
//
// A transaction that is initial or pending is claimed for this application
// and moved to canceling by one guarded write, if its claim is one this
// canceler's Coordinator issued (ownership is judged per Coordinator, not
// per application name: processes may share one) or it is stale: its
// lastModified older, by the server's clock, than its lease (the longest
// StaleAfter recorded in it, or this coordinator's, if longer). A fresh
// transaction another Coordinator claimed gives ErrInProgress, whatever
// its application name. The owner, if it is still running, then finds its
// claim gone and can neither move the state nor apply a leg: the rollback
// fences every account before undoing.
//
// Cancel of a held hold voids it (see Coordinator.Void). Cancel of a
// canceling transaction finishes its rollback; of a canceled one returns
// it. Applied and done transactions are past the commit point: Cancel
// returns ErrNotCancelable naming the state, and Coordinator.Reverse is the
// way to undo them.
//
// Cancel of an id that names no transaction writes a canceled placeholder
// under that id and returns it: a Transfer whose insert is still on its
// way (its reply was lost, and the caller gave up on it) then finds the id
// taken and can never become a transfer. So after an ambiguous Transfer
// error, Cancel settles the question for good: it returns the transaction
// canceled (nothing moved, nothing will), or ErrNotCancelable (it moved).
// A document the library did not write (no transaction time) gives
// ErrMalformedTxn and is left alone.
//
// Under WithHistory with an archive, Cancel of a transaction moved to the
// archive answers from the archive and writes nothing, even when the
// transaction moves while Cancel reads: the archive is read again after a
// miss in the transactions collection, and once more after a placeholder
// is written. Under WithHistory with removal (no archive), that answer
// holds only while the transaction is kept: once keep has passed and a
// Recoverer has removed it, nothing records what it did, and Cancel of its
// id writes a placeholder and answers canceled whatever it did. After an
// ambiguous error, Cancel well within keep, or use WithKey (keyed
// transactions are never removed) or an archive.
//
// Cancel is bounded as Transfer is (WithCallTimeout: its coordinator's),
// and a call whose context ends after its move to canceling was sent reads
// the transaction back and answers by what the log holds.
//
// Errors: ErrTxnNotFound (the zero id) or ErrShardKey (before a
// placeholder), nothing written; ErrNotCancelable (applied or done);
// ErrInProgress (a fresh transaction another owns, or one that kept
// moving); ErrMalformedTxn (no transaction time, or a document the
// protocol could not have written) or ErrUnknownState, left alone;
// ErrUnknownLedger for a leg on a ledger this coordinator was not given
// (its rollback is left to a coordinator that has it); for a held hold,
// Void's: ErrHoldCaptured, ErrHoldExpired, ErrInProgress, ErrClosed.
// A canceled transaction is returned with no error, whatever canceled it.
func (k *Canceler) Cancel(ctx context.Context, id bson.ObjectID) (_ *Txn, err error) {
	if k == nil || k.c == nil {
		return nil, errors.New("twopc: cancel: Canceler has no Coordinator (use NewCanceler)")
	}
	c := k.c
	ctx, b := c.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	if id.IsZero() {
		return nil, errorf("twopc: cancel: %w: the zero id", ErrTxnNotFound)
	}
	for attempt := 0; attempt < 3; attempt++ {
		r, archived, err := c.log.lookup(ctx, id)
		switch {
		case archived:
			return cancelArchived(id, r, err)
		case errors.Is(err, ErrTxnNotFound):
			if err := c.shards.log.need(ctx); err != nil {
				return nil, errorf("twopc: cancel %s: %w", id.Hex(), err)
			}
			p, err := c.log.placeholder(ctx, id)
			if errors.Is(err, errArrived) {
				continue // the transaction arrived meanwhile: cancel it
			}
			if err != nil {
				return nil, errorf("twopc: cancel %s: %w", id.Hex(), err)
			}
			// The transaction may have arrived after the lookup, finished
			// and been archived and removed before the placeholder landed:
			// then the archive holds its first record, which answers.
			if a, archived, err := c.log.archived(ctx, id); archived || err != nil {
				return cancelArchived(id, a, err)
			}
			return p.txn(), nil
		case err != nil:
			return r.txn(), errorf("twopc: cancel %s: %w", id.Hex(), err)
		}
		if r.foreign() {
			return r.txn(), errorf("twopc: cancel %s: %w: it has no transaction time; this library did not write it", id.Hex(), ErrMalformedTxn)
		}
		switch r.State {
		case StateApplied, StateDone:
			return r.txn(), errorf("twopc: cancel %s: %w: it is %s; use Reverse", id.Hex(), ErrNotCancelable, r.State)
		case StateHeld:
			return c.Void(ctx, id) // a hold made: cancel is its void
		case StateCanceled:
			return r.txn(), nil
		case StateCanceling:
			cur, err := c.rollback(ctx, r)
			if err != nil {
				return cur.txn(), errorf("twopc: cancel %s: %w", id.Hex(), err)
			}
			return cur.txn(), nil
		}
		if !c.claims.issued(r.Claim) {
			stale, err := c.log.stale(ctx, r)
			if err != nil {
				return r.txn(), errorf("twopc: cancel %s: %w", id.Hex(), err)
			}
			if !stale {
				return r.txn(), errorf("twopc: cancel %s: %w: %s, owned by %q and not stale", id.Hex(), ErrInProgress, r.State, r.Application)
			}
		}
		cur, moved, err := c.log.advance(ctx, r, move{
			step: StepCancel, from: r.State, to: StateCanceling,
			claim: r.Claim, lastModified: r.LastModified,
			newClaim: c.claims.issue(), application: c.application, lease: c.staleAfter, takeover: c.takeover(),
			set: bson.D{{Key: fieldReason, Value: reasonCanceled}},
		})
		if err != nil {
			return cur.txn(), errorf("twopc: cancel %s: %w", id.Hex(), err)
		}
		if !moved {
			continue // it moved under us: look again
		}
		cur, err = c.rollback(ctx, cur)
		if err != nil {
			return cur.txn(), errorf("twopc: cancel %s: %w", id.Hex(), err)
		}
		return cur.txn(), nil
	}
	return nil, errorf("twopc: cancel %s: %w: it kept moving", id.Hex(), ErrInProgress)
}

// cancelArchived is Cancel's answer for transaction id, which the archive
// holds (r, or err if it could not be read): final and moved out of the
// log (WithHistory), it is answered from the archive and nothing is
// written.
func cancelArchived(id bson.ObjectID, r *record, err error) (*Txn, error) {
	switch {
	case err != nil:
		return r.txn(), errorf("twopc: cancel %s: %w", id.Hex(), err)
	case r.State == StateCanceled:
		return r.txn(), nil
	default:
		return r.txn(), errorf("twopc: cancel %s: %w: it is %s (archived); use Reverse", id.Hex(), ErrNotCancelable, r.State)
	}
}

// errArrived reports that a transaction arrived under the id a placeholder
// was being written for.
var errArrived = errors.New("twopc: the transaction arrived")

// placeholder writes, or finds, the canceled placeholder for id, which no
// transaction had when the caller looked. The upsert matches only a
// placeholder: if the transaction's own insert arrived meanwhile, it fails
// on the _id's uniqueness (errArrived) and the caller looks again.
func (g *txnLog) placeholder(ctx context.Context, id bson.ObjectID) (*record, error) {
	var cur record
	start := time.Now()
	created := g.now().UTC().Truncate(time.Millisecond)
	err := g.try(ctx, StepCancel, &record{Txn: Txn{ID: id}}, func(ctx context.Context) error {
		return g.txns.FindOneAndUpdate(ctx,
			bson.D{{Key: "_id", Value: id}, {Key: fieldPlaceholder, Value: true}},
			bson.D{
				{Key: "$setOnInsert", Value: bson.D{
					{Key: fieldState, Value: StateCanceled},
					{Key: fieldReason, Value: reasonCanceled},
					{Key: fieldPlaceholder, Value: true},
					{Key: fieldApplication, Value: g.application},
					{Key: fieldCreated, Value: created},
				}},
				{Key: "$currentDate", Value: bson.D{{Key: fieldLastModified, Value: true}}},
			},
			upsertReturnAfter).Decode(&cur)
	})
	// Reported to the observers as a transaction created canceled; moved
	// only if this call wrote it (a placeholder found is an earlier
	// Cancel's: its transaction time is not this call's).
	m := move{step: StepCancel, to: StateCanceled}
	if mongo.IsDuplicateKeyError(err) {
		g.transition(ctx, id, m, start, 1, false, nil)
		return nil, errArrived
	}
	g.transition(ctx, id, m, start, 1, err == nil && cur.Created.Equal(created), err)
	if err != nil {
		return nil, err
	}
	return &cur, nil
}

// rollback takes a canceling transaction to canceled: fence and undo its
// legs on both accounts, then canceled. Anyone may roll back a canceling
// transaction, concurrently: every write is guarded and idempotent.
func (c *Coordinator) rollback(ctx context.Context, r *record) (*record, error) {
	if err := c.ledgers.fenceAndUndo(ctx, r); err != nil {
		return r, err
	}
	if err := c.at(ctx, StepCanceled, r); err != nil {
		return r, err
	}
	done, err := c.log.finish(ctx, []*record{r}, move{step: StepCanceled, from: StateCanceling, to: StateCanceled, anyClaim: true})
	if err != nil {
		return r, err
	}
	cur := r
	if len(done) == 1 {
		cur = done[0]
	} else if cur, err = c.log.read(ctx, r.ID); err != nil {
		return cur, err
	}
	c.books.releaseRefund(ctx, cur)
	if !cur.CaptureOf.IsZero() && cur.State == StateCanceled {
		(captureBook{c}).release(ctx, cur.CaptureOf, cur.ID)
	}
	return cur, nil
}

// fenceAndUndo closes the legs of canceling transaction r on every ledger
// (see Ledger.fenceAndUndo).
func (ls ledgers) fenceAndUndo(ctx context.Context, r *record) error {
	return ls.perLedger(r.legs(), func(l *Ledger, mine []leg, _ []int) error { return l.fenceAndUndo(ctx, r, mine) })
}
