package twopc

import (
	"context"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// WithClock replaces the clock by which an owner judges the age of its own
// claim, so that tests can make time pass for one process only.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}

// WithHostClock replaces the host clock that the coordinator corrects to
// the server's to stamp transaction times, so that tests can run a host
// whose clock is ahead or behind.
func WithHostClock(now func() time.Time) Option {
	return func(c *config) error {
		c.markClock = now
		return nil
	}
}

// WithMarkMargin sets how far behind the server's clock the low-water mark
// stays (one second outside tests), so that tests can see lines move
// without waiting for time to pass.
func WithMarkMargin(d time.Duration) Option {
	return func(c *config) error {
		c.markMargin = d
		return nil
	}
}

// ReadMark reads c's low-water mark now, and keeps it for c's next writes.
func ReadMark(ctx context.Context, c *Coordinator) (time.Time, error) { return c.mark.readNow(ctx) }

// SyncClock reads the server's clock now, for c's next stamps.
func SyncClock(ctx context.Context, c *Coordinator) error {
	_, err := c.mark.readClock(ctx)
	return err
}

// MoveLine moves the fence line of account id on c's ledger (""
// the default) up to line and drops the fences below it: the write that a
// rollback sends on each account it fences, and that every apply does as
// well, once the low-water mark is past line.
func MoveLine(ctx context.Context, c *Coordinator, ledger string, id any, line time.Time) error {
	l, ok := c.ledgers[ledger]
	if !ok {
		return ErrUnknownLedger
	}
	_, err := l.accounts.BulkWrite(ctx, []mongo.WriteModel{lineModel(leg{account: id}, line)})
	return err
}

// WithFrozenMark stops the coordinator's background readings of the mark
// (ReadMark still reads it), so that the database operation a test's step
// hook precedes is the step's own, not a reading that started meanwhile.
func WithFrozenMark() Option {
	return func(c *config) error {
		c.markFrozen = true
		return nil
	}
}

// MarkComment is the comment on the low-water mark's read of the log.
const MarkComment = markComment

// LegFence is the fence of leg i of txn on its account.
func LegFence(txn *Txn, i int) bson.ObjectID {
	return schema.Fence(txn.Created, schema.Marker(txn.ID, i))
}

// WithTxnIDs replaces the source of fresh transaction ids, so that tests
// can make two collide.
func WithTxnIDs(next func() bson.ObjectID) Option {
	return func(c *config) error {
		c.newID = next
		return nil
	}
}

// NewTxnID is a fresh transaction id as the library makes them.
func NewTxnID() bson.ObjectID { return newTxnID() }

// LegMarker is the value that marks leg i (0: the source, 1: the
// destination) of transaction id on its account.
func LegMarker(id bson.ObjectID, i int) bson.ObjectID { return schema.Marker(id, i) }

// OnCommitWait has f called each time a commit of c starts waiting for
// the next group commit, so that tests can form groups without sleeping.
// f runs under the committer's lock: it must not block.
func OnCommitWait(c *Coordinator, f func()) {
	c.commits.mu.Lock()
	defer c.commits.mu.Unlock()
	c.commits.joined = f
}

// HoldInserts makes c's insert stage busy, as if an insert were in
// flight, so that the inserts of transfers started now wait, and go
// together in one write when release is called. waiting, if not nil, is
// called each time an insert starts to wait; it runs under the stage's
// lock: it must not block.
func HoldInserts(c *Coordinator, waiting func()) (release func()) {
	s := c.inserts
	s.mu.Lock()
	if s.busy {
		s.mu.Unlock()
		panic("HoldInserts: the insert stage is busy")
	}
	s.busy = true
	s.joined = waiting
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.joined = nil
		s.mu.Unlock()
		s.next()
	}
}

// OnInsertWait has f called each time an insert of c starts waiting for
// the insert write in flight to end, so that tests can queue a transfer
// behind another without sleeping. f runs under the stage's lock: it must
// not block.
func OnInsertWait(c *Coordinator, f func()) {
	c.inserts.mu.Lock()
	defer c.inserts.mu.Unlock()
	c.inserts.joined = f
}

