package twopc

// A durable change feed: every event of the transactions that reached one
// since the feed began (by the log server's clock), numbered into batches by one sequencer at a time (Run), read in
// batch order by any number of readers (Read, All, Subscribe), none
// skipped, at least once. See PROTOCOL.md, "Change feed".

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/internal/schema"
)

// feedsSuffix names the feeds' collection after the transactions
// collection: "transactions_feeds" by default.
const feedsSuffix = schema.FeedsSuffix

// The defaults of a feed's options.
const (
	defaultFeedLease = 10 * time.Second
	defaultFeedBatch = 500
	defaultFeedSlice = 100
	defaultFeedPoll  = 200 * time.Millisecond
)

// maxFeedTakeovers bounds how often a feed's sequencer can be taken over
// (its lease lapsing, or a sequencer giving up an epoch whose tag writes
// it could not confirm): each takeover keeps two entries in the feed's
// document (about 30 bytes each), the one batch number the run it ends
// may have tagged without publishing, read again at every batch, and the
// run it starts. A sequencer that stops with every tag it sent published
// (Run returning, its lease released clean) adds none: the next continues
// its run. Past it, Run fails; Delete the feed and make another.
const maxFeedTakeovers = 10000

// feedName is what a feed's name may be: it names fields of every
// transaction document and indexes of the log.
var feedName = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// Position is a place in a feed: Read returns the events after it. It is
// opaque; "" is the start.
type Position string

// Event is one event of a feed.
type Event struct {
	// ID is unique per event and the same at every delivery: a consumer
	// that keeps the IDs it handled gets every event exactly once.
	ID string
	// Kind is what happened.
	Kind EventKind
	// Pos is the position after this event: Read(ctx, e.Pos, n) returns
	// the events that follow it.
	Pos Position
	// Txn is the transaction as the reader read it, which may be past the
	// event (a held hold since captured): Kind and At say what the event
	// was, and Txn.State is set to the state the event left it in (held,
	// applied, canceled).
	Txn Txn
	// At is the event's own time (the commit, the hold's, or the end's),
	// by the log server's clock: informational, never the position.
	At time.Time
}

// FeedOption configures a Feed.
type FeedOption func(*feedConfig)

type feedConfig struct {
	lease time.Duration        // the sequencer's and a subscriber group's lease
	batch int                  // how many transactions a scan takes, per slot
	slice int                  // how many events Subscribe hands a handler call at most
	poll  time.Duration        // how often a sequencer, All and Subscribe look again when there is nothing new
	hook  func(feedStep) error // tests: called at each step of the sequencer
}

// feedStep is a step of the sequencer, where a test's hook may stop it.
type feedStep int

const (
	feedTaken     feedStep = iota // the lease taken, before the first round
	feedScanned                   // a round's reads made and its lease kept, before its tags
	feedTagged                    // its batch's tags written, not published
	feedPublished                 // its batch published
	feedWatching                  // a change stream opened on the log (servers with them), before its first event
	feedRereading                 // a publication whose outcome is unknown, before the feed's document is read again
	feedLost                      // the epoch given up (taken over, or a write's outcome unknown), before the lease is taken again
)

// WithFeedLease sets how long a sequencer (Run) or a subscriber group
// (Subscribe) that stopped answering keeps its lease before another takes
// over: 10 seconds by default, by the log server's clock. A lease decides
// only who numbers or handles events next, never whether an event is
// numbered or delivered. A lease shorter than 100 ms is taken as 100 ms.
func WithFeedLease(d time.Duration) FeedOption {
	return func(c *feedConfig) {
		if d > 0 {
			c.lease = max(d, minFeedLease)
		}
	}
}

// minFeedLease is the shortest lease WithFeedLease sets: a shorter one is
// taken as this.
const minFeedLease = 100 * time.Millisecond

// WithFeedBatch sets how many transactions one scan of the sequencer takes
// for each of a transaction's two places of events (the held and the
// final): 500 by default. A batch holds at most twice that many events.
func WithFeedBatch(n int) FeedOption {
	return func(c *feedConfig) {
		if n > 0 {
			c.batch = n
		}
	}
}

// WithFeedSlice sets how many events Subscribe hands its handler a call at
// most: 100 by default, apart from the sequencer's batch (WithFeedBatch).
// The position is saved after each call, so a crash, or a handler that
// outlived its lease, hands at most that many events again.
func WithFeedSlice(n int) FeedOption {
	return func(c *feedConfig) {
		if n > 0 {
			c.slice = n
		}
	}
}

