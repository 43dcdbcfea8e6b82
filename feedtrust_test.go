package twopc_test

// The change feed's findings of the trust review, each a deterministic
// repro written before its fix.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

// gate is a point a hook stops at once: reached closes at, and the hook
// waits for open (or the test's end).
type gate struct {
	at, open chan struct{}
	ctx      context.Context
	once     atomic.Bool
}

func newGate(t *testing.T) *gate {
	return &gate{at: make(chan struct{}), open: make(chan struct{}), ctx: testCtx(t)}
}

// stop stops the caller at the gate, the first time only.
func (g *gate) stop() {
	if !g.once.CompareAndSwap(false, true) {
		return
	}
	close(g.at)
	select {
	case <-g.open:
	case <-g.ctx.Done():
	}
}

// reached waits until a hook stopped at the gate.
func (g *gate) reached(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.at:
	case <-g.ctx.Done():
		t.Fatalf("never reached: %s", what)
	}
}

// TestFeedTrustLostPublicationReply: sequencer A publishes batch 1 and
// the reply is lost; A stalls before it reads the feed's document again,
// past its lease, and B takes over (run 2), scans transfer T2 and stalls
// before tagging it; transfer X is made. A reads the feed's document
// again: its batch 1 is there, published by its run. Before, A took the
// document as it read it, B's run and epoch with it, and numbered its
// next round into B's run: it scanned T2 and X, B then tagged T2 and
// published batch 2, a reader read through it, and A tagged X into batch
// 2, already published and read: the reader never got X. Now A, finding
// the epoch another's, gives the lease up, and X comes to the reader in a
// later batch.
func TestFeedTrustLostPublicationReply(t *testing.T) {
	const lease = time.Second
	b := newFaultBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})

	reread, scanAgain, scanB := newGate(t), newGate(t), newGate(t)
	lost := make(chan struct{}, 1)
	var faulted, rereading atomic.Bool
	fA := b.c.Feed("trust", twopc.WithFeedLease(lease), twopc.WithFeedPoll(5*time.Millisecond),
		twopc.WithFeedHook(func(step int) error {
			switch {
			case step == twopc.FeedTagged && faulted.CompareAndSwap(false, true):
				// The next findAndModify is the publication (its lease,
				// renewed before the tags, is not due again): it applies,
				// its reply is lost.
				return b.server.Faults.Add(ctx, mongotest.Fault{Command: "findAndModify", Kind: mongotest.DropAfterForward, Count: 1})
			case step == twopc.FeedRereading:
				rereading.Store(true)
				reread.stop()
			case step == twopc.FeedScanned && rereading.Load():
				scanAgain.stop()
			case step == twopc.FeedLost:
				select {
				case lost <- struct{}{}:
				default:
				}
			}
			return nil
		}))
	feedRun(t, b, fA)
	t1 := transfers(t, b, b.c, 1)[0]
	reread.reached(t, "A's read of the feed after its publication's reply was lost")

	other := b.coordinator(twopc.WithApplication("other"))
	fB := other.Feed("trust", twopc.WithFeedLease(lease), twopc.WithFeedPoll(5*time.Millisecond),
		twopc.WithFeedHook(func(step int) error {
			if step == twopc.FeedScanned {
				scanB.stop()
			}
			return nil
		}))
	t2 := transfers(t, b, b.c, 1)[0]
	feedRun(t, b, fB) // takes over once A's lease lapses
	scanB.reached(t, "B's scan of T2")
	x := transfers(t, b, b.c, 1)[0]

	close(reread.open)
	select {
	case <-scanAgain.at: // A numbers a round of its own: held there
	case <-lost: // A gave its epoch up
	case <-ctx.Done():
		t.Fatal("A neither scanned again nor gave its epoch up")
	}
	close(scanB.open) // B tags T2 and publishes batch 2
	evs, pos := readUntil(t, fB, "", 2)
	assert.Equal(t, []string{t1.Hex(), t2.Hex()}, []string{evs[0].Txn.ID.Hex(), evs[1].Txn.ID.Hex()})
	close(scanAgain.open) // A, if it scanned, tags what it read

	y := transfers(t, b, b.c, 1)[0]
	var after []string
	for e, err := range fB.All(ctx, pos) {
		require.NoError(t, err)
		after = append(after, e.Txn.ID.Hex())
		if e.Txn.ID == y {
			break
		}
	}
	assert.Contains(t, after, x.Hex(), "X is delivered to the reader that read batch 2")
}

