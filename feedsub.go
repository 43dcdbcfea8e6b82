package twopc

// A subscriber group: one handler at a time per group, across processes,
// under the group's lease, its position saved in the group's document
// after each batch of events the handler took.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// groupPrefix starts the document ids of feed name's subscriber groups.
func groupPrefix(name string) string { return "group:" + name + ":" }

// Subscribe hands the feed's events to h, a slice at a time, from where
// group last saved its position (the start for a new group), following
// the feed, until ctx is done (it returns ctx's error), h returns an
// error (Subscribe returns it; the position stays before those events),
// or the feed is deleted. One Subscribe of a group runs h at a time,
// across processes: the others wait for its lease (WithFeedLease) to
// lapse. The position is saved after h returns nil, so every event is
// handled at least once: after a crash, or a handler that outlived its
// lease, the events since the last save are handed again, with the same
// Event.ID. A handler that keeps its effects and e.Pos of the last event
// together, and skips the IDs it has, handles each exactly once. group is
// 1 to 32 of a-z, 0-9 and _.
//
// A stop is clean: when ctx ends while h runs, h's own context stays live
// for a grace (the renewals stop; it ends nine tenths of a lease after
// the last one, before another subscriber can take the group over), and
// if h returns nil within it, its events are acknowledged (the position
// saved) before Subscribe returns ctx's error. On return the group's
// lease is given up, so a restart resumes at once.
//
// Subscribe is not bounded as a whole, but each of its round trips is:
// each page of events it reads is a Read, bounded as Read is
// (WithReadTimeout), and so are its other reads; each write (a save of
// its position, the lease's take and renewals) is bounded by the call
// bound (WithCallTimeout). One a bound ends ends Subscribe with its error;
// the position stays where it was last saved. The handler is not bounded:
// it runs under Subscribe's context while it keeps the lease.
func (f *Feed) Subscribe(ctx context.Context, group string, h func(context.Context, []Event) error) (err error) {
	if f.err != nil {
		return f.err
	}
	if !feedName.MatchString(group) {
		return errorf("%w: group %q: a name is 1 to 32 of a-z, 0-9 and _", ErrInvalidFeed, group)
	}
	if h == nil {
		return errorf("%w: nil handler", ErrInvalidFeed)
	}
	t := f.c.trips(ctx, fmt.Sprintf("feed %q group %q", f.name, group))
	defer func() { err = t.explain(err) }()
	d, err := f.readIn(ctx, t)
	if err != nil {
		return err // deleted
	}
	// A new group starts at what the feed keeps now, saved with it: if
	// history moves on before its first save, it is told
	// (ErrFeedTruncated), not moved past events it never acknowledged.
	start := feedPosition{b: d.Gone + 1}
	id := groupPrefix(f.name) + group
	now, err := t.serverNow(ctx, f.c.log)
	if err != nil {
		return errorf("twopc: feed %q group %q: %w", f.name, group, err)
	}
	err = t.write(ctx, func(ctx context.Context) error {
		_, err := f.coll().UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "epoch", Value: int64(0)}, {Key: "leaseMs", Value: int64(0)},
				{Key: "lastModified", Value: now}, {Key: "pos", Value: string(start.String())},
				{Key: "posB", Value: start.b}, {Key: "posN", Value: start.n}}}}, options.UpdateOne().SetUpsert(true))
		return err
	})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return errorf("twopc: feed %q group %q: %w", f.name, group, err)
	}
	l := newFeedLease(f.c, id, f.cfg.lease, f.cfg.poll, t)
	defer l.release(true)
	for {
		raw, err := l.take(ctx, nil)
		if err != nil {
			return errorf("twopc: feed %q group %q: take its lease: %w", f.name, group, err)
		}
		err = f.deliver(ctx, l, raw, h)
		if !errors.Is(err, errLeaseLost) {
			return err
		}
	}
}