// WithFeedPoll sets how long the sequencer, All and Subscribe wait before
// they look again when nothing was new: 200 ms by default. On a server
// with change streams, a write of the log that may settle an event wakes
// the sequencer sooner.
func WithFeedPoll(d time.Duration) FeedOption {
	return func(c *feedConfig) {
		if d > 0 {
			c.poll = d
		}
	}
}

// Feed is a named change feed of the coordinator's log. Its methods are
// safe for concurrent use; a Feed holds no state between calls.
//
// Its order is causal, across batches too: a hold's held event comes
// before its captures' and its own end (voided, expired), and a transfer's
// committed (or a capture's captured) event before its refunds' and
// reversals' (a refund of a hold, which may be made while the hold is
// held, after the hold's held event and the captured events of the
// captures it takes from, never waiting for the hold's end), in an
// earlier batch or earlier in the same one; within a
// batch, after that, by the log server's stamp of the move that settled
// each event (heldAt, eventAt), then by transaction. Events with no cause
// between them are in the order the sequencer's scans found them (oldest
// first by that stamp), not in commit order across batches: a move
// visible late is numbered late.
type Feed struct {
	c    *Coordinator
	name string
	cfg  feedConfig
	err  error // an invalid name, returned by every method
}

// Feed returns the feed of that name (1 to 32 of a-z, 0-9 and _): Run
// numbers its events, Read, All and Subscribe read them. Nothing is
// written until Run or Subscribe.
func (c *Coordinator) Feed(name string, opts ...FeedOption) *Feed {
	f := &Feed{c: c, name: name, cfg: feedConfig{lease: defaultFeedLease, batch: defaultFeedBatch, slice: defaultFeedSlice, poll: defaultFeedPoll}}
	for _, o := range opts {
		if o != nil {
			o(&f.cfg)
		}
	}
	if !feedName.MatchString(name) {
		f.err = errorf("%w: %q: a name is 1 to 32 of a-z, 0-9 and _", ErrInvalidFeed, name)
	}
	return f
}

// Name returns the feed's name.
func (f *Feed) Name() string { return f.name }

// feedDoc is a feed's document in the feeds collection.
type feedDoc struct {
	ID           string    `bson:"_id"`
	Since        time.Time `bson:"since"` // the server's clock when the feed was made: it numbers the transactions whose eventAt is at or after it
	Epoch        int64     `bson:"epoch"` // the sequencer's lease: 0 before the first
	Holder       string    `bson:"holder,omitempty"`
	LeaseMs      int64     `bson:"leaseMs"`
	LastModified time.Time `bson:"lastModified"`
	Published    int64     `bson:"published"` // the last batch readers may read
	// PublishedAt is when the last batch was published (the server's
	// stamp), and Marks when earlier ones were (see feedMark): history
	// keeps a transaction from its events' publication.
	PublishedAt time.Time  `bson:"publishedAt,omitempty"`
	Marks       []feedMark `bson:"marks,omitempty"`
	// Run is the epoch the holder's tags carry: its own, or, when it took
	// the lease from a holder that gave it up clean, that holder's run,
	// which it continues. Only a takeover that may leave tags unpublished
	// starts a run.
	Run int64 `bson:"run"`
	// Runs say which epoch published which batches: each from its From
	// up to the next run's. One entry per run, so at most one more than
	// the orphans.
	Runs []feedRun `bson:"runs"`
	// Orphans are, for each takeover of a lease not given up clean, the
	// run it ended and the one batch number that run may have tagged
	// without publishing.
	Orphans []feedRun `bson:"orphans"`
	// Gone is the highest batch that history moved or removed a
	// transaction of: readers before it get ErrFeedTruncated.
	Gone    int64 `bson:"gone"`
	Deleted bool  `bson:"deleted,omitempty"`
}

// feedRun is an epoch and a batch number: where a run of published
// batches starts, or the batch a run taken over may have left tags in.
type feedRun struct {
	E    int64 `bson:"e"`
	From int64 `bson:"b"`
}

// owner returns the epoch that published batch b, or 0 if none did.
func (d *feedDoc) owner(b int64) int64 {
	if b < 1 || b > d.Published {
		return 0
	}
	var e int64
	for _, r := range d.Runs {
		if r.From > b {
			break
		}
		e = r.E
	}
	return e
}

