package twopc

// A feed's causal order across batches: an event whose cause is another
// transaction's event (a capture's, caused by its hold's held event; a
// refund's or reversal's, by its transfer's final event) is numbered in
// the cause's batch or a later one. A round takes a cause it did not
// find into its batch (a scan's limit left it out, or its tag is an
// orphan), holds back an event whose cause it cannot number now, and,
// once its tags are written, checks that each cause it numbered with its
// consequence holds the batch's tag (a late tag write of a taken-over
// epoch can land between its scan and its tags), numbering the cause
// again or holding the consequence back.

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// causeOf returns the event r's final event follows: a capture's hold's
// held event, a refund's (or reversal's) transfer's final event; ok false
// if none.
func causeOf(r *record) (id bson.ObjectID, slot string, ok bool) {
	switch {
	case !r.CaptureOf.IsZero():
		return r.CaptureOf, slotHeld, true
	case !r.RefundOf.IsZero():
		return r.RefundOf, slotFinal, true
	}
	return bson.ObjectID{}, "", false
}

// willTag reports whether a round tags cd's slot with an event: the slot
// settled, with an event, and without a tag or with an orphan's.
func willTag(cd *candidate, slot string, orphans map[string]bool) bool {
	if !slotSettled(cd.rec, slot) {
		return false
	}
	if _, _, ok := slotEvent(cd.rec, slot); !ok {
		return false
	}
	cur, has := cd.tags[slot]
	return !has || orphans[cur]
}

// causal is a consequence numbered in a round with its cause.
type causal struct {
	id, cause bson.ObjectID
	slot      string // the cause's
}

// maxCausalPasses bounds the passes of order: a cause's cause (a refund
// of a capture, whose hold) is a pass more.
const maxCausalPasses = 4

// order makes a round's candidates causal: it adds to cands (and to the
// order) each cause the feed numbers that is neither published nor
// among them, reading them from the log (one read a pass), and removes
// each consequence whose cause it cannot number in this round (its tag
// refused in this epoch, or not settled). It returns the order left and
// the consequences numbered with their cause, for confirm.
func (sq *seq) order(ctx context.Context, cands map[bson.ObjectID]*candidate, order []bson.ObjectID, orphans map[string]bool) ([]bson.ObjectID, []causal, error) {
	f, d := sq.f, &sq.d
	held := map[bson.ObjectID]bool{} // held back
	looked := map[bson.ObjectID]*candidate{}
	var pairs []causal
	for pass := 0; ; pass++ {
		pairs = pairs[:0]
		var need bson.A
		changed := false
		for _, id := range order {
			cd := cands[id]
			if held[id] || !willTag(cd, slotFinal, orphans) {
				continue
			}
			p, slot, ok := causeOf(cd.rec)
			if !ok {
				continue
			}
			pc := cands[p]
			if pc == nil {
				var seen bool
				pc, seen = looked[p]
				if !seen {
					need = append(need, p)
					continue
				}
			}
			switch {
			case held[p]:
				held[id], changed = true, true
			case pc == nil: // gone from the log: published, or never the feed's
			case cands[p] != nil && willTag(pc, slot, orphans):
				pairs = append(pairs, causal{id: id, cause: p, slot: slot})
			case causeDone(pc, slot, d):
			case cands[p] == nil && !sq.refused[p] && willTag(pc, slot, orphans):
				cands[p] = pc // numbered in this batch, before it (readBatch)
				order = append(order, p)
				pairs = append(pairs, causal{id: id, cause: p, slot: slot})
				changed = true
			default: // refused in this epoch, or not settled: later
				held[id], changed = true, true
				if sq.refused[p] && len(sq.refused) < maxRefused {
					// Its cause left out of this epoch's scans: it is too,
					// not to fill every round's scan (a later epoch
					// numbers both).
					sq.refused[id] = true
				}
			}
		}
		if len(need) == 0 && !changed {
			break
		}
		if pass == maxCausalPasses {
			// Not settled within the passes: what waits for a cause not
			// read, or held back, waits for a later round.
			for _, id := range order {
				if p, _, ok := causeOf(cands[id].rec); ok && cands[p] == nil {
					if _, seen := looked[p]; !seen {
						held[id] = true
					}
				}
			}
			for more := true; more; {
				more = false
				for _, id := range order {
					if p, _, ok := causeOf(cands[id].rec); ok && held[p] && !held[id] {
						held[id], more = true, true
					}
				}
			}
			break
		}
		if len(need) > 0 {
			for _, p := range need {
				looked[p.(bson.ObjectID)] = nil
			}
			_, err := f.scan(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: need}}}}, 0, func(raw bson.Raw) error {
				cd, err := f.candidate(raw)
				if err == nil {
					looked[cd.rec.ID] = cd
				}
				return err
			})
			if err != nil {
				return nil, nil, err
			}
		}
	}
	if len(held) == 0 {
		return order, pairs, nil
	}
	kept := order[:0]
	for _, id := range order {
		if !held[id] {
			kept = append(kept, id)
		}
	}
	kp := pairs[:0]
	for _, p := range pairs {
		if !held[p.id] && !held[p.cause] {
			kp = append(kp, p)
		}
	}
	return kept, kp, nil
}

