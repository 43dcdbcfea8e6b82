package twopc

// A hold's book: the captures reserved on the hold's own document, their
// give-back, the sweep of those that can no longer move money, and the
// hold's end by its captures (PROTOCOL.md, Holds).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// captureBook is a coordinator's hands on its holds' books: the
// captures reserved on each hold's own document (see Txn.CapturedLegs).
type captureBook struct{ c *Coordinator }

// captureEntry is one capture's reservation in its hold's book.
type captureEntry struct {
	ID      bson.ObjectID `bson:"id"`      // the capture's _id
	Amounts []int64       `bson:"amounts"` // per leg of the hold, signed as its legs; 0: none of it
	Final   bool          `bson:"final,omitempty"`
	At      time.Time     `bson:"at"`      // when reserved, by the clock corrected to the server's
	LeaseMs int64         `bson:"leaseMs"` // the capturer's lease (its StaleAfter): how long its insert may take
}

// seqCond is the condition that a hold's book is as read: capturesSeq n
// (missing while no capture was ever reserved).
func seqCond(n int64) bson.E {
	if n == 0 {
		return bson.E{Key: fieldCapturesSeq, Value: bson.D{{Key: "$exists", Value: false}}}
	}
	return bson.E{Key: fieldCapturesSeq, Value: n}
}

// reserve records e in the book of held hold h: once, and only if
// each leg's part is within what is left of it, no final capture is
// reserved and the book has room. If it does not fit, the reservations of
// captures that can no longer move money are given back (see sweep)
// and it is tried once more.
func (bk captureBook) reserve(ctx context.Context, h *record, e captureEntry) (*record, error) {
	c := bk.c
	if err := c.shards.log.need(ctx); err != nil {
		return nil, err
	}
	e.At, e.LeaseMs = c.mark.stamp(ctx), c.staleAfter.Milliseconds()
	legs := h.AllLegs()
	filter := bson.D{
		{Key: "_id", Value: h.ID},
		{Key: fieldState, Value: StateHeld},
		{Key: fieldFinalCapture, Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: fieldCaptures + ".id", Value: bson.D{{Key: "$ne", Value: e.ID}}},
		{Key: fmt.Sprintf("%s.%d", fieldCaptures, MaxCaptures-1), Value: bson.D{{Key: "$exists", Value: false}}},
	}
	inc := bson.D{{Key: fieldCapturesSeq, Value: int64(1)}}
	for i, p := range e.Amounts {
		if p == 0 {
			continue
		}
		p = max(p, -p)
		at := fmt.Sprintf("%s.%d", fieldCapturedLegs, i)
		filter = append(filter, bson.E{Key: at, Value: bson.D{{Key: "$lte", Value: max(legs[i].Amount, -legs[i].Amount) - p}}})
		inc = append(inc, bson.E{Key: at, Value: p})
	}
	update := bson.D{{Key: "$inc", Value: inc}, {Key: "$push", Value: bson.D{{Key: fieldCaptures, Value: e}}}}
	if e.Final {
		update = append(update, bson.E{Key: "$set", Value: bson.D{{Key: fieldFinalCapture, Value: e.ID}}})
	}
	for attempt := 0; ; attempt++ {
		var matched bool
		err := c.retry(ctx, func(ctx context.Context) error {
			res, err := c.log.txns.UpdateOne(ctx, filter, update)
			if err == nil {
				matched = res.MatchedCount == 1
			}
			return err
		})
		if err != nil {
			return h, errorf("twopc: capture %s: reserve: %w", h.ID.Hex(), err)
		}
		if matched {
			return h, nil
		}
		cur, err := c.log.read(ctx, h.ID)
		if err != nil {
			return h, errorf("twopc: capture %s: %w", h.ID.Hex(), err)
		}
		if i := slices.IndexFunc(cur.Captures, func(x captureEntry) bool { return x.ID == e.ID }); i >= 0 {
			if x := cur.Captures[i]; !slices.Equal(x.Amounts, e.Amounts) || x.Final != e.Final {
				return cur, errorf("%w: capture %s: a capture of %v (final: %t) is reserved under this key", ErrKeyConflict, h.ID.Hex(), x.Amounts, x.Final)
			}
			return cur, nil // reserved already: a repeat
		}
		if cur.State != StateHeld {
			return cur, c.resolved(cur, "capture")
		}
		released := 0
		if attempt == 0 {
			// A final capture lost, or canceled, or any capture that can
			// no longer move money, gives its room back first.
			if released, err = bk.sweep(ctx, cur); err != nil {
				return cur, err
			}
		}
		if released == 0 && !cur.FinalCapture.IsZero() {
			c.endCaptured(ctx, h.ID) // if its final capture committed, and no other is in flight
			return cur, errorf("twopc: capture %s: %w: its final capture %s is made or in flight", h.ID.Hex(), ErrHoldCaptured, cur.FinalCapture.Hex())
		}
		if released == 0 {
			if len(cur.Captures) >= MaxCaptures {
				return cur, errorf("%w: capture %s: %d captures made or in flight (MaxCaptures)", ErrCaptureExceeded, h.ID.Hex(), len(cur.Captures))
			}
			return cur, errorf("%w: capture %s: %v left of its legs %v; a capture of %v", ErrCaptureExceeded, h.ID.Hex(), left(cur), legAmounts(legs), e.Amounts)
		}
	}
}