// deliver hands events to h under lease l (whose take returned raw) and
// saves the position after each slice (or when it moved over batches with
// no event), renewing the lease when a third of it passed since it was
// last stamped, until an error: errLeaseLost when the group was taken over
// (or the feed deleted).
func (f *Feed) deliver(ctx context.Context, l *feedLease, raw bson.Raw, h func(context.Context, []Event) error) error {
	p, _ := raw.Lookup("pos").StringValueOK()
	pos := Position(p)
	for {
		evs, next, err := f.Read(ctx, pos, f.cfg.slice)
		if err != nil {
			return err
		}
		if len(evs) > 0 {
			// Renewed first if due: the handler's watchdog counts from
			// the last stamp, and a Read (any number of batches) may
			// have taken most of a lease since. Refused if another
			// subscriber took the group meanwhile.
			if _, err := l.keep(ctx); err != nil {
				return err
			}
			if err := f.handle(ctx, l, h, evs); err != nil {
				return err
			}
		}
		if stopped := ctx.Err(); stopped != nil {
			// Told to stop while the handler worked, and it finished in
			// its grace: what it handled is saved (on a context of its
			// own, the write bounded as any), and the stop said.
			if next != pos {
				if err := f.save(context.WithoutCancel(ctx), l, next); err != nil {
					return err
				}
			}
			return stopped
		}
		if next != pos {
			if err := f.save(ctx, l, next); err != nil {
				return err
			}
			pos = next
		}
		if len(evs) == 0 {
			if err := sleepCtx(ctx, min(f.cfg.poll, l.due())); err != nil {
				return err
			}
		}
		if _, err = l.keep(ctx); err != nil {
			return err
		}
	}
}

// save saves next as the group's position under lease l: guarded by the
// epoch and by the position saved, never behind it, so a save delivered
// again late (the network's duplicate of an earlier one) cannot move the
// group back. errLeaseLost if the group was taken over.
func (f *Feed) save(ctx context.Context, l *feedLease, next Position) error {
	np, err := parsePosition(next)
	if err != nil {
		return err
	}
	filter := append(l.guard(), np.notBefore()...)
	var res *mongo.UpdateResult
	sent := time.Now()
	err = l.t.write(ctx, func(ctx context.Context) (err error) {
		res, err = f.coll().UpdateOne(ctx, filter, bson.D{
			{Key: "$set", Value: bson.D{{Key: "pos", Value: string(next)}, {Key: "posB", Value: np.b}, {Key: "posN", Value: np.n}}},
			{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}},
		})
		return err
	})
	if err != nil {
		return errorf("twopc: feed %q: save the position: %w", f.name, err)
	}
	if res.MatchedCount == 0 {
		return errLeaseLost
	}
	l.stamped = sent // the save stamped the lease (after it was sent)
	return nil
}

// handle runs h on evs while it keeps the group's lease: renewed every
// third of it, so that another subscriber does not take the group over
// from a handler still at work. h's context ends, and handle returns
// errLeaseLost, its position not saved, as soon as the lease may have
// lapsed: a renewal found it taken over, or, judged by this host's
// monotonic clock, nine tenths of a lease passed since the last renewal
// that succeeded was sent (a renewal stalled, or this process did). A
// lease lapses by the server's clock a lease after its stamp, which the
// server writes after the renewal was sent, so the handler's context ends
// before another subscriber can take the group over (the clocks' rates
// apart): at most one handler of a group has a live context at a time.
func (f *Feed) handle(ctx context.Context, l *feedLease, h func(context.Context, []Event) error, evs []Event) error {
	// The handler's context outlives ctx: told to stop (ctx ends), the
	// handler has its grace to finish, the renewals stopped, until the
	// watchdog below ends it (nine tenths of a lease from the last
	// renewal), before another subscriber could take the group over.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var lost atomic.Bool
	base := l.stamped
	var stamped atomic.Int64 // the last renewal's send, since base
	done, renewing, watching := make(chan struct{}), make(chan struct{}), make(chan struct{})
	give := func() { lost.Store(true); cancel() }
	go func() {
		defer close(renewing)
		t := time.NewTicker(max(f.cfg.lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return // told to stop: the handler's grace runs out with the lease
			case <-t.C:
				sent := time.Now()
				_, err := l.renew(hctx)
				switch {
				case errors.Is(err, errLeaseLost):
					give()
					return
				case err == nil:
					stamped.Store(int64(sent.Sub(base)))
				}
			}
		}
	}()
	go func() {
		defer close(watching)
		for {
			left := f.cfg.lease*9/10 - time.Since(base.Add(time.Duration(stamped.Load())))
			if left <= 0 {
				give()
				return
			}
			t := time.NewTimer(left)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	err := h(hctx, evs)
	close(done)
	<-renewing // its renewals and their stamps are over
	<-watching
	if lost.Load() {
		return errLeaseLost
	}
	if err != nil {
		return errorf("twopc: feed %q: handler: %w", f.name, err)
	}
	return nil
}