// groupPos reads group's saved position on feed name ("" before the
// group is made).
func groupPos(t *testing.T, b *bank, name, group string) string {
	t.Helper()
	var d struct {
		Pos string `bson:"pos"`
	}
	err := b.db.Collection("transactions_feeds").FindOne(testCtx(t), bson.D{{Key: "_id", Value: "group:" + name + ":" + group}}).Decode(&d)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return "" // not made yet
	}
	require.NoError(t, err)
	return d.Pos
}

// TestFeedTrustPositionNeverBack: a subscriber group saves its position
// after each of two events (two batches); the first save, sent again
// late (a duplicate the network delivered after the second), must not
// move the saved position back. Before, the save was guarded by the
// group's epoch only: the duplicate applied, and a restart handed the
// acknowledged second event over again.
func TestFeedTrustPositionNeverBack(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("back", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	var rec writeRecorder
	sub, err := twopc.NewCoordinator(rec.database(b), twopc.WithApplication("hooks"))
	require.NoError(t, err)
	fs := sub.Feed("back", twopc.WithFeedPoll(5*time.Millisecond))

	handled := make(chan twopc.Event, 10)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- fs.Subscribe(sctx, "g", func(_ context.Context, evs []twopc.Event) error {
			for _, e := range evs {
				handled <- e
			}
			return nil
		})
	}()
	var last twopc.Position
	for range 2 {
		transfers(t, b, b.c, 1)
		select {
		case e := <-handled:
			last = e.Pos
		case <-ctx.Done():
			t.Fatal("no event handled")
		}
	}
	for groupPos(t, b, "back", "g") != string(last) { // the second save lands
		require.NoError(t, ctx.Err())
	}
	stop()
	<-done

	var saves []bson.Raw
	for _, cmd := range rec.recorded() {
		if coll, _ := cmd.Lookup("update").StringValueOK(); coll == "transactions_feeds" && strings.Contains(cmd.String(), `"$set": {"pos"`) {
			saves = append(saves, cmd)
		}
	}
	require.GreaterOrEqual(t, len(saves), 2, "two saves of the position")
	_ = resend(ctx, b.db, saves[0]) // the first save, late
	assert.Equal(t, string(last), groupPos(t, b, "back", "g"), "the saved position never moves back")

	// A restart hands nothing acknowledged again.
	again := make(chan twopc.Event, 10)
	rctx, rstop := context.WithCancel(ctx)
	rdone := make(chan error, 1)
	go func() {
		rdone <- fs.Subscribe(rctx, "g", func(_ context.Context, evs []twopc.Event) error {
			for _, e := range evs {
				again <- e
			}
			return nil
		})
	}()
	z := transfers(t, b, b.c, 1)[0]
	select {
	case e := <-again:
		assert.Equal(t, z.Hex(), e.Txn.ID.Hex(), "the first event after a restart is the new one")
	case <-ctx.Done():
		t.Fatal("nothing handled after the restart")
	}
	rstop()
	<-rdone
}

// TestFeedTrustOneHandlerAtATime: a group's handler runs (it waits for
// its context) when the reply of its lease's renewal is held back 1.5 s,
// its lease 300 ms; another subscriber of the group takes it over once the
// lease lapses. When the second's handler runs, the first's context must
// be done already: at most one handler of a group with a live context.
// Before, the first was canceled only when its stalled renewal returned,
// 1.5 s in: two handlers ran at once.
func TestFeedTrustOneHandlerAtATime(t *testing.T) {
	const lease = 300 * time.Millisecond
	b := newFaultBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	feedRun(t, b, b.c.Feed("one", twopc.WithFeedPoll(5*time.Millisecond)))
	transfers(t, b, b.c, 1)

	first, second := b.coordinator(twopc.WithApplication("first")), b.coordinator(twopc.WithApplication("second"))
	opts := []twopc.FeedOption{twopc.WithFeedLease(lease), twopc.WithFeedPoll(5 * time.Millisecond)}
	firstCtx := make(chan context.Context, 1)
	fctx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	go func() {
		_ = first.Feed("one", opts...).Subscribe(fctx, "g", func(hctx context.Context, _ []twopc.Event) error {
			select {
			case firstCtx <- hctx:
			default:
			}
			<-hctx.Done()
			stopFirst() // the first subscriber stops, not to take the group back
			return hctx.Err()
		})
	}()
	var hctx context.Context
	select {
	case hctx = <-firstCtx:
	case <-ctx.Done():
		t.Fatal("the first handler never ran")
	}
	// Its next renewal applies; its reply comes 1.5 s late.
	require.NoError(t, b.server.Faults.Add(ctx, mongotest.Fault{Command: "findAndModify", Kind: mongotest.Delay, Count: 1, Delay: 1500 * time.Millisecond}))

	firstLive := make(chan bool, 1)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = second.Feed("one", opts...).Subscribe(sctx, "g", func(context.Context, []twopc.Event) error {
			select {
			case firstLive <- hctx.Err() == nil:
			default:
			}
			return nil
		})
	}()
	select {
	case live := <-firstLive:
		assert.False(t, live, "the first handler's context was still live when the second's handler ran")
	case <-ctx.Done():
		t.Fatal("the second subscriber never took the group over")
	}
}

