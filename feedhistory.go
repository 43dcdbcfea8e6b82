package twopc

// History waits for the feeds: a transaction leaves the log (WithHistory)
// only once every feed that numbers it published its events, and each
// such feed records, before it leaves, the last batch it had events in,
// so that a reader behind it is told (ErrFeedTruncated), never handed a
// batch with events missing.

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// feedsAllow returns those of recs (final transactions about to leave the
// log) that every feed lets go at server time now: a feed numbers the
// transactions its scans find (feedMember), and lets one go once both of
// its slots hold a tag the feed published (or tagNone) and the
// transaction's time to keep (KeepMs) has passed since that publication
// (publishedBy: a time at or after it). Before it returns, each feed's gone is
// raised to the highest batch among those let go (by every feed: one
// another feed keeps stays readable in this one); a transaction whose
// feed could not be so recorded is kept. A feed made after the feeds were
// read here has a since after every transaction history takes (their
// time to keep has passed), so it numbers none of them.
func (c *Coordinator) feedsAllow(ctx context.Context, recs []*record, now time.Time) ([]*record, error) {
	if len(recs) == 0 {
		return recs, nil
	}
	feeds, err := findAll[feedDoc](ctx, &c.config, c.feeds, bson.D{{Key: "_id", Value: feedIDs},
		{Key: "deleted", Value: bson.D{{Key: "$ne", Value: true}}}})
	if err != nil {
		return nil, errorf("read the feeds: %w", err)
	}
	if len(feeds) == 0 {
		return recs, nil
	}
	ids := bson.A{}
	proj := bson.D{}
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	for _, d := range feeds {
		name := d.name()
		for _, slot := range feedSlots {
			proj = append(proj, bson.E{Key: feedField(name, slot), Value: 1})
		}
	}
	found, err := findAll[bson.Raw](ctx, &c.config, c.log.txns, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(proj))
	if err != nil {
		return nil, errorf("read the feeds' tags: %w", err)
	}
	tags := map[bson.ObjectID]bson.Raw{}
	for _, raw := range found {
		id, _ := raw.Lookup("_id").ObjectIDOK()
		tags[id] = raw
	}
	gone := make([]int64, len(feeds))
	var out []*record
	for _, r := range recs {
		raw, ok := tags[r.ID]
		if !ok {
			continue // gone meanwhile, or not readable: left for a later pass
		}
		// The batches r's events are in, a feed each: raised into gone
		// only if every feed lets r go (one kept stays readable).
		batches := make([]int64, len(feeds))
		let := true
		for i := range feeds {
			d := &feeds[i]
			if !feedMember(r, d) {
				continue // not this feed's
			}
			name := d.name()
			for _, slot := range feedSlots {
				tag, has := raw.Lookup(feedField(name, slot)).StringValueOK()
				switch {
				case !has:
					let = false
				case tag == tagNone:
				case d.published(tag):
					b, _, _ := parseTag(tag)
					batches[i] = max(batches[i], b)
				default:
					let = false
				}
			}
		}
		// And only once its time to keep has passed since the publication
		// of its events, not only since its end: events numbered after an
		// outage of a sequencer longer than that stay readable for it.
		for i := range feeds {
			if batches[i] > 0 && feeds[i].publishedBy(batches[i]).After(now.Add(-time.Duration(r.KeepMs)*time.Millisecond)) {
				let = false
			}
		}
		if let {
			out = append(out, r)
			for i, b := range batches {
				gone[i] = max(gone[i], b)
			}
		}
	}
	for i, d := range feeds {
		if gone[i] <= d.Gone {
			continue
		}
		if _, err := c.feeds.UpdateOne(ctx, bson.D{{Key: "_id", Value: d.ID}},
			bson.D{{Key: "$max", Value: bson.D{{Key: "gone", Value: gone[i]}}}}); err != nil {
			return nil, errorf("record what left feed %s: %w", d.ID, err)
		}
	}
	return out, nil
}

// feedMember reports whether feed d numbers r's events, by the rule its
// scans read (scanWaiting): r's eventAt, the log server's stamp of its
// last move to held, applied or canceled, at or after d's since, also the
// server's clock. No host's clock decides it (created, a coordinator's
// stamp, does not). For a final transaction, as history reads, eventAt no
// longer changes: the scans and history agree on it.
func feedMember(r *record, d *feedDoc) bool { return !r.EventAt.IsZero() && !r.EventAt.Before(d.Since) }