// left is what is left of each leg of hold h, as absolute amounts.
func left(h *record) []int64 {
	legs := h.AllLegs()
	out := make([]int64, len(legs))
	for i, l := range legs {
		out[i] = max(l.Amount, -l.Amount)
		if i < len(h.CapturedLegs) {
			out[i] -= h.CapturedLegs[i]
		}
	}
	return out
}

// legAmounts are legs' amounts.
func legAmounts(legs []Leg) []int64 {
	out := make([]int64, len(legs))
	for i, l := range legs {
		out[i] = l.Amount
	}
	return out
}

// release gives back the reservation of capture cid in the book
// of hold hid: the entry of that id, with the amounts read, by its place
// in the array (read again if entries before it moved), so a give-back,
// whoever sends it and however often, removes at most that entry and adds
// back its own parts; only while the hold is held. A failure leaves it to
// sweep.
func (bk captureBook) release(ctx context.Context, hid, cid bson.ObjectID) {
	c := bk.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	err := func() error {
		for range MaxCaptures {
			h, err := c.log.read(ctx, hid)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(h.Captures, func(e captureEntry) bool { return e.ID == cid })
			if i < 0 || h.State != StateHeld {
				return nil // given back already, never reserved, or the hold ended
			}
			e := h.Captures[i]
			at := fmt.Sprintf("%s.%d.", fieldCaptures, i)
			filter := bson.D{{Key: "_id", Value: hid}, {Key: fieldState, Value: StateHeld},
				{Key: at + "id", Value: cid}, {Key: at + "amounts", Value: e.Amounts}}
			inc := bson.D{{Key: fieldCapturesSeq, Value: int64(1)}}
			for j, p := range e.Amounts {
				if p != 0 {
					inc = append(inc, bson.E{Key: fmt.Sprintf("%s.%d", fieldCapturedLegs, j), Value: -max(p, -p)})
				}
			}
			update := bson.D{{Key: "$inc", Value: inc}, {Key: "$pull", Value: bson.D{{Key: fieldCaptures, Value: bson.D{{Key: "id", Value: cid}}}}}}
			if e.Final {
				filter = append(filter, bson.E{Key: fieldFinalCapture, Value: cid})
				update = append(update, bson.E{Key: "$unset", Value: bson.D{{Key: fieldFinalCapture, Value: ""}}})
			}
			res, err := c.log.txns.UpdateOne(ctx, filter, update)
			if err != nil || res.ModifiedCount == 1 {
				return err
			}
		}
		return errors.New("the book kept changing")
	}()
	if err != nil {
		c.logger.Info("twopc: a canceled capture's reservation was not given back yet; the next call on the hold that needs it does",
			"hold", hid.Hex(), "capture", cid.Hex(), "error", err)
	}
}

// fate is what became of the capture an entry of a hold's book reserved.
type fate int

const (
	fateInFlight  fate = iota // not decided: pending, or not yet inserted within its lease
	fateLost                  // not inserted, and reserved longer ago than its lease
	fateCommitted             // this hold's capture, committed: its parts moved, or will
	fateCanceled              // it will never move money: canceled, a placeholder, or its id another transaction's
)

// fateOf reads what became of the capture of entry e of hold h, at now
// (the clock corrected to the server's). An id that names a transaction
// other than this hold's capture of e's amounts (a key used for another
// hold's capture, or for a transfer) can never become that capture:
// canceled.
func (bk captureBook) fateOf(ctx context.Context, h *record, e captureEntry, now time.Time) (fate, error) {
	r, _, err := bk.c.log.lookup(ctx, e.ID)
	switch {
	case errors.Is(err, ErrTxnNotFound):
		if now.Sub(e.At) < max(time.Duration(e.LeaseMs)*time.Millisecond, bk.c.staleAfter) {
			return fateInFlight, nil // its insert may be on its way
		}
		return fateLost, nil
	case err != nil:
		return fateInFlight, errorf("twopc: hold %s: read capture %s: %w", h.ID.Hex(), e.ID.Hex(), err)
	case r.Placeholder || !captureOf(r, h, e) || r.State == StateCanceled:
		return fateCanceled, nil
	case r.State.Committed():
		return fateCommitted, nil
	}
	return fateInFlight, nil
}

// captureOf reports whether r is hold h's capture that entry e reserved:
// it names h, and its legs take e's amounts from h's legs.
func captureOf(r, h *record, e captureEntry) bool {
	legs := r.AllLegs()
	if r.CaptureOf != h.ID || len(r.HoldLegs) != len(legs) {
		return false
	}
	want := 0
	for _, a := range e.Amounts {
		if a != 0 {
			want++
		}
	}
	for j, i := range r.HoldLegs {
		if i < 0 || i >= len(e.Amounts) || e.Amounts[i] != legs[j].Amount {
			return false
		}
	}
	return want == len(legs)
}