// TestFeedTrustLongRoundKeepsItsLease: a round of 40 transactions whose
// tags go in four commands (WithWriteBatch 10), each reply held back
// 400 ms, outlasts the sequencer's 1 s lease, with a second sequencer
// waiting to take over. The round must keep its lease (renewed between
// its tag commands): no takeover, and all 40 published by the first
// sequencer. Before, nothing renewed the lease between the renewal before
// the tags and the one before the publication: the waiting sequencer
// took over mid-round, the first's publication was refused, and the next
// round, the orphans on top of what waits, was longer still (the
// livelock seen under load).
func TestFeedTrustLongRoundKeepsItsLease(t *testing.T) {
	const lease, n = time.Second, 40
	b := newFaultBank(t, twopc.WithSyncSettle(), twopc.WithWriteBatch(10))
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	opts := []twopc.FeedOption{twopc.WithFeedLease(lease), twopc.WithFeedPoll(5 * time.Millisecond), twopc.WithFeedBatch(100)}

	// The feed begins (a sequencer that stops at once, giving its lease
	// up clean), and 40 transfers wait for it.
	stopped := errors.New("stopped at once")
	require.ErrorIs(t, b.c.Feed("long", append(opts, twopc.WithFeedHook(func(int) error { return stopped }))...).Run(ctx), stopped)
	transfers(t, b, b.c, n)

	// The first sequencer scans them all, and holds there until the
	// second waits for the lease; its tag commands' replies then come
	// 400 ms late each.
	scanned := newGate(t)
	var delayed atomic.Bool
	first := b.coordinator(twopc.WithApplication("first"), twopc.WithWriteBatch(10))
	f := first.Feed("long", append(opts, twopc.WithFeedHook(func(step int) error {
		if step == twopc.FeedScanned && delayed.CompareAndSwap(false, true) {
			scanned.stop()
			return b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.Delay, Count: n / 10, Delay: 400 * time.Millisecond})
		}
		return nil
	}))...)
	feedRun(t, b, f)
	scanned.reached(t, "the first sequencer's scan")
	standby := b.coordinator(twopc.WithApplication("standby"), twopc.WithWriteBatch(10))
	feedRun(t, b, standby.Feed("long", opts...))
	close(scanned.open)

	evs, _ := readUntil(t, f, "", n)
	assert.Len(t, evs, n)
	st, err := f.Status(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Takeovers, "the working sequencer kept its lease: %+v", st)
	assert.True(t, strings.HasPrefix(st.Holder, "first/"), "%+v", st)
	assert.Equal(t, int64(1), st.Published, "its one round published them all: %+v", st)
}

