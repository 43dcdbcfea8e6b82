package twopc

// The feed's sequencer: one at a time per feed, under the feed's lease. A
// round reads the events not yet numbered (and the tags an epoch taken
// over left unpublished), tags them with the next batch number and its
// run, one guarded single-document update each in unordered bulks, and
// then publishes the batch with one write guarded by its epoch.

import (
	"context"
	"errors"
	"maps"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Run is the feed's sequencer: it blocks, numbering the events of the
// feed's transactions into batches that readers read, until ctx is done (it returns ctx's error) or the feed is
// deleted (ErrFeedDeleted). One Run numbers a feed at a time, across
// processes: the others wait for its lease (WithFeedLease) to lapse, and
// take over. A sequencer taken over, or stopped anywhere, never makes a
// reader skip an event: a tag it wrote and did not publish is numbered
// again by the next.
//
// Each round numbers what one scan found, oldest first by the server's
// stamp: an event acknowledged before the scan for batch k began is in
// batch k or an earlier one, unless that scan found WithFeedBatch
// transactions or more (the next round, at once, takes the rest). Causes
// come first, across batches too (see Feed). It costs one write per transaction numbered (its held
// and final events together when both wait); per round two reads of the
// events waiting and two per hundred orphans the feed had; per batch one
// write of the feed's document (its publication, which stamps its lease),
// with a renewal of its lease when a third of a lease passes without
// one. Rounds run every WithFeedPoll; on a
// server with change streams, a write of the log that may settle an event
// wakes the sequencer sooner (the stream says only when to look, never
// what: a stream lost costs latency, never an event).
//
// Run is not bounded as a whole, but each of its round trips is: each
// read (a scan of a round, the feed's document, the server's clock) by
// the read bound (WithReadTimeout), each write (the tags of a round, a
// publication, the lease's take, renewal and release) by the call bound
// (WithCallTimeout). One a bound ends ends Run, as any error of a round
// does, with an error that says the server could not be reached within
// that bound; a tag whose write it cut may land later, and the next
// sequencer numbers it again, as it does a taken-over sequencer's.
//
// A transaction is the feed's when its last move to held, applied or
// canceled (the moves that give it an event) was stamped by the log
// server's clock at or after the feed's since, the server's clock when
// the feed was first run; then each of its events is numbered (a hold
// held before the feed began and ended after has its held event too). No
// coordinator's clock decides it: a transfer a coordinator whose clock
// stepped back stamped (created) before the feed began, committed after,
// is the feed's. On a sharded log the stamp is the clock of the shard
// that holds the transaction, since the router's: a move more than their
// skew after the feed began is the feed's.
func (f *Feed) Run(ctx context.Context) (err error) {
	if f.err != nil {
		return f.err
	}
	c := f.c
	t := c.trips(ctx, f.readName())
	defer func() { err = t.explain(err) }()
	if err := t.read(ctx, c.shards.log.need); err != nil {
		return err
	}
	if err := f.create(ctx, t); err != nil {
		return err
	}
	if err := f.ensureIndexes(ctx, t); err != nil {
		return errorf("twopc: feed %q: indexes: %w", f.name, err)
	}
	l := newFeedLease(c, f.id(), f.cfg.lease, f.cfg.poll, t)
	sq := &seq{f: f, l: l}
	var quiet atomic.Bool // a missing change stream said
	defer func() { l.release(!sq.dirty) }()
	for {
		raw, err := l.take(ctx, f.takeover)
		if err != nil {
			return errorf("twopc: feed %q: take the sequencer's lease: %w", f.name, err)
		}
		*sq = seq{f: f, l: l, refused: map[bson.ObjectID]bool{}, waiting: map[bson.ObjectID]bool{}, quiet: &quiet}
		err = f.step(feedTaken)
		if err == nil {
			err = sq.run(ctx, raw)
		}
		switch {
		case errors.Is(err, errLeaseLost):
			l.release(!sq.dirty)
			if err := f.step(feedLost); err != nil {
				return errorf("twopc: feed %q: %w", f.name, err)
			}
			if err := sleepCtx(ctx, f.cfg.poll); err != nil { // not at once again
				return errorf("twopc: feed %q: %w", f.name, err)
			}
			continue
		case err != nil:
			return errorf("twopc: feed %q: %w", f.name, err)
		}
	}
}

// create inserts the feed's document if there is none: since now, by the
// server's clock, nothing published, no epoch.
func (f *Feed) create(ctx context.Context, t trips) error {
	now, err := t.serverNow(ctx, f.c.log)
	if err != nil {
		return errorf("twopc: feed %q: %w", f.name, err)
	}
	err = t.write(ctx, func(ctx context.Context) error {
		_, err := f.coll().UpdateOne(ctx, bson.D{{Key: "_id", Value: f.id()}},
			bson.D{{Key: "$setOnInsert", Value: bson.D{
				{Key: "since", Value: now}, {Key: "epoch", Value: int64(0)}, {Key: "leaseMs", Value: int64(0)},
				{Key: "lastModified", Value: now}, {Key: "published", Value: int64(0)}, {Key: "run", Value: int64(0)},
				{Key: "runs", Value: bson.A{}}, {Key: "orphans", Value: bson.A{}}, {Key: "gone", Value: int64(0)},
			}}}, options.UpdateOne().SetUpsert(true))
		return err
	})
	if mongo.IsDuplicateKeyError(err) {
		err = nil // made meanwhile by another
	}
	if err != nil {
		return errorf("twopc: feed %q: %w", f.name, err)
	}
	_, err = f.readIn(ctx, t) // ErrFeedDeleted
	return err
}

// ensureIndexes makes the feed's two indexes on the log, if missing.
func (f *Feed) ensureIndexes(ctx context.Context, t trips) error {
	var specs []mongo.IndexSpecification
	err := t.read(ctx, func(ctx context.Context) (err error) {
		specs, err = f.c.log.txns.Indexes().ListSpecifications(ctx)
		return err
	})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, s := range specs {
		have[s.Name] = true
	}
	for _, slot := range feedSlots {
		err := t.write(ctx, func(ctx context.Context) error {
			return ensureIndex(ctx, f.c.log.txns, have, feedIndexName(f.name, slot), feedIndexKeys(f.name, slot))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// takeover records, in the write that takes the lease over from epoch
// cur.Epoch, the run the new holder's tags carry, and the one batch the
// run it ends may have tagged and not published (the one after the last
// published). A holder that released the lease with every tag it sent
// published (or none sent) leaves no such batch: the new holder
// continues its run, and the feed's document does not grow.
func (f *Feed) takeover(cur leaseFields) (bson.D, error) {
	if cur.Run != 0 && cur.Holder == "" && cur.Clean {
		return nil, nil
	}
	start := bson.D{{Key: "$set", Value: bson.D{{Key: "run", Value: cur.Epoch + 1}}}}
	if cur.Run == 0 {
		return start, nil // never held
	}
	if len(cur.Orphans) >= maxFeedTakeovers {
		return nil, errorf("the feed was taken over %d times: delete it and make another", len(cur.Orphans))
	}
	return append(start, bson.E{Key: "$push", Value: bson.D{{Key: "orphans", Value: feedRun{E: cur.Run, From: cur.Published + 1}}}}), nil
}

// run runs rounds under its lease, whose take returned raw, until an
// error: errLeaseLost when the epoch is no longer the feed's. The feed's
// document changes under an epoch only by its own writes, so the rounds
// keep it.
func (sq *seq) run(ctx context.Context, raw bson.Raw) error {
	f := sq.f
	if err := bson.Unmarshal(raw, &sq.d); err != nil {
		return err
	}
	watching, stop := context.WithCancel(ctx)
	wake, watched := f.watch(watching, sq.quiet)
	defer func() { stop(); <-watched }()
	for {
		full, err := sq.round(ctx)
		if err != nil {
			return err
		}
		if !full {
			if err := sq.wait(ctx, wake); err != nil {
				return err
			}
		}
		if err := sq.keep(ctx); err != nil {
			return err
		}
	}
}

// seq is a sequencer's state under one epoch: the feed's document as its
// own writes left it.
type seq struct {
	f *Feed
	l *feedLease
	d feedDoc
	// dirty says tags were sent that no publication covers yet: the epoch
	// may have left some, and is not given up clean.
	dirty bool
	// refused are the transactions whose tag the server refused in this
	// epoch, left out of its scans.
	refused map[bson.ObjectID]bool
	// waiting are the transactions a round held back (their cause not
	// numberable then: see order), left out of the next round's scans
	// and read by their _id instead, so that what waits never fills a
	// scan bounded by WithFeedBatch and the scans still reach newer
	// events.
	waiting map[bson.ObjectID]bool
	quiet   *atomic.Bool // Run's: a missing change stream was said (see watch)
}

// maxRefused bounds the transactions an epoch leaves out of its scans,
// refused and waiting each.
const maxRefused = 1000

// keep renews the lease (and reads the feed's document again) once a
// third of it passed since it was last stamped: between rounds, and
// within a round before its tags and before its publication, so that a
// long round is not taken over for want of a renewal.
func (sq *seq) keep(ctx context.Context) error {
	raw, err := sq.l.keep(ctx)
	if err != nil || raw == nil {
		return err
	}
	var d feedDoc
	if err := bson.Unmarshal(raw, &d); err != nil {
		return err
	}
	sq.d = d
	return nil
}

// candidate is a transaction a round may tag.
type candidate struct {
	rec  *record
	tags map[string]string // slot → its tag as read; absent: none
}

// round numbers batch d.Published+1: it reads the orphans' and the
// waiting events' transactions, tags them, and publishes. full reports a
// scan that found WithFeedBatch transactions (more may wait).
func (sq *seq) round(ctx context.Context) (full bool, err error) {
	f, l, d := sq.f, sq.l, &sq.d
	k := d.Published + 1
	cands := map[bson.ObjectID]*candidate{}
	var order []bson.ObjectID
	add := func(raw bson.Raw) error {
		cd, err := f.candidate(raw)
		if err != nil || cands[cd.rec.ID] != nil {
			return err
		}
		cands[cd.rec.ID] = cd
		order = append(order, cd.rec.ID)
		return nil
	}
	orphans := map[string]bool{}
	for _, o := range d.Orphans {
		orphans[feedTag(o.From, o.E)] = true
	}
	// What the last round held back is read by its _id and left out of
	// the scans, which then reach newer events (see seq.waiting).
	skip := sq.refused
	if len(sq.waiting) > 0 {
		skip = maps.Clone(sq.refused)
		ids := bson.A{}
		for id := range sq.waiting {
			skip[id] = true
			ids = append(ids, id)
		}
		sq.waiting = map[bson.ObjectID]bool{} // order records what waits still
		if _, err := f.scan(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, 0, add); err != nil {
			return false, err
		}
	}
	// At most WithFeedBatch orphans a round, on top of what waits: a
	// round stays bounded however many a takeover left (the rest, at
	// once, in the next).
	if n, err := f.scanOrphans(ctx, d, f.cfg.batch, skip, add); err != nil {
		return false, err
	} else if n >= f.cfg.batch {
		full = true
	}
	for _, slot := range feedSlots {
		n, err := f.scanWaiting(ctx, d, slot, skip, add)
		if err != nil {
			return false, err
		}
		full = full || n >= f.cfg.batch
	}
	// Causal order: each cause the feed numbers in this batch or an
	// earlier one, before its consequences (feedcausal.go).
	order, pairs, err := sq.order(ctx, cands, order, orphans)
	if err != nil {
		return false, err
	}
	tag := feedTag(k, d.Run)
	var models []mongo.WriteModel
	for _, id := range order {
		if m := f.tagModel(cands[id], tag, orphans); m != nil {
			models = append(models, m)
		}
	}
	if len(models) == 0 {
		return full, nil
	}
	if err := sq.keep(ctx); err != nil {
		return false, err
	}
	if err := f.step(feedScanned); err != nil {
		return false, err
	}
	sq.dirty = true
	// The tags go a command (WithWriteBatch statements) at a time, the
	// lease renewed between them when due: a round, however large, keeps
	// its lease while its holder works (each command well within a third
	// of a lease).
	var modified int64
	failed := map[int]error{}
	for start := 0; start < len(models); start += f.c.writeBatch {
		if start > 0 {
			if err := sq.keep(ctx); err != nil {
				return false, err
			}
		}
		chunk := models[start:min(start+f.c.writeBatch, len(models))]
		unknown := false
		_ = l.t.write(ctx, func(ctx context.Context) error {
			n, fails := f.c.log.bulkByID(ctx, chunk)
			modified += n
			for i, e := range fails {
				failed[start+i] = e
				unknown = unknown || tagUnknown(e)
			}
			return nil // a tag whose outcome the bound left unknown gives the epoch up, next
		})
		if unknown {
			// A tag whose outcome is not known may land later: give the
			// epoch up at once, so that the next records its batch as
			// orphaned (the commands left would only add to its orphans,
			// each cut by the bound in turn).
			return false, errLeaseLost
		}
	}
	for i, e := range failed {
		// Refused by the server: left out of this epoch's scans, so that
		// it holds up nothing, and said.
		id, _ := models[i].(*mongo.UpdateOneModel).Filter.(bson.D)[0].Value.(bson.ObjectID)
		if len(sq.refused) < maxRefused {
			sq.refused[id] = true
		}
		f.c.logger.Warn("twopc: feed: the server refused a tag", "feed", f.name, "transaction", id, "err", e)
	}
	if err := sq.confirm(ctx, pairs, tag, orphans); err != nil {
		return false, err
	}
	if modified == 0 {
		// Nothing changed: published only if a tag of this batch is there
		// (a first attempt whose reply was lost wrote it), else nothing
		// to publish.
		n := 0
		for _, slot := range feedSlots {
			c, err := f.scan(ctx, bson.D{{Key: feedField(f.name, slot), Value: tag}}, 1, func(bson.Raw) error { return nil })
			if err != nil {
				return false, err
			}
			n += c
		}
		if n == 0 {
			sq.dirty = false
			return full, nil
		}
	}
	if err := f.step(feedTagged); err != nil {
		return false, err
	}
	if err := sq.keep(ctx); err != nil {
		return false, err
	}
	// Published even if no statement changed a document (they were
	// numbered meanwhile, or a first attempt whose reply was lost tagged
	// them): an empty batch is harmless, tags left unpublished are not.
	sent := time.Now()
	if err := f.publish(ctx, l, d, k); err != nil {
		return false, err
	}
	sq.dirty = false
	l.stamped = sent // the publication stamped the lease (after it was sent)
	return full, f.step(feedPublished)
}

// step calls the test's hook, if any.
func (f *Feed) step(s feedStep) error {
	if f.cfg.hook == nil {
		return nil
	}
	return f.cfg.hook(s)
}

// tagModel is the write that tags cd's slots for the batch of tag: each
// slot with no tag whose event is settled (tagNone where it has none),
// and each slot holding an orphan's tag (if its slot has an event: see
// below), each guarded by its tag as read.
// A settled slot's event does not change (see slotSettled), so the state
// needs no guard. nil if nothing to tag.
func (f *Feed) tagModel(cd *candidate, tag string, orphans map[string]bool) mongo.WriteModel {
	filter := bson.D{{Key: "_id", Value: cd.rec.ID}}
	var set, unset bson.D
	for _, slot := range feedSlots {
		field := feedField(f.name, slot)
		cur, has := cd.tags[slot]
		switch {
		case has && orphans[cur]:
			// Numbered again only if its slot has an event: an orphaned
			// tag can sit on a slot with none (a tag write delivered late
			// onto a late copy of a transaction history moved). One not
			// settled goes back to waiting; one settled with no event is
			// marked as having none.
			filter = append(filter, bson.E{Key: field, Value: cur})
			_, _, ok := slotEvent(cd.rec, slot)
			switch {
			case !slotSettled(cd.rec, slot):
				unset = append(unset, bson.E{Key: field, Value: ""})
			case ok:
				set = append(set, bson.E{Key: field, Value: tag})
			default:
				set = append(set, bson.E{Key: field, Value: tagNone})
			}
		case !has && slotSettled(cd.rec, slot):
			// null, as the search: a field absent or null (not a tag).
			filter = append(filter, bson.E{Key: field, Value: nil})
			if _, _, ok := slotEvent(cd.rec, slot); ok {
				set = append(set, bson.E{Key: field, Value: tag})
			} else {
				set = append(set, bson.E{Key: field, Value: tagNone})
			}
		}
	}
	var update bson.D
	if len(set) > 0 {
		update = append(update, bson.E{Key: "$set", Value: set})
	}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	if len(update) == 0 {
		return nil
	}
	return mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(update)
}

// publish makes batch k readable: one write guarded by the epoch and the
// last published batch, recording the epoch's run at its first batch, the
// publication's time (publishedAt, the server's stamp) and, at most once a
// second, the last publication's as a mark (see feedMark). A write that
// failed is judged by the feed's document read again.
func (f *Feed) publish(ctx context.Context, l *feedLease, d *feedDoc, k int64) error {
	set := bson.D{{Key: "published", Value: k}}
	if marks := d.marksAfter(); marks != nil {
		set = append(set, bson.E{Key: "marks", Value: marks}) // the last publication's time, recorded
	}
	update := bson.D{
		{Key: "$set", Value: set},
		{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}, {Key: "publishedAt", Value: true}}},
	}
	starts := len(d.Runs) == 0 || d.Runs[len(d.Runs)-1].E != d.Run
	if starts {
		update = append(update, bson.E{Key: "$push", Value: bson.D{{Key: "runs", Value: feedRun{E: d.Run, From: k}}}})
	}
	filter := append(l.guard(), bson.E{Key: "published", Value: k - 1})
	var after feedDoc
	err := l.t.write(ctx, func(ctx context.Context) error {
		return f.coll().FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&after)
	})
	if err == nil {
		*d = after // under this epoch, the document is its own writes'
		return nil
	}
	if err := f.step(feedRereading); err != nil {
		return err
	}
	now, rerr := f.readIn(ctx, l.t)
	if rerr != nil {
		return rerr
	}
	if now.owner(k) == d.Run {
		// It landed: its reply was lost. The document is this epoch's own
		// only if no one took the lease over since: else it carries
		// another's run, which this epoch must never number into (its
		// batches may be published and read already): given up then.
		if now.Epoch != l.epoch {
			return errLeaseLost
		}
		*d = *now
		return nil
	}
	// Not published by this epoch: taken over, or its write failed. The
	// epoch is given up either way, and the next records batch k as its
	// orphan, numbering its tags again.
	return errLeaseLost
}
