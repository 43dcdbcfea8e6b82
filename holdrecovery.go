package twopc

// Holds in a recovery pass: the holds past their expiry voided, and the
// held holds not looked at before checked against their accounts (a copy
// a late insert brought back is voided).

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// expireHolds is a recovery pass's part for holds: it voids every held
// hold past its expiry at server time now (see expire).
func (r *Recoverer) expireHolds(ctx context.Context, b trips, now time.Time, rep *RecoveryReport, fail func(error)) error {
	c := r.c
	held := bson.D{{Key: fieldState, Value: StateHeld}, {Key: fieldExpiryMs, Value: bson.D{{Key: "$gt", Value: 0}}}}
	return r.each(ctx, b, held, fail, func(recs []*record) {
		for _, t := range recs {
			if b.tripped() {
				return
			}
			if !t.expired(now) {
				continue
			}
			if err := c.ledgers.knows(t.legs()); err != nil {
				fail(errorf("transaction %s: %w: left to a recoverer that has it", t.ID.Hex(), err))
				continue
			}
			start := time.Now()
			var moved bool
			err := b.write(ctx, func(ctx context.Context) (err error) {
				_, moved, err = c.expire(ctx, t)
				return err
			})
			// A capture reserved in time and in flight: once it commits,
			// or is given back, the next pass expires the rest.
			outcome := holdOutcome(err, moved, rep, fail, "expiring", t)
			if outcome == OutcomeMoved {
				rep.Expired++
			}
			r.report(ctx, t.ID, StateHeld, RecoveryExpire, start, outcome, StepVoid, err)
		}
	})
}

// endHolds is a recovery pass's part for holds captured in parts: every
// held hold whose book is complete (a final capture reserved, or every leg
// reserved whole) is ended by its captures, once each of them committed
// (see endCaptured): the capture that completed it ends it after its
// commit, and this pass ends one whose capture's caller died first.
func (r *Recoverer) endHolds(ctx context.Context, b trips, rep *RecoveryReport, fail func(error)) error {
	c := r.c
	held := bson.D{{Key: fieldState, Value: StateHeld}, {Key: fieldCaptures + ".0", Value: bson.D{{Key: "$exists", Value: true}}}}
	return r.each(ctx, b, held, fail, func(recs []*record) {
		for _, t := range recs {
			if b.tripped() {
				return
			}
			if !complete(t) {
				continue
			}
			if err := c.ledgers.knows(t.legs()); err != nil {
				fail(errorf("transaction %s: %w: left to a recoverer that has it", t.ID.Hex(), err))
				continue
			}
			start := time.Now()
			err := b.write(ctx, func(ctx context.Context) error { return (captureBook{c}).end(ctx, t.ID) })
			outcome := holdOutcome(err, true, rep, fail, "ending its captures", t)
			if outcome == OutcomeMoved {
				rep.Settled++
			}
			r.report(ctx, t.ID, StateHeld, RecoverySettle, start, outcome, StepCapture, err)
		}
	})
}

// holdOutcome is what a recovery pass reports of its move of hold t: an
// error (passed to fail, as doing what), not moved (a capture in flight,
// ErrInProgress: the next pass sees it; or another call decided first,
// counted skipped), or moved.
func holdOutcome(err error, moved bool, rep *RecoveryReport, fail func(error), doing string, t *record) Outcome {
	switch {
	case errors.Is(err, ErrInProgress), err == nil && !moved:
		rep.Skipped++
		return OutcomeNotMoved
	case err != nil:
		fail(errorf("transaction %s: %s: %w", t.ID.Hex(), doing, err))
		return OutcomeError
	}
	return OutcomeMoved
}

