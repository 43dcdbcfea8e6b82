package twopc

// The lease of a feed's sequencer (on the feed's document) and of a
// subscriber group (on the group's): one holder at a time, its epoch
// raised by each takeover, every write of the holder guarded by its
// epoch. A lease decides who writes next, never whether a write counts:
// a holder taken over finds its next guarded write refused.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// errLeaseLost says the holder's epoch is no longer the document's: it
// was taken over (or the feed deleted), and must take the lease again.
var errLeaseLost = errors.New("twopc: feed lease lost")

// feedLease is a holder's lease on one document of the feeds collection.
type feedLease struct {
	c      *Coordinator
	coll   *mongo.Collection
	id     string
	holder string        // this holder's name: the application and a random suffix
	lease  time.Duration // written with each take: how long others wait once it stops renewing
	poll   time.Duration // how often a waiting taker looks again
	epoch  int64         // the epoch it holds; 0 before it took one
	// t bounds the lease's round trips: those of the long call (Run,
	// Subscribe) that holds it.
	t trips
	// stamped is the host's clock when the holder sent its last write that
	// stamped the lease (its take, a renewal, or a write of its own that
	// sets lastModified), before the server stamped it: the next renewal
	// is due a third of a lease later, and the lease lapses no sooner
	// than a lease later.
	stamped time.Time
}

// newFeedLease returns a lease on document id for a new holder, its round
// trips bounded by t.
func newFeedLease(c *Coordinator, id string, lease, poll time.Duration, t trips) *feedLease {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &feedLease{c: c, coll: c.feeds, id: id, holder: c.application + "/" + hex.EncodeToString(b[:]),
		lease: lease, poll: poll, t: t}
}

// leaseFields are the fields of a document under a lease, as take reads
// them.
type leaseFields struct {
	Epoch        int64     `bson:"epoch"`
	Holder       string    `bson:"holder"`
	LeaseMs      int64     `bson:"leaseMs"`
	LastModified time.Time `bson:"lastModified"`
	Published    int64     `bson:"published"`
	Run          int64     `bson:"run"`
	Orphans      []feedRun `bson:"orphans"`
	Clean        bool      `bson:"clean"` // released with nothing left unpublished
	Deleted      bool      `bson:"deleted"`
}

// take waits until the document's lease is free (never taken, released,
// or not renewed for its lease by the server's clock) and takes it: one
// write guarded by the epoch and lastModified it read, raising the epoch.
// more, if not nil, adds to that write what the takeover of the fields
// read must record (a feed's orphan entry), or returns an error to give
// up. It returns the document as the write left it.
func (l *feedLease) take(ctx context.Context, more func(leaseFields) (bson.D, error)) (bson.Raw, error) {
	for {
		var cur leaseFields
		err := l.t.read(ctx, func(ctx context.Context) error {
			return l.coll.FindOne(ctx, bson.D{{Key: "_id", Value: l.id}}).Decode(&cur)
		})
		if err != nil {
			return nil, err
		}
		if cur.Deleted {
			return nil, ErrFeedDeleted
		}
		now, err := l.t.serverNow(ctx, l.c.log)
		if err != nil {
			return nil, err
		}
		free := cur.Epoch == 0 || cur.Holder == "" ||
			!cur.LastModified.Add(time.Duration(cur.LeaseMs)*time.Millisecond).After(now)
		if !free {
			if err := sleepCtx(ctx, l.poll); err != nil {
				return nil, err
			}
			continue
		}
		update := bson.D{
			{Key: "$set", Value: bson.D{{Key: "epoch", Value: cur.Epoch + 1}, {Key: "holder", Value: l.holder},
				{Key: "leaseMs", Value: leaseMs(l.lease)}, {Key: "clean", Value: false}}},
			{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}},
		}
		if more != nil {
			extra, err := more(cur)
			if err != nil {
				return nil, err
			}
			for _, e := range extra {
				if e.Key == "$set" { // beside the take's own
					update[0].Value = append(update[0].Value.(bson.D), e.Value.(bson.D)...)
				} else {
					update = append(update, e)
				}
			}
		}
		filter := bson.D{{Key: "_id", Value: l.id}, {Key: "epoch", Value: cur.Epoch}, {Key: "lastModified", Value: cur.LastModified},
			{Key: "deleted", Value: bson.D{{Key: "$ne", Value: true}}}}
		if more != nil {
			// What more recorded was read with this published number.
			filter = append(filter, bson.E{Key: "published", Value: cur.Published})
		}
		var raw bson.Raw
		sent := time.Now()
		err = l.t.write(ctx, func(ctx context.Context) (err error) {
			raw, err = l.coll.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
			return err
		})
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			continue // another took it, or its holder renewed: look again
		case err != nil:
			return nil, err
		}
		l.epoch, l.stamped = cur.Epoch+1, sent
		return raw, nil
	}
}

// renew stamps the lease's lastModified, guarded by the holder's epoch,
// and returns the document as the write left it; errLeaseLost if the
// epoch is no longer the document's.
func (l *feedLease) renew(ctx context.Context) (bson.Raw, error) {
	var raw bson.Raw
	sent := time.Now()
	err := l.t.write(ctx, func(ctx context.Context) error {
		return l.c.retry(ctx, func(ctx context.Context) error {
			sent = time.Now()
			var err error
			raw, err = l.coll.FindOneAndUpdate(ctx, l.guard(),
				bson.D{{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}}},
				options.FindOneAndUpdate().SetReturnDocument(options.After)).Raw()
			return err
		})
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errLeaseLost
	}
	if err == nil {
		l.stamped = sent // the server stamped it after: the lease lapses no sooner than a lease from here
	}
	return raw, err
}

// due is how long until the lease's next renewal is due (0: now): a
// third of a lease after it was last stamped.
func (l *feedLease) due() time.Duration {
	return max(0, l.lease/3-time.Since(l.stamped))
}

// keep renews the lease if its renewal is due, and returns the document
// as the renewal left it; nil, nil if none was due.
func (l *feedLease) keep(ctx context.Context) (bson.Raw, error) {
	if l.due() > 0 {
		return nil, nil
	}
	return l.renew(ctx)
}

// guard is the filter of every write of the holder: its epoch, and a
// feed not deleted.
func (l *feedLease) guard() bson.D {
	return bson.D{{Key: "_id", Value: l.id}, {Key: "epoch", Value: l.epoch}, {Key: "deleted", Value: bson.D{{Key: "$ne", Value: true}}}}
}

// release lets another holder take the lease at once (Run or Subscribe
// returning), saying whether the holder left nothing unpublished (clean:
// a taker then records no orphan); a lease taken over meanwhile is left
// as it is.
func (l *feedLease) release(clean bool) {
	if l.epoch == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.callTimeout) // a write, bounded as one
	defer cancel()
	_, _ = l.coll.UpdateOne(ctx, l.guard(), bson.D{{Key: "$set", Value: bson.D{{Key: "holder", Value: ""}, {Key: "clean", Value: clean}}}})
}

// leaseMs is lease in whole milliseconds, rounded up: a lease is never
// written shorter than asked.
func leaseMs(lease time.Duration) int64 {
	return int64((lease + time.Millisecond - 1) / time.Millisecond)
}

// sleepCtx waits d, or until ctx is done (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
