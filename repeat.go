package twopc

// Repeats: a call repeated with its key finds the transaction its first
// attempt made and, when that attempt left it pending with no live owner,
// takes it over and drives it to its end (PROTOCOL.md "Repeats"). The
// caller asked for the transfer again, so it rolls forward, as recovery
// rolls forward a transfer with a leg applied: its legs are applied (those
// applied already are found so), and it is committed (held, for a hold),
// or rolled back if a leg is refused by the server's own conditions.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"
)

// maxTakeoverTries bounds the takeovers one repeat tries: each that fails
// found the transaction touched since it was read (its owner renewed, or
// another process took it), and the repeat waits anew.
const maxTakeoverTries = 64

// takeoverPoll is how often a repeat waiting out another process's
// takeover lease reads the transaction again.
const takeoverPoll = 250 * time.Millisecond

// resume takes over cur, the pending transaction an earlier call made
// under t's key, once its owner is not alive (see takeoverDue), with a
// guarded change of the claim (the claim and lastModified read, never a
// reuse of the old claim). It leaves t owning it (t.o), or answered: by
// the transaction's outcome once it left pending, or ErrInProgress when
// ctx ends first. One the first attempt left canceling (its rollback
// begun, a leg refused) is taken over the same way and its rollback
// finished: the answer is the refusal, the transaction canceled.
func (e *engine) resume(ctx context.Context, t *transfer, cur *record) {
	c := e.c
	for tries := 0; tries < maxTakeoverTries; {
		if (cur.State != StatePending && cur.State != StateCanceling) || cur.Placeholder {
			t.answer(c.outcome(cur))
			return
		}
		due, err := c.takeoverDue(ctx, cur)
		if err != nil {
			t.answer(cur.txn(), errorf("twopc: transfer with key %q (transaction %s): %w: it is %s, its first attempt's claim held by %q; a repeat takes it over once that claim is %v old, or at once in the coordinator that made it when none of its calls drives it: repeat the call with the key: %w",
				cur.Key, cur.ID.Hex(), ErrInProgress, cur.State, cur.Application, cur.takeoverLease(c.staleAfter), err))
			return
		}
		if due {
			sent := c.now()
			next, moved, err := c.log.advance(ctx, cur, move{
				step: StepTakeover, from: cur.State, to: cur.State,
				claim: cur.Claim, lastModified: cur.LastModified,
				newClaim: c.claims.issue(), application: c.application,
				lease: c.staleAfter, takeover: c.takeover(),
			})
			if err != nil {
				t.answer(cur.txn(), errorf("twopc: transfer %s: taking over its first attempt: %w", cur.ID.Hex(), err))
				return
			}
			if moved && next.State == StateCanceling {
				// Its rollback, which the first attempt began, finished:
				// the answer is the refusal that began it.
				stop := c.claims.drive(next.ID) // another repeat here waits for this one
				done, err := c.rollback(ctx, next)
				stop()
				if err != nil {
					t.answer(done.txn(), errorf("twopc: transfer %s: finishing its rollback: %w", next.ID.Hex(), err))
					return
				}
				t.answer(c.outcome(done))
				return
			}
			if moved {
				t.o = &owned{rec: next, claimedAt: sent}
				t.driven = c.claims.drive(next.ID) // at once: another repeat here waits for this one
				return
			}
			tries++
			cur = next // touched since it was read: judge it again
			continue
		}
		if cur, err = c.log.read(ctx, cur.ID); err != nil {
			t.answer(nil, errorf("twopc: transfer with key %q: %w", t.rec.Key, err))
			return
		}
	}
	t.answer(cur.txn(), errorf("twopc: transfer %s: %w: it kept changing under %d takeovers", cur.ID.Hex(), ErrInProgress, maxTakeoverTries))
}

// takeoverDue reports whether pending transaction cur may be taken over
// now. Its claim is this coordinator's: as soon as no call of it drives
// the transaction (it waits for that, and reports false: read it again).
// Another process's: once cur is untouched for the takeover lease its
// owner recorded, by the server's clock (it waits out the rest, or
// takeoverPoll, and reports false). An error only when ctx ends first (or the server's clock
// cannot be read).
func (c *Coordinator) takeoverDue(ctx context.Context, cur *record) (bool, error) {
	if c.claims.issued(cur.Claim) {
		done := c.claims.drivenHere(cur.ID)
		if done == nil {
			return true, nil
		}
		select {
		case <-done:
			return false, nil
		case <-ctx.Done():
			return false, context.Cause(ctx)
		}
	}
	now, err := c.log.serverNow(ctx)
	if err != nil {
		return false, err
	}
	wait := cur.LastModified.Add(cur.takeoverLease(c.staleAfter)).Sub(now)
	if wait < 0 {
		return true, nil
	}
	// Looked at again at least every takeoverPoll: a transaction another
	// repeat took over and finished answers this one without waiting out
	// the new owner's lease.
	timer := time.NewTimer(min(wait+time.Millisecond, takeoverPoll)) // the server's clock has millisecond steps
	defer timer.Stop()
	select {
	case <-timer.C:
		return false, nil
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
}

// repeats answers, or takes over for t to finish, the transaction prior
// that an earlier call made under t's key: see resume. It reports whether
// t now owns it.
func (e *engine) repeats(ctx context.Context, t *transfer, prior *record) bool {
	if err := sameCall(prior, t.rec); err != nil || (prior.State != StatePending && prior.State != StateCanceling) || prior.Placeholder {
		t.answer(e.c.replay(prior, t.rec))
		return false
	}
	e.resume(ctx, t, prior)
	return t.o != nil
}

// errNotSameCall is sameCall's answer for a transaction made by a call
// other than the one asking.
var errNotSameCall = errors.New("twopc: another call's transaction")

// sameCall reports (nil) whether prior, the transaction under asked's key,
// is what the call asking for asked made: the same legs (a leg whose asset
// the asker did not name matches whatever asset prior's took), the same
// hold, metadata and origin.
func sameCall(prior, asked *record) error {
	if prior.Key != asked.Key || prior.Hold != asked.Hold || prior.ExpiryMs != asked.ExpiryMs || !sameLegs(prior.legs(), asked.legs(), asked.unnamed) ||
		!maps.Equal(prior.Metadata, asked.Metadata) || prior.RefundOf != asked.RefundOf ||
		prior.CaptureOf != asked.CaptureOf || !slices.Equal(prior.HoldLegs, asked.HoldLegs) {
		return errNotSameCall
	}
	return nil
}