// confirmHolds is a recovery pass's check of the held holds it has not
// looked at before: are their legs on their accounts? A hold becomes held
// only once every leg applied, and its markers leave its accounts only
// after it leaves held, so a hold read held, whose accounts are read next,
// and which a write guarded by its state and heldAt then finds still held,
// had every marker on its accounts when they were read.
//
// A held hold none of whose legs is on its accounts, each of which is
// closed to it (the leg's fence there, or the fence line at or past the
// hold's time), is therefore a copy: the transaction was final and removed
// from the log (WithHistory), and its insert and its commit to held,
// delivered again by the network, brought it back with no leg applied
// (the fence lines refuse them). Both are required, not the markers'
// absence alone, so that a read of an account that lags (another
// deployment just failed over, a write concern below majority) cannot
// void a genuine hold. Nobody would capture, void or expire it, so it would stay held
// for good; it is voided to canceled (reason "late_copy"), which moves no
// money, and WithHistory then removes it in turn. A hold whose legs are
// all on their accounts is marked (onAccounts) so that later passes do not
// read its accounts again; one with some legs on and some not is reported
// (only a hand edit makes one) and left.
func (r *Recoverer) confirmHolds(ctx context.Context, b trips, rep *RecoveryReport, fail func(error)) error {
	unseen := bson.D{{Key: fieldState, Value: StateHeld}, {Key: fieldOnAccounts, Value: bson.D{{Key: "$exists", Value: false}}}}
	return r.each(ctx, b, unseen, fail, func(recs []*record) {
		for _, t := range recs {
			if b.tripped() {
				return
			}
			_ = b.write(ctx, func(ctx context.Context) error { return r.confirmHold(ctx, t, rep, fail) })
		}
	})
}

// confirmHold is confirmHolds for held hold t; it returns the error it
// passed to fail, if any.
func (r *Recoverer) confirmHold(ctx context.Context, t *record, rep *RecoveryReport, fail func(error)) (failed error) {
	c := r.c
	outer := fail
	fail = func(err error) { failed = err; outer(err) }
	legs := t.legs()
	if err := c.ledgers.knows(legs); err != nil {
		fail(errorf("transaction %s: %w: left to a recoverer that has it", t.ID.Hex(), err))
		return
	}
	accts, err := c.inspect(ctx, t, legs)
	if err != nil {
		fail(errorf("transaction %s: %w", t.ID.Hex(), err))
		return
	}
	on, closed := 0, 0
	for i, l := range legs {
		switch v, why := judge(accts[i], t, l); {
		case v == legApplied:
			on++
		case closedVerdict(v, why):
			closed++
		}
	}
	switch {
	case on == len(legs):
		err := c.retry(ctx, func(ctx context.Context) error {
			_, err := c.log.txns.UpdateOne(ctx,
				bson.D{{Key: "_id", Value: t.ID}, {Key: fieldState, Value: StateHeld}, {Key: fieldHeldAt, Value: t.HeldAt}},
				bson.D{{Key: "$set", Value: bson.D{{Key: fieldOnAccounts, Value: true}}}})
			return err
		})
		if err != nil {
			fail(errorf("transaction %s: %w", t.ID.Hex(), err))
		}
	case closed == len(legs):
		start := time.Now()
		m := voidMove(c, t, reasonLateCopy)
		m.heldAt = t.HeldAt
		cur, moved, err := c.log.advance(ctx, t, m)
		if err == nil && moved {
			_, err = c.rollback(ctx, cur)
		}
		outcome := outcomeOf(moved, err)
		switch {
		case err != nil:
			fail(errorf("transaction %s: voiding a held copy: %w", t.ID.Hex(), err))
		case !moved:
			rep.Skipped++ // captured or voided first: not a copy after all, or decided
		default:
			rep.RolledBack++
		}
		r.report(ctx, t.ID, StateHeld, RecoveryRollBack, start, outcome, StepVoid, err)
	default:
		// Captured or voided since it was read (its markers leave
		// after it leaves held), or a read that lags: look again.
		now, err := c.log.read(ctx, t.ID)
		if err == nil && (now.State != StateHeld || !now.HeldAt.Equal(t.HeldAt)) {
			return
		}
		fail(errorf("transaction %s: held, but %d of its %d legs are on their accounts and %d closed to it; left as it is", t.ID.Hex(), on, len(legs), closed))
	}
	return
}