// TestFeedTrustOrphanOnALateCopy: a sequencer tags transfer T for batch 1
// and stops before publishing; the next takes over, numbers T again and
// publishes it; history removes T. Then the network delivers T's insert
// again (a late copy, pending) and the first sequencer's tag write (which
// matches the copy, untagged): the copy holds the orphaned tag. The next
// round numbers orphans again: before, it tagged the copy for its batch
// though the copy has no event (pending, then canceled as a late copy),
// and every read through that batch failed ("tagged ... with no event
// there"). Now the copy is never in a batch: a reader reads on, and gets
// the transfer after it.
func TestFeedTrustOrphanOnALateCopy(t *testing.T) {
	const lease = 200 * time.Millisecond
	ctx := testCtx(t)
	b := newBank(t)
	c, rec := lateCopyCoordinator(t, b)
	stopped := errors.New("stopped before publishing")
	f1 := c.Feed("lc", twopc.WithFeedLease(lease), twopc.WithFeedPoll(5*time.Millisecond),
		twopc.WithFeedHook(func(step int) error {
			if step == twopc.FeedTagged {
				return stopped
			}
			return nil
		}))
	done := make(chan error, 1)
	go func() { done <- f1.Run(ctx) }()
	waitFeed(t, ctx, b.db, "lc")
	tr, err := c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	require.ErrorIs(t, <-done, stopped)

	f2 := c.Feed("lc", twopc.WithFeedLease(lease), twopc.WithFeedPoll(5*time.Millisecond))
	stop := feedRun(t, b, f2)
	evs, pos := readUntil(t, f2, "", 1)
	require.Equal(t, tr.ID, evs[0].Txn.ID)
	stop()
	removeFinal(t, b, 1)

	var insert, tag bson.Raw
	for _, cmd := range rec.recorded() {
		coll, _ := cmd.Lookup("findAndModify").StringValueOK() // the insert, an upsert
		if coll == "transactions" && insert == nil && strings.Contains(cmd.String(), tr.ID.Hex()) &&
			strings.Contains(cmd.String(), "$setOnInsert") {
			insert = cmd
		}
		coll, _ = cmd.Lookup("update").StringValueOK()
		if coll == "transactions" && tag == nil && strings.Contains(cmd.String(), `_lc"`) {
			tag = cmd
		}
	}
	require.NotNil(t, insert, "T's insert")
	require.NotNil(t, tag, "the first sequencer's tag write")
	_ = resend(ctx, b.db, insert)
	_ = resend(ctx, b.db, tag)

	feedRun(t, b, f2) // numbers the orphans again
	u, err := c.Transfer(ctx, "A", "B", 5)
	require.NoError(t, err)
	var after []string
	for e, err := range f2.All(ctx, pos) {
		require.NoError(t, err, "a read past the orphan")
		after = append(after, e.Txn.ID.Hex())
		if e.Txn.ID == u.ID {
			break
		}
	}
	assert.Equal(t, []string{u.ID.Hex()}, after, "U, and nothing of the copy")
	copied, err := b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: tr.ID}}).Raw()
	require.NoError(t, err, "the late copy")
	elems, err := copied.Elements()
	require.NoError(t, err)
	for _, e := range elems {
		if strings.HasSuffix(e.Key(), "_lc") {
			assert.Equal(t, `"-"`, e.Value().String(), "the copy is in no batch: %s", e.Key())
		}
	}
}

// TestFeedTrustKeepCountsFromPublication: a reader is at the feed's head;
// the sequencer stops (an outage) and transfer T is made and finishes;
// once T ended longer ago than history's keep (2 s), the sequencer
// starts again and publishes T, and a history pass runs at once. Before,
// keep counted from T's end: the pass moved T as soon as it was published,
// and the reader, at the head the whole time, got ErrFeedTruncated. Now
// keep counts from T's publication: the pass keeps it, the reader gets T.
func TestFeedTrustKeepCountsFromPublication(t *testing.T) {
	const keep = 2 * time.Second
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle(), twopc.WithHistory(keep, nil))
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("keep", twopc.WithFeedPoll(5*time.Millisecond))
	stop := feedRun(t, b, f)
	transfers(t, b, b.c, 1)
	_, head := readUntil(t, f, "", 1)
	stop() // the outage

	tr := transfers(t, b, b.c, 1)[0]
	got, err := b.c.Get(ctx, tr)
	require.NoError(t, err)
	for { // until T ended longer ago than keep, by the server's clock
		now, err := schema.ServerNow(ctx, b.db)
		require.NoError(t, err)
		if now.After(got.LastModified.Add(keep + 100*time.Millisecond)) {
			break
		}
		require.NoError(t, ctx.Err())
	}
	published := make(chan struct{})
	var once atomic.Bool
	f2 := b.c.Feed("keep", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(func(step int) error {
		if step == twopc.FeedPublished && once.CompareAndSwap(false, true) {
			close(published)
		}
		return nil
	}))
	feedRun(t, b, f2)
	select {
	case <-published:
	case <-ctx.Done():
		t.Fatal("T never published")
	}
	remover := b.coordinator(twopc.WithApplication("remover"), twopc.WithHistory(keep, nil), twopc.WithCheckpoints(1000, 0))
	_, err = twopc.NewRecoverer(remover).RecoverOnce(ctx)
	require.NoError(t, err)

	evs, _, err := f.Read(ctx, head, 10)
	require.NoError(t, err, "the reader at the head the whole time")
	require.Len(t, evs, 1)
	assert.Equal(t, tr, evs[0].Txn.ID)
}

