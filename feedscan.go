package twopc

// The feed's reads of the log: the search for events waiting, the read of
// the orphans an epoch taken over left, and the scan they share with a
// reader's read of a batch.

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// scanOrphans reads up to limit transactions that hold a tag an epoch
// taken over left unpublished, a hundred tags a read, but those in skip
// (their tag refused by the server in this epoch: rescanning them would
// fill every round and starve the others), and returns how many it read.
func (f *Feed) scanOrphans(ctx context.Context, d *feedDoc, limit int, skip map[bson.ObjectID]bool, add func(bson.Raw) error) (int, error) {
	var tags bson.A
	for _, o := range d.Orphans {
		tags = append(tags, feedTag(o.From, o.E))
	}
	n := 0
	for start := 0; start < len(tags) && n < limit; start += 100 {
		chunk := tags[start:min(start+100, len(tags))]
		for _, slot := range feedSlots {
			if n >= limit {
				break
			}
			filter := bson.D{{Key: feedField(f.name, slot), Value: bson.D{{Key: "$in", Value: chunk}}}}
			if len(skip) > 0 {
				filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$nin", Value: skipped(skip)}}})
			}
			got, err := f.scan(ctx, filter, limit-n, add)
			if err != nil {
				return n, err
			}
			n += got
		}
	}
	return n, nil
}

// skipped is skip's transactions, for a filter's $nin.
func skipped(skip map[bson.ObjectID]bool) bson.A {
	ids := bson.A{}
	for id := range skip {
		ids = append(ids, id)
	}
	return ids
}

// scanWaiting reads up to WithFeedBatch transactions of the feed (their
// eventAt, the server's stamp of their last move to held, applied or
// canceled, at or after its since) whose slot has no tag and will have no
// other event than it shows (a query for a missing field matches null:
// the index's null range holds the transactions in flight, the held
// holds, and those waiting).
func (f *Feed) scanWaiting(ctx context.Context, d *feedDoc, slot string, skip map[bson.ObjectID]bool, add func(bson.Raw) error) (int, error) {
	states := bson.A{StateApplied, StateDone, StateCanceled}
	if slot == slotHeld {
		states = append(states, StateHeld)
	}
	filter := bson.D{
		{Key: feedField(f.name, slot), Value: nil},
		{Key: fieldEventAt, Value: bson.D{{Key: "$gte", Value: d.Since}}},
		{Key: fieldState, Value: bson.D{{Key: "$in", Value: states}}},
	}
	if len(skip) > 0 {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$nin", Value: skipped(skip)}}})
	}
	return f.scanSorted(ctx, filter, waitingSort, f.cfg.batch, add)
}

// scan reads the transactions filter matches (at most limit, 0: all) and
// adds each; it returns how many it read. It is bounded by the read bound
// (WithReadTimeout), unless ctx's deadline comes first (a Read's).
func (f *Feed) scan(ctx context.Context, filter bson.D, limit int, add func(bson.Raw) error) (int, error) {
	return f.scanSorted(ctx, filter, nil, limit, add)
}

// scanSorted is scan in sort's order (nil: the server's).
func (f *Feed) scanSorted(ctx context.Context, filter, sort bson.D, limit int, add func(bson.Raw) error) (int, error) {
	n := 0
	ctx, b := f.c.readBound(ctx, f.readName())
	defer b.end()
	err := f.c.retry(ctx, func(ctx context.Context) error {
		n = 0
		opts := options.Find()
		if sort != nil {
			opts.SetSort(sort)
		}
		if limit > 0 {
			opts.SetLimit(int64(limit))
		}
		cur, err := f.c.log.txns.Find(ctx, filter, opts)
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		for cur.Next(ctx) {
			n++
			if err := add(cur.Current); err != nil {
				return err
			}
		}
		return cur.Err()
	})
	return n, b.explain(err)
}

// waitingSort is the order the search for events waiting reads them in:
// by eventAt (the server's stamp of the move that settled them), so that
// a round bounded by WithFeedBatch takes the oldest first.
var waitingSort = bson.D{{Key: fieldEventAt, Value: 1}}