// published reports whether tag names a batch its run published.
func (d *feedDoc) published(tag string) bool {
	b, e, ok := parseTag(tag)
	return ok && d.owner(b) == e
}

// coll is the feeds collection.
func (f *Feed) coll() *mongo.Collection { return f.c.feeds }

// feedIDPrefix starts every feed's document id; feedIDs matches them
// all (a subscriber group's id starts "group:").
const feedIDPrefix = "feed:"

var feedIDs = bson.D{{Key: "$gte", Value: feedIDPrefix}, {Key: "$lt", Value: "feed;"}}

// id is the feed's document id.
func (f *Feed) id() string { return feedIDPrefix + f.name }

// name is the name of the feed whose document d is.
func (d *feedDoc) name() string { return d.ID[len(feedIDPrefix):] }

// read returns the feed's document, or an empty one (nothing published)
// if there is none yet; ErrFeedDeleted if the feed was deleted.
func (f *Feed) read(ctx context.Context) (*feedDoc, error) { return f.readIn(ctx, trips{}) }

// readIn is read, a round trip of the long call t bounds.
func (f *Feed) readIn(ctx context.Context, t trips) (*feedDoc, error) {
	var d feedDoc
	err := t.read(ctx, func(ctx context.Context) error {
		return f.c.retry(ctx, func(ctx context.Context) error {
			return f.coll().FindOne(ctx, bson.D{{Key: "_id", Value: f.id()}}).Decode(&d)
		})
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return &feedDoc{ID: f.id()}, nil
	}
	if err != nil {
		return nil, errorf("twopc: feed %q: %w", f.name, err)
	}
	if d.Deleted {
		return nil, errorf("%w: %q", ErrFeedDeleted, f.name)
	}
	return &d, nil
}

// Delete deletes the feed: history no longer waits for it, its subscriber
// groups' positions go, and its indexes on the log are dropped. Its name
// is not used again (Run, Read and Subscribe return ErrFeedDeleted): the
// tags it left on transactions would be taken for another feed's. A
// sequencer still running stops at its next batch. Each of its writes is
// bounded by the call bound (WithCallTimeout); one the bound ends leaves
// the deletion to be made again (each of its writes is idempotent).
func (f *Feed) Delete(ctx context.Context) (err error) {
	if f.err != nil {
		return f.err
	}
	t := f.c.trips(ctx, fmt.Sprintf("delete feed %q", f.name))
	defer func() { err = t.explain(err) }()
	err = t.write(ctx, func(ctx context.Context) error {
		_, err := f.coll().UpdateOne(ctx, bson.D{{Key: "_id", Value: f.id()}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "deleted", Value: true}}}}, options.UpdateOne().SetUpsert(true))
		return err
	})
	if err != nil {
		return errorf("twopc: delete feed %q: %w", f.name, err)
	}
	prefix := groupPrefix(f.name)
	err = t.write(ctx, func(ctx context.Context) error {
		_, err := f.coll().DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{
			{Key: "$gte", Value: prefix}, {Key: "$lt", Value: prefix + "\xff"}}}})
		return err
	})
	if err != nil {
		return errorf("twopc: delete feed %q: its groups: %w", f.name, err)
	}
	for _, slot := range feedSlots {
		err := t.write(ctx, func(ctx context.Context) error {
			return f.c.log.txns.Indexes().DropOne(ctx, feedIndexName(f.name, slot))
		})
		var se mongo.ServerError
		if err != nil && !(errors.As(err, &se) && (se.HasErrorCode(codeIndexNotFound) || se.HasErrorCode(codeNamespaceNotFound))) {
			return errorf("twopc: delete feed %q: drop its index: %w", f.name, err)
		}
	}
	return nil
}

// The server's codes for an index or a collection that does not exist.
const (
	codeIndexNotFound     = 27
	codeNamespaceNotFound = 26
)

// feedIndexName is the name of the index of feed name's tags in slot.
func feedIndexName(name, slot string) string { return feedField(name, slot) + "_1_eventAt_1" }

// feedIndexKeys is the index of feed name's tags in slot: the search for
// events not yet numbered ({tag: null, eventAt ≥ since}) and a reader's
// read of a batch ({tag: t}) are both read by it.
func feedIndexKeys(name, slot string) bson.D {
	return bson.D{{Key: feedField(name, slot), Value: 1}, {Key: fieldEventAt, Value: 1}}
}

