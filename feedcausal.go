package twopc

// A feed's causal order across batches: an event whose cause is another
// transaction's event (a capture's, caused by its hold's held event; a
// refund's or reversal's, by its transfer's final event, or for a hold's,
// by the hold's held event and the captured events of the captures it
// takes from) is numbered in the cause's batch or a later one. A round takes a cause it did not
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

// causeOf returns the event r's final event follows as far as r itself
// says: a capture's hold's held event, a refund's (or reversal's)
// transfer's final event; ok false if none. A refund of a hold follows
// other events (see causesOf): readers, which do not read its book, sort
// it after its hold's events and captures in the batch (sortBatch).
func causeOf(r *record) (id bson.ObjectID, slot string, ok bool) {
	switch {
	case !r.CaptureOf.IsZero():
		return r.CaptureOf, slotHeld, true
	case !r.RefundOf.IsZero():
		return r.RefundOf, slotFinal, true
	}
	return bson.ObjectID{}, "", false
}

// cause is an event another follows: a transaction's slot.
type cause struct {
	id   bson.ObjectID
	slot string
}

// causesOf returns the events r's final event follows: a capture's, its
// hold's held event; a refund's, its transfer's final event, or for a
// refund of a hold (its order), the hold's held event and the captured
// events of the captures its book entry names (the captures it takes
// from), never the hold's final event, which a hold still held does not
// have yet and may never have. read says what was read: the log's
// transactions (nil: gone) and the refund books (nil: none). ok false
// while the refunded transfer or its book is not read yet: need then names
// them.
func causesOf(r *record, read func(bson.ObjectID) (*candidate, bool), books map[bson.ObjectID]*refundBook, need *causeNeed) (cs []cause, ok bool) {
	p, slot, has := causeOf(r)
	switch {
	case !has:
		return nil, true
	case r.RefundOf.IsZero():
		return []cause{{p, slot}}, true
	}
	pc, known := read(p)
	bk, booked := books[p]
	if !known {
		need.log = append(need.log, p)
	}
	if !booked {
		need.books = append(need.books, p)
	}
	if !known || !booked {
		return nil, false
	}
	if pc == nil || !pc.rec.Hold {
		return []cause{{p, slotFinal}}, true
	}
	cs = []cause{{p, slotHeld}}
	if bk != nil {
		for _, e := range bk.Refunds {
			if e.ID == r.ID {
				for _, t := range e.Captures {
					cs = append(cs, cause{t.ID, slotFinal})
				}
			}
		}
	}
	return cs, true
}

// causeNeed is what a pass of order reads next: transactions of the log,
// and refund books.
type causeNeed struct{ log, books []bson.ObjectID }

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
// of a hold, whose captures, whose hold) is a pass more.
const maxCausalPasses = 5

// order makes a round's candidates causal: it adds to cands (and to the
// order) each cause the feed numbers that is neither published nor
// among them, reading them from the log (and the refund books of the
// transfers refunds refund: see causesOf), one read of each a pass, and
// removes each consequence whose cause it cannot number in this round
// (its tag refused in this epoch, or not settled), recording it as
// waiting (see seq.waiting). It returns the order left and the
// consequences numbered with their cause, for confirm.
func (sq *seq) order(ctx context.Context, cands map[bson.ObjectID]*candidate, order []bson.ObjectID, orphans map[string]bool) ([]bson.ObjectID, []causal, error) {
	d := &sq.d
	held := map[bson.ObjectID]bool{} // held back
	looked := map[bson.ObjectID]*candidate{}
	books := map[bson.ObjectID]*refundBook{}
	read := func(id bson.ObjectID) (*candidate, bool) {
		if cd := cands[id]; cd != nil {
			return cd, true
		}
		cd, ok := looked[id]
		return cd, ok
	}
	causes := map[bson.ObjectID][]cause{} // as last resolved
	var pairs []causal
	for pass := 0; ; pass++ {
		pairs = pairs[:0]
		var need causeNeed
		changed := false
		for _, id := range order {
			cd := cands[id]
			if held[id] || !willTag(cd, slotFinal, orphans) {
				continue
			}
			cs, ok := causesOf(cd.rec, read, books, &need)
			if !ok {
				delete(causes, id)
				continue
			}
			causes[id] = cs
			unread := false
			for _, c := range cs {
				if _, ok := read(c.id); !ok {
					need.log, unread = append(need.log, c.id), true
				}
			}
			if unread {
				continue
			}
			for _, c := range cs {
				if held[id] {
					break
				}
				p, pc := c.id, cands[c.id]
				if pc == nil {
					pc = looked[p]
				}
				switch {
				case held[p]:
					held[id], changed = true, true
				case pc == nil: // gone from the log: published, or never the feed's
				case cands[p] != nil && willTag(pc, c.slot, orphans):
					pairs = append(pairs, causal{id: id, cause: p, slot: c.slot})
				case causeDone(pc, c.slot, d):
				case cands[p] == nil && !sq.refused[p] && willTag(pc, c.slot, orphans):
					cands[p] = pc // numbered in this batch, before it (readBatch)
					order = append(order, p)
					pairs = append(pairs, causal{id: id, cause: p, slot: c.slot})
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
		}
		if len(need.log) == 0 && len(need.books) == 0 && !changed {
			break
		}
		if pass == maxCausalPasses {
			// Not settled within the passes: what waits for a cause not
			// read, or held back, waits for a later round.
			for _, id := range order {
				if !willTag(cands[id], slotFinal, orphans) {
					continue
				}
				cs, ok := causes[id]
				if !ok {
					held[id] = true
				}
				for _, c := range cs {
					if _, ok := read(c.id); !ok {
						held[id] = true
					}
				}
			}
			for more := true; more; {
				more = false
				for _, id := range order {
					for _, c := range causes[id] {
						if held[c.id] && !held[id] {
							held[id], more = true, true
						}
					}
				}
			}
			break
		}
		if err := sq.readCauses(ctx, need, looked, books); err != nil {
			return nil, nil, err
		}
	}
	if len(held) == 0 {
		return order, pairs, nil
	}
	kept := order[:0]
	for _, id := range order {
		if !held[id] {
			kept = append(kept, id)
		} else if len(sq.waiting) < maxRefused {
			sq.waiting[id] = true
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

// readCauses reads what need names into looked (a transaction gone from
// the log: nil) and books (no book: nil), one read of each.
func (sq *seq) readCauses(ctx context.Context, need causeNeed, looked map[bson.ObjectID]*candidate, books map[bson.ObjectID]*refundBook) error {
	f := sq.f
	if len(need.log) > 0 {
		ids := bson.A{}
		for _, p := range need.log {
			if _, seen := looked[p]; !seen {
				looked[p] = nil
				ids = append(ids, p)
			}
		}
		if len(ids) > 0 {
			_, err := f.scan(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, 0, func(raw bson.Raw) error {
				cd, err := f.candidate(raw)
				if err == nil {
					looked[cd.rec.ID] = cd
				}
				return err
			})
			if err != nil {
				return err
			}
		}
	}
	if len(need.books) == 0 {
		return nil
	}
	ids := bson.A{}
	for _, p := range need.books {
		books[p] = nil
		ids = append(ids, p)
	}
	ctx, b := f.c.readBound(ctx, f.readName())
	defer b.end()
	err := f.c.retry(ctx, func(ctx context.Context) error {
		cur, err := f.c.books.coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		for cur.Next(ctx) {
			var bk refundBook
			if err := cur.Decode(&bk); err != nil {
				return err
			}
			books[bk.ID] = &bk
		}
		return cur.Err()
	})
	return b.explain(err)
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
