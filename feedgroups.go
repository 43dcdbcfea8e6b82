package twopc

// The subscriber groups of a feed as Status reports them: where each is,
// and how far behind the feed its handler is.

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// MaxFeedBehind is where FeedGroupStatus.Behind stops counting: a group
// further behind reads as MaxFeedBehind.
const MaxFeedBehind = 1000

// FeedGroupStatus is a subscriber group of a feed (Subscribe), as
// Feed.Status reads it.
type FeedGroupStatus struct {
	Name string
	// Position is the position the group saved: its handler acknowledged
	// every event before it.
	Position Position
	// Holder is the subscriber holding the group's lease ("" if none),
	// LeaseEnds when that lease lapses unless renewed (the log server's
	// clock).
	Holder    string
	LeaseEnds time.Time
	// Behind counts the published events after Position, up to
	// MaxFeedBehind: the events its handler has not acknowledged.
	Behind int
	// Oldest is the time (Event.At) of the first published event after
	// Position; zero if none. How long the group has kept an event
	// waiting is the log server's time now less this.
	Oldest time.Time
	// Truncated says history moved events the group had not acknowledged:
	// its next Read is ErrFeedTruncated.
	Truncated bool
}

// groupDoc is a subscriber group's document, as Status reads it.
type groupDoc struct {
	ID           string    `bson:"_id"`
	Pos          string    `bson:"pos"`
	Holder       string    `bson:"holder"`
	LeaseMs      int64     `bson:"leaseMs"`
	LastModified time.Time `bson:"lastModified"`
}

// groups reads the subscriber groups of the feed, and for each how many
// published events follow its position (up to MaxFeedBehind) and the
// first one's time, reading the feed as Read does (under ctx, Status's
// bound).
func (f *Feed) groups(ctx context.Context) ([]FeedGroupStatus, error) {
	prefix := groupPrefix(f.name)
	docs, err := findAll[groupDoc](ctx, &f.c.config, f.coll(), bson.D{{Key: "_id", Value: bson.D{
		{Key: "$gte", Value: prefix}, {Key: "$lt", Value: prefix + "\xff"}}}}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	out := make([]FeedGroupStatus, 0, len(docs))
	for _, g := range docs {
		st := FeedGroupStatus{Name: g.ID[len(prefix):], Position: Position(g.Pos), Holder: g.Holder}
		if g.Holder != "" {
			st.LeaseEnds = g.LastModified.Add(time.Duration(g.LeaseMs) * time.Millisecond)
		}
		pos := st.Position
		for st.Behind < MaxFeedBehind {
			evs, next, err := f.Read(ctx, pos, min(f.cfg.batch, MaxFeedBehind-st.Behind))
			if errors.Is(err, ErrFeedTruncated) {
				st.Truncated = true
				break
			}
			if err != nil {
				return nil, err
			}
			if len(evs) > 0 && st.Behind == 0 {
				st.Oldest = evs[0].At
			}
			st.Behind += len(evs)
			if len(evs) == 0 || next == pos {
				break
			}
			pos = next
		}
		out = append(out, st)
	}
	return out, nil
}