// causeDone reports whether the cause's slot, as read, needs nothing of
// this round: tagged for a batch published, marked as having no event,
// or not an event the feed numbers (the transaction not the feed's; a
// hold still held will be, once it ends, so its held event is numbered
// now).
func causeDone(pc *candidate, slot string, d *feedDoc) bool {
	cur, has := pc.tags[slot]
	switch {
	case has && (cur == tagNone || d.published(cur)):
		return true
	case slot == slotHeld && pc.rec.State == StateHeld:
		return false
	}
	return !feedMember(pc.rec, d)
}

// candidate reads a transaction document as a round's candidate.
func (f *Feed) candidate(raw bson.Raw) (*candidate, error) {
	var r record
	if err := bson.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	cd := &candidate{rec: &r, tags: map[string]string{}}
	for _, slot := range feedSlots {
		if s, ok := raw.Lookup(feedField(f.name, slot)).StringValueOK(); ok {
			cd.tags[slot] = s
		}
	}
	return cd, nil
}

// confirm checks, once a round's tags are written, that the cause of each
// consequence it numbered with its cause holds the batch's tag, tag: a
// late tag write of a taken-over epoch may have landed on the cause
// between the round's scan and its tags (an orphan's tag, which the
// round's guarded write then did not match), or the server refused the
// cause's. A cause holding an orphan's tag is numbered again into the
// batch (guarded by that tag); a consequence whose cause still does not
// hold the batch's tag goes back to waiting (its tag removed, guarded by
// its value). An outcome not known gives the epoch up (errLeaseLost), as
// the round's tags do.
func (sq *seq) confirm(ctx context.Context, pairs []causal, tag string, orphans map[string]bool) error {
	if len(pairs) == 0 {
		return nil
	}
	f := sq.f
	read := func() (map[bson.ObjectID]bson.Raw, error) {
		ids := bson.A{}
		for _, p := range pairs {
			ids = append(ids, p.cause)
		}
		got := map[bson.ObjectID]bson.Raw{}
		_, err := f.scan(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, 0, func(raw bson.Raw) error {
			id, _ := raw.Lookup("_id").ObjectIDOK()
			got[id] = raw
			return nil
		})
		return got, err
	}
	has := func(got map[bson.ObjectID]bson.Raw, p causal) (string, bool) {
		return got[p.cause].Lookup(feedField(f.name, p.slot)).StringValueOK()
	}
	got, err := read()
	if err != nil {
		return err
	}
	var again []mongo.WriteModel
	renumbered := map[bson.ObjectID]bool{}
	for _, p := range pairs {
		cur, ok := has(got, p)
		if ok && orphans[cur] && !renumbered[p.cause] {
			renumbered[p.cause] = true
			field := feedField(f.name, p.slot)
			again = append(again, mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: "_id", Value: p.cause}, {Key: field, Value: cur}}).
				SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: tag}}}}))
		}
	}
	if len(again) > 0 {
		if err := sq.tagWrite(ctx, again); err != nil {
			return err
		}
		if got, err = read(); err != nil {
			return err
		}
	}
	var back []mongo.WriteModel
	for _, p := range pairs {
		if cur, ok := has(got, p); ok && cur == tag {
			continue
		}
		field := feedField(f.name, slotFinal)
		back = append(back, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: p.id}, {Key: field, Value: tag}}).
			SetUpdate(bson.D{{Key: "$unset", Value: bson.D{{Key: field, Value: ""}}}}))
	}
	if len(back) == 0 {
		return nil
	}
	return sq.tagWrite(ctx, back)
}

// tagWrite sends models, a round's own statements beside its tags, under
// the call bound: errLeaseLost if an outcome is not known; a statement the
// server refused is logged.
func (sq *seq) tagWrite(ctx context.Context, models []mongo.WriteModel) error {
	f := sq.f
	unknown := false
	_ = sq.l.t.write(ctx, func(ctx context.Context) error {
		_, fails := f.c.log.bulkByID(ctx, models)
		for _, e := range fails {
			unknown = unknown || tagUnknown(e)
			if !tagUnknown(e) {
				f.c.logger.Warn("twopc: feed: the server refused a write of causal order", "feed", f.name, "err", e)
			}
		}
		return nil
	})
	if unknown {
		return errLeaseLost
	}
	return nil
}

// tagUnknown reports whether e, a tag statement's error, leaves its
// outcome unknown (the command not answered, or a transient error): not
// a refusal by the server.
func tagUnknown(e error) bool {
	var we mongo.WriteError
	return !errors.As(e, &we) || transientCodes[we.Code]
}