// sweep gives back the reservations in hold h's book of captures that
// can no longer move money: canceled, named by another transaction, or
// never inserted and reserved longer ago than the longer of their
// capturer's lease and this coordinator's, which Cancel then settles (a
// placeholder refuses a late insert). It returns how many it gave back.
func (bk captureBook) sweep(ctx context.Context, h *record) (int, error) {
	c := bk.c
	now := c.mark.stamp(ctx)
	released := 0
	for _, e := range h.Captures {
		f, err := bk.fateOf(ctx, h, e, now)
		if err != nil {
			return released, err
		}
		if f == fateLost {
			if _, err := NewCanceler(c).Cancel(ctx, e.ID); err != nil {
				continue // settled by a later sweep
			}
			if f, err = bk.fateOf(ctx, h, e, now); err != nil {
				return released, err
			}
		}
		if f == fateCanceled {
			bk.release(ctx, h.ID, e.ID)
			released++
		}
	}
	return released, nil
}

// settled reads hold h's book until every capture reserved in it is
// committed: those that can no longer move money are given back first
// (sweep). It returns the hold as then read, or ErrInProgress if a
// capture is still in flight (its caller live, or its lease not yet run
// out).
func (bk captureBook) settled(ctx context.Context, h *record, op string) (*record, error) {
	c := bk.c
	for range 2 {
		now := c.mark.stamp(ctx)
		all := true
		for _, e := range h.Captures {
			f, err := bk.fateOf(ctx, h, e, now)
			if err != nil {
				return h, err
			}
			all = all && f == fateCommitted
		}
		if all {
			return h, nil
		}
		if _, err := bk.sweep(ctx, h); err != nil {
			return h, err
		}
		cur, err := c.log.read(ctx, h.ID)
		if err != nil {
			return h, errorf("twopc: %s %s: %w", op, h.ID.Hex(), err)
		}
		h = cur
	}
	return h, errorf("twopc: %s %s: %w: a capture of it is in flight", op, h.ID.Hex(), ErrInProgress)
}

// complete reports whether hold h's book ends it: a final capture
// reserved, or every leg reserved whole.
func complete(h *record) bool {
	if !h.FinalCapture.IsZero() {
		return true
	}
	for _, l := range left(h) {
		if l != 0 {
			return false
		}
	}
	return len(h.Captures) > 0
}

// endedAmounts are the fields the write that ends hold h sets (see
// Txn.Captured, Txn.Released), from its book as read, every capture in it
// committed (the write is guarded by the book's capturesSeq): what its
// captures credited in all, in the asset of its first leg (written even
// if 0 when byCaptures, the hold ended by them; else only above 0), and
// what they left, which returns to the debited accounts (only above 0).
func endedAmounts(h *record, byCaptures bool) bson.D {
	var captured int64
	legs := h.AllLegs()
	for i, taken := range h.CapturedLegs {
		if i < len(legs) && legs[i].Amount > 0 && legs[i].Asset == legs[0].Asset {
			captured += taken
		}
	}
	var set bson.D
	if captured > 0 || byCaptures {
		set = append(set, bson.E{Key: fieldCaptured, Value: captured})
	}
	if released := h.Value - captured; released > 0 {
		set = append(set, bson.E{Key: fieldReleased, Value: released})
	}
	return set
}

// endCaptured ends hold hid by its captures, if its book is complete
// (complete) and every capture in it committed: held → applied, guarded
// by the book as read (capturesSeq), with captured what they credited;
// then settles it, which releases on each leg's account what no capture
// took and pulls the hold's markers. Otherwise it leaves it: the last
// capture to commit, or a Recoverer pass, ends it. Failures are logged:
// recovery ends it.
func (c *Coordinator) endCaptured(ctx context.Context, hid bson.ObjectID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if err := (captureBook{c}).end(ctx, hid); err != nil && !errors.Is(err, ErrInProgress) {
		c.logger.Info("twopc: a captured hold was not ended yet; a Recoverer pass ends it", "hold", hid.Hex(), "error", err)
	}
}

// end is endCaptured's work; ErrInProgress if a capture is in flight.
func (bk captureBook) end(ctx context.Context, hid bson.ObjectID) error {
	c := bk.c
	h, err := c.log.read(ctx, hid)
	if err != nil {
		return err
	}
	if h.State != StateHeld || !complete(h) {
		if h.State == StateApplied {
			_, errs := c.settleCommitted(ctx, []*record{h}, c.syncSettle)
			return errs[0]
		}
		return nil
	}
	if h, err = bk.settled(ctx, h, "capture"); err != nil {
		return err
	}
	if !complete(h) {
		return nil // a canceled capture gave back its part
	}
	cur, moved, err := c.log.advance(ctx, h, move{
		step: StepCapture, from: StateHeld, to: StateApplied, anyClaim: true, heldAt: h.HeldAt, book: true, seq: h.CapturesSeq,
		newClaim: c.claims.issue(), application: c.application, lease: c.staleAfter, takeover: c.takeover(),
		set: endedAmounts(h, true),
	})
	if err != nil || !moved {
		return err
	}
	_, errs := c.settleCommitted(ctx, []*record{cur}, c.syncSettle)
	return errs[0]
}
