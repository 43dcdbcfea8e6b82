package twopc

// Waking the feed's sequencer: on a server with change streams (a replica
// set or a sharded cluster), a write that may settle an event (a
// transaction inserted, or its state moved) wakes the sequencer before
// its poll ends. The stream only says when to look: what a round numbers
// comes from its scans, never from the stream, so a stream that ends,
// lags, or whose resume point left the oplog costs latency, never an
// event. The driver resumes a stream itself where it can; one that ends
// is opened anew, from now, 30 s later.

import (
	"context"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// feedWatchRetry is how long the sequencer waits before it opens a change
// stream again after the server refused one (a standalone server, or one
// with none, as the development server) or the stream failed.
const feedWatchRetry = 30 * time.Second

// feedWatchAwait is how long one getMore of the stream waits for a change
// on the server: how late a stopped watcher notices it is stopped, so
// that it closes its cursor with a context that is not canceled.
const feedWatchAwait = 500 * time.Millisecond

// feedWakeStates are the states that settle a place of a transaction's
// events (see slotSettled): a write that moves a transaction to one
// wakes the sequencer.
var feedWakeStates = bson.A{StateHeld, StateApplied, StateDone, StateCanceled}

// feedWakePipeline selects the log's change events that may settle a
// feed's event: a transaction inserted in, or moved to, a state that
// settles one; each is reduced to its resume token, the one field a
// change stream must keep.
var feedWakePipeline = mongo.Pipeline{
	{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "operationType", Value: "insert"}, {Key: "fullDocument.state", Value: bson.D{{Key: "$in", Value: feedWakeStates}}}},
		bson.D{{Key: "updateDescription.updatedFields.state", Value: bson.D{{Key: "$in", Value: feedWakeStates}}}},
	}}}}},
	{{Key: "$project", Value: bson.D{{Key: "_id", Value: 1}}}},
}

// watch sends on wake (without blocking: one pending wake stands for any
// number) for each change event of the log that may settle an event,
// until ctx is done; then it closes the stream's cursor on the server
// and the done channel it returned. A server that refuses change streams
// is said once per Run (quiet records that it was), at info level; the
// sequencer then polls.
func (f *Feed) watch(ctx context.Context, quiet *atomic.Bool) (wake <-chan struct{}, done <-chan struct{}) {
	w, d := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(d)
		for ctx.Err() == nil {
			opening, cancel := uncanceled(ctx, 30*time.Second)
			cs, err := f.c.log.txns.Watch(opening, feedWakePipeline, options.ChangeStream().SetMaxAwaitTime(feedWatchAwait))
			cancel()
			switch {
			case err != nil:
				if quiet.CompareAndSwap(false, true) {
					f.c.logger.Info("twopc: feed: no change stream on the log; the sequencer polls (WithFeedPoll) and tries again every 30s",
						"feed", f.name, "err", err)
				}
			default:
				_ = f.step(feedWatching)
				if err := follow(ctx, cs, w); err != nil {
					f.c.logger.Info("twopc: feed: the log's change stream ended; the sequencer polls (WithFeedPoll) and opens it again in 30s",
						"feed", f.name, "err", err)
				}
			}
			if sleepCtx(ctx, feedWatchRetry) != nil {
				return
			}
		}
	}()
	return w, d
}

// follow sends on w for each event of cs until ctx is done (nil) or the
// stream fails (its error), and closes cs on the server.
func follow(ctx context.Context, cs *mongo.ChangeStream, w chan<- struct{}) error {
	defer func() {
		closing, cancel := uncanceled(ctx, 5*time.Second)
		_ = cs.Close(closing)
		cancel()
	}()
	for ctx.Err() == nil {
		next, cancel := uncanceled(ctx, feedWatchAwait+30*time.Second)
		got := cs.TryNext(next)
		cancel()
		switch {
		case got:
			select {
			case w <- struct{}{}:
			default:
			}
		case cs.Err() != nil:
			return cs.Err()
		}
	}
	return nil
}

// uncanceled is a context for one of the stream's commands: bounded by
// limit, and not canceled by ctx's end, so that a stream stopped is
// closed on the server (a canceled context sends nothing).
func uncanceled(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), limit)
}

// wait waits between rounds: until the poll passes, or the lease's next
// renewal is due, or a change wakes it (then until a quarter of the poll
// passed since the wait began, so that rounds come at most four times a
// poll however busy the log), whichever comes first.
func (sq *seq) wait(ctx context.Context, wake <-chan struct{}) error {
	cfg := &sq.f.cfg
	start := time.Now()
	d := min(cfg.poll, sq.l.due())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-wake:
		return sleepCtx(ctx, min(d, cfg.poll/4)-time.Since(start))
	case <-ctx.Done():
		return ctx.Err()
	}
}