// TestFeedStatusShowsGroupsLag: a feed with three events and two groups,
// one that handled them all and one whose handler refused the first
// slice: Status lists both, by name, each with its saved position, how
// many published events follow it and the first one's time.
func TestFeedStatusShowsGroupsLag(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("lag", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	transfers(t, b, b.c, 3)
	evs, head := readUntil(t, f, "", 3)

	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- f.Subscribe(sctx, "done", func(context.Context, []twopc.Event) error { return nil })
	}()
	for groupPos(t, b, "lag", "done") != string(head) { // it saved the head
		require.NoError(t, ctx.Err())
	}
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	refused := errors.New("not now")
	require.ErrorIs(t, f.Subscribe(ctx, "late", func(context.Context, []twopc.Event) error { return refused }), refused)

	st, err := f.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Groups, 2)
	all, late := st.Groups[0], st.Groups[1]
	assert.Equal(t, "done", all.Name)
	assert.Equal(t, head, all.Position)
	assert.Zero(t, all.Behind)
	assert.True(t, all.Oldest.IsZero())
	assert.Equal(t, "late", late.Name)
	assert.Equal(t, 3, late.Behind)
	assert.True(t, late.Oldest.Equal(evs[0].At), "the oldest event not acknowledged: %v, want %v", late.Oldest, evs[0].At)
	assert.False(t, late.Truncated)
	assert.Empty(t, late.Holder, "released")
}

// TestFeedTrustCleanStopFinishesTheHandler: a subscriber's context ends
// (a SIGTERM'd consumer) while its handler is at work: the handler's own
// context stays live, the handler finishes, its events are acknowledged
// (the position saved) and the group's lease released, so a restart
// resumes at once with the next event, not those handled. Before, the
// handler's context ended with the subscriber's, the slice was handed
// again after the restart.
func TestFeedTrustCleanStopFinishesTheHandler(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("stop", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(2*time.Second))
	feedRun(t, b, f)
	first := transfers(t, b, b.c, 1)[0]
	readUntil(t, f, "", 1)

	sctx, stop := context.WithCancel(ctx)
	working, finish := make(chan struct{}), make(chan struct{})
	var liveAfterStop atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- f.Subscribe(sctx, "g", func(hctx context.Context, evs []twopc.Event) error {
			close(working)
			<-finish
			liveAfterStop.Store(hctx.Err() == nil)
			return nil
		})
	}()
	<-working
	stop() // the consumer is told to stop while its handler works
	close(finish)
	require.ErrorIs(t, <-done, context.Canceled)
	assert.True(t, liveAfterStop.Load(), "the handler's context outlived the subscriber's, for its grace")
	st, err := f.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Groups, 1)
	assert.Zero(t, st.Groups[0].Behind, "the handled event acknowledged")
	assert.Empty(t, st.Groups[0].Holder, "the lease released")

	next := transfers(t, b, b.c, 1)[0]
	got := make(chan twopc.Event, 10)
	rctx, rstop := context.WithCancel(ctx)
	rdone := make(chan error, 1)
	go func() {
		rdone <- f.Subscribe(rctx, "g", func(_ context.Context, evs []twopc.Event) error {
			for _, e := range evs {
				got <- e
			}
			return nil
		})
	}()
	e := <-got
	assert.Equal(t, next, e.Txn.ID, "the restart resumes after %s", first.Hex())
	rstop()
	<-rdone
}

// TestFeedTrustSliceBoundsRedelivery: Subscribe hands at most
// WithFeedSlice events a handler call (100 by default, apart from the
// sequencer's batch), and saves after each call: five events in one batch,
// a slice of 2, are handed as 2, 2, 1, the position saved after each, so
// a crash redelivers at most one slice.
func TestFeedTrustSliceBoundsRedelivery(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	start := newGate(t)
	sq := b.c.Feed("slice", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(func(step int) error {
		if step == twopc.FeedScanned {
			start.stop() // one round, once all five wait
		}
		return nil
	}))
	stopped := errors.New("stopped at once")
	require.ErrorIs(t, b.c.Feed("slice", twopc.WithFeedHook(func(int) error { return stopped })).Run(ctx), stopped)
	transfers(t, b, b.c, 5)
	feedRun(t, b, sq)
	start.reached(t, "the round of all five")
	close(start.open)
	evs, _ := readUntil(t, sq, "", 5)
	st, err := sq.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Published, "one batch")

	f := b.c.Feed("slice", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedSlice(2))
	var sizes []int
	var saved []string
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- f.Subscribe(sctx, "g", func(_ context.Context, got []twopc.Event) error {
			sizes = append(sizes, len(got))
			saved = append(saved, groupPos(t, b, "slice", "g"))
			if len(sizes) == 3 {
				stop()
			}
			return nil
		})
	}()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, []int{2, 2, 1}, sizes)
	assert.Equal(t, string(evs[1].Pos), saved[1], "saved after the first slice")
	assert.Equal(t, string(evs[3].Pos), saved[2], "saved after the second")
	assert.Equal(t, string(evs[4].Pos), groupPos(t, b, "slice", "g"), "and after the last, at its stop")
}