// OnKeyWait has f called each time a call of c starts waiting for a call
// of c with its idempotency key to end. f runs under a lock: it must not
// block.
func OnKeyWait(c *Coordinator, f func()) {
	c.keys.mu.Lock()
	defer c.keys.mu.Unlock()
	c.keys.waits = f
}

// LetKeysOverlap lets calls of c with one idempotency key run at once, as
// calls of several coordinators do, so that tests can put them in one
// insert group: the insert stage's own rule (one _id, one owner) is then
// what orders them.
func LetKeysOverlap(c *Coordinator) {
	c.keys.mu.Lock()
	defer c.keys.mu.Unlock()
	c.keys.off = true
}

// WithStatementHorizon sets how old an entry must be for a statement's page
// to list it (a second by default).
func WithStatementHorizon(d time.Duration) Option {
	return func(c *config) error {
		c.statementHorizon = d
		return nil
	}
}

// EntryKey is the key a transaction lists in its accounts field for a leg
// on account id of ledger.
func EntryKey(ledger string, id any) (string, error) { return entryKey(ledger, id) }

// WithCheckpoints sets after how many entries summed past the last
// checkpoint a statement's read records one, and how old its entries must
// be (1,000 and a minute by default).
func WithCheckpoints(every int, horizon time.Duration) Option {
	return func(c *config) error {
		c.checkpointEvery, c.checkpointHorizon = every, horizon
		return nil
	}
}

// Shares is total split among weights w by the refunds' apportionment
// (see shares).
func Shares(w []int64, total int64) []int64 { return shares(w, total) }

// RefundTake is what a refund of amount takes back of each leg of a
// transfer of legs that returned returned already (see refundTake).
func RefundTake(legs, returned []int64, amount int64) ([]int64, error) {
	return refundTake(legs, returned, amount)
}

// OpeningAt returns the opening time OpenAccount recorded in account id of
// c's ledger ("" the default); false if the account records none.
func OpeningAt(ctx context.Context, c *Coordinator, ledger string, id any) (time.Time, bool, error) {
	l, ok := c.ledgers[ledger]
	if !ok {
		return time.Time{}, false, ErrUnknownLedger
	}
	raw, err := l.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		return time.Time{}, false, err
	}
	at, ok := raw.Lookup(fieldOpening, "at").TimeOK()
	return at, ok, nil
}

// LogIndexKeys are the keys of the indexes the library makes on its log.
func LogIndexKeys() []bson.D {
	var keys []bson.D
	for _, ix := range libraryIndexes() {
		if ix.coll == onLog {
			keys = append(keys, ix.keys)
		}
	}
	return keys
}

// The sequencer's steps where WithFeedHook's hook is called.
const (
	FeedTaken     = int(feedTaken)
	FeedScanned   = int(feedScanned)
	FeedTagged    = int(feedTagged)
	FeedPublished = int(feedPublished)
	FeedWatching  = int(feedWatching)
	FeedRereading = int(feedRereading)
	FeedLost      = int(feedLost)
)

// WithFeedHook calls h at each step of the feed's sequencer (FeedTaken,
// FeedScanned, FeedTagged, FeedPublished, and FeedWatching from the
// goroutine that watches the log); an error from it stops the round as a crash there
// would, and a hook that blocks is a sequencer stalled there.
func WithFeedHook(h func(step int) error) FeedOption {
	return func(c *feedConfig) { c.hook = func(s feedStep) error { return h(int(s)) } }
}

// SkewCheckStarted reports whether c's check of the shards' clock skew
// started (clockskew.go): only once a call found the log behind a router.
func SkewCheckStarted(c *Coordinator) bool {
	c.skew.mu.Lock()
	defer c.skew.mu.Unlock()
	return c.skew.started
}

// SkewCheckEnded is closed once c's check of the shards' clock skew ended
// (or, closed before it started, never will run).
func SkewCheckEnded(c *Coordinator) <-chan struct{} { return c.skew.done }

// WithRefundHook calls h with the transfer a refund refunds (a hold's
// order, as read) before each reservation in its book: a test commits a
// capture there, between the refund's read of the order and its reserve.
func WithRefundHook(h func(id bson.ObjectID, value int64)) Option {
	return func(c *config) error {
		c.refundHook = func(r *record) { h(r.ID, r.Value) }
		return nil
	}
}
