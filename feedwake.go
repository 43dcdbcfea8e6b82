package twopc

// Waking the feed's sequencer: on a server with change streams (a replica
// set or a sharded cluster), a write that may settle an event (a
// transaction inserted, or its state moved) wakes the sequencer before
// its poll ends. The stream only says when to look: what a round numbers
// comes from its scans, never from the stream, so a stream that ends,
// lags, or whose resume point left the oplog costs latency, never an
// event. It is opened anew (from now, with no resume token) when it ends.

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// feedWakeGap is how long a woken sequencer waits before its round, so
// that the writes of one transfer (its insert and its state moves), and
// of transfers made together, wake one round, not one each.
const feedWakeGap = 10 * time.Millisecond

// feedWatchRetry is how long the sequencer waits before it opens a change
// stream again after the server refused one (a standalone server, or one
// with none, as the development server) or the stream failed.
const feedWatchRetry = 30 * time.Second

// feedWakePipeline selects the log's change events that may settle a
// feed's event: a transaction inserted, or its state moved; each is
// reduced to its resume token, the one field a change stream must keep.
var feedWakePipeline = mongo.Pipeline{
	{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "operationType", Value: "insert"}},
		bson.D{{Key: "updateDescription.updatedFields.state", Value: bson.D{{Key: "$exists", Value: true}}}},
	}}}}},
	{{Key: "$project", Value: bson.D{{Key: "_id", Value: 1}}}},
}

// watch sends on wake (without blocking: one pending wake stands for any
// number) for each change event of the log that may settle an event,
// until ctx is done; then it closes the channel it returned. A server
// that refuses change streams is said once, at info level; the sequencer
// then polls.
func (f *Feed) watch(ctx context.Context) (wake <-chan struct{}, done <-chan struct{}) {
	w, d := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(d)
		said := false
		for ctx.Err() == nil {
			cs, err := f.c.log.txns.Watch(ctx, feedWakePipeline)
			if err == nil {
				said = false
				_ = f.step(feedWatching)
				for cs.Next(ctx) {
					select {
					case w <- struct{}{}:
					default:
					}
				}
				err = cs.Err()
				_ = cs.Close(context.WithoutCancel(ctx))
			}
			if ctx.Err() != nil {
				return
			}
			if !said {
				f.c.logger.Info("twopc: feed: no change stream on the log; the sequencer polls (WithFeedPoll) and looks for one again in 30s",
					"feed", f.name, "err", err)
				said = true
			}
			if sleepCtx(ctx, feedWatchRetry) != nil {
				return
			}
		}
	}()
	return w, d
}

// wait waits between rounds: until woken (then feedWakeGap more), the
// poll, or the lease's next renewal, whichever comes first.
func (sq *seq) wait(ctx context.Context, wake <-chan struct{}) error {
	cfg := &sq.f.cfg
	d := min(cfg.poll, max(0, cfg.lease/3-time.Since(sq.stamped)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return sleepCtx(ctx, min(d, feedWakeGap))
	case <-ctx.Done():
		return ctx.Err()
	}
}