// FeedStatus is what a feed's document and the log say of it (Status).
type FeedStatus struct {
	Name      string
	Since     time.Time // the log server's clock when the feed was made: it numbers the transactions that moved to held, applied or canceled since (see Run)
	Published int64     // the last batch readers may read
	Epoch     int64     // the sequencer's epoch: raised by each takeover
	Holder    string    // the sequencer holding the lease ("" if none)
	LeaseEnds time.Time // when its lease lapses unless renewed (the log server's clock)
	Takeovers int       // how often the sequencer was taken over
	Gone      int64     // the last batch history moved transactions of
	// Waiting counts the transactions whose events wait to be numbered
	// (at most what one scan takes, WithFeedBatch, for each kind of
	// place): how far the sequencer is behind.
	Waiting int
	// Orphaned counts the transactions holding a tag that an epoch taken
	// over left unpublished (at most WithFeedBatch): the sequencer numbers
	// them again, at most WithFeedBatch a round.
	Orphaned int
	// Unpublished counts the transactions the sequencer tagged for the
	// batch it has not published yet.
	Unpublished int
	Deleted     bool
	// Groups are the feed's subscriber groups, by name: each one's saved
	// position, and how far behind the feed its handler is (the events
	// not acknowledged, counted up to MaxFeedBehind, and the oldest one's
	// time).
	Groups []FeedGroupStatus
}

// Status returns the feed's status; a feed never run has none yet
// (Published 0, no Since). It lists the feed's subscriber groups, each
// with how far behind the feed its handler is, reading the published
// events after each one's position as Read does, up to MaxFeedBehind a
// group; the whole call is bounded by the read bound (WithReadTimeout).
func (f *Feed) Status(ctx context.Context) (_ *FeedStatus, err error) {
	if f.err != nil {
		return nil, f.err
	}
	ctx, b := f.c.readBound(ctx, f.readName()+": status")
	defer func() { err = b.explain(err); b.end() }()
	var d feedDoc
	err = f.c.retry(ctx, func(ctx context.Context) error {
		return f.coll().FindOne(ctx, bson.D{{Key: "_id", Value: f.id()}}).Decode(&d)
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return &FeedStatus{Name: f.name}, nil
	}
	if err != nil {
		return nil, errorf("twopc: feed %q: %w", f.name, err)
	}
	st := &FeedStatus{Name: f.name, Since: d.Since, Published: d.Published, Epoch: d.Epoch, Holder: d.Holder,
		Takeovers: len(d.Orphans), Gone: d.Gone, Deleted: d.Deleted}
	if d.Holder != "" {
		st.LeaseEnds = d.LastModified.Add(time.Duration(d.LeaseMs) * time.Millisecond)
	}
	if d.Deleted {
		return st, nil
	}
	for _, slot := range feedSlots {
		n, err := f.scanWaiting(ctx, &d, slot, nil, func(bson.Raw) error { return nil })
		if err != nil {
			return nil, errorf("twopc: feed %q: %w", f.name, err)
		}
		st.Waiting += n
	}
	if _, err := f.scanOrphans(ctx, &d, f.cfg.batch, nil, func(bson.Raw) error { st.Orphaned++; return nil }); err != nil {
		return nil, errorf("twopc: feed %q: %w", f.name, err)
	}
	if d.Run > 0 {
		next := feedTag(d.Published+1, d.Run)
		for _, slot := range feedSlots {
			n, err := f.scan(ctx, bson.D{{Key: feedField(f.name, slot), Value: next}}, 0, func(bson.Raw) error { return nil })
			if err != nil {
				return nil, errorf("twopc: feed %q: %w", f.name, err)
			}
			st.Unpublished += n
		}
	}
	if st.Groups, err = f.groups(ctx); err != nil {
		return nil, errorf("twopc: feed %q: its groups: %w", f.name, err)
	}
	return st, nil
}

// Feeds returns the names of the log's feeds, deleted ones too (their
// names are taken), sorted.
func (c *Coordinator) Feeds(ctx context.Context) (_ []string, err error) {
	ctx, b := c.readBound(ctx, "feeds")
	defer func() { err = b.explain(err); b.end() }()
	type idOnly struct {
		ID string `bson:"_id"`
	}
	docs, err := findAll[idOnly](ctx, &c.config, c.feeds, bson.D{{Key: "_id", Value: feedIDs}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, errorf("twopc: feeds: %w", err)
	}
	var names []string
	for _, d := range docs {
		names = append(names, d.ID[len(feedIDPrefix):])
	}
	return names, nil
}
