package twopc_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// stallAt is a feed hook that stalls the sequencer the first time it
// reaches step: it closes stalled and waits for release (or the test's
// end), as a process paused there would.
type stallAt struct {
	step     int
	once     atomic.Bool
	stalled  chan struct{}
	released chan struct{}
	ctx      context.Context
}

func newStallAt(t *testing.T, step int) *stallAt {
	return &stallAt{step: step, stalled: make(chan struct{}), released: make(chan struct{}), ctx: testCtx(t)}
}

func (s *stallAt) hook(step int) error {
	if step != s.step || !s.once.CompareAndSwap(false, true) {
		return nil
	}
	close(s.stalled)
	select {
	case <-s.released:
	case <-s.ctx.Done():
	}
	return nil
}

// ids are the IDs of evs, in order.
func ids(evs []twopc.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// transfers makes n transfers of 1 from A to B and returns their ids.
func transfers(t *testing.T, b *bank, c *twopc.Coordinator, n int) []bson.ObjectID {
	t.Helper()
	var out []bson.ObjectID
	for range n {
		txn, err := c.Transfer(testCtx(t), "A", "B", 1)
		require.NoError(t, err)
		out = append(out, txn.ID)
	}
	return out
}

// TestFeedSequencerStalls stalls a sequencer after it tagged its batch
// (not published) and, apart, after it published one: a second sequencer
// takes over once the first's lease lapses. No reader sees the stalled
// batch before it is published by its owner; the tags left unpublished
// are numbered again; the first, released, is refused by its epoch; every
// event comes once, with the same ID every read.
func TestFeedSequencerStalls(t *testing.T) {
	for _, step := range []int{twopc.FeedTagged, twopc.FeedPublished} {
		name := map[int]string{twopc.FeedTagged: "tagged", twopc.FeedPublished: "published"}[step]
		t.Run(name, func(t *testing.T) {
			b := newBank(t, twopc.WithSyncSettle())
			ctx := testCtx(t)
			b.open(map[string]int64{"A": 1000, "B": 0})
			stall := newStallAt(t, step)
			first := b.c.Feed("f", twopc.WithFeedLease(300*time.Millisecond), twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(stall.hook))
			stopFirst := feedRun(t, b, first)
			made := transfers(t, b, b.c, 3)
			<-stall.stalled
			reader := b.c.Feed("f")
			evs, _, err := reader.Read(ctx, "", 10)
			require.NoError(t, err)
			if step == twopc.FeedTagged {
				assert.Empty(t, evs, "a batch read before it was published")
			} else {
				assert.NotEmpty(t, evs, "the published batch")
			}

			second := b.c.Feed("f", twopc.WithFeedLease(300*time.Millisecond), twopc.WithFeedPoll(5*time.Millisecond))
			feedRun(t, b, second)
			made = append(made, transfers(t, b, b.c, 2)...)
			got, pos := readUntil(t, reader, "", 5)
			close(stall.released) // the first goes on: refused by its epoch
			made = append(made, transfers(t, b, b.c, 2)...)
			more, _ := readUntil(t, reader, pos, 2)
			stopFirst()
			all := append(got, more...)
			seen := map[bson.ObjectID]int{}
			for _, e := range all {
				assert.Equal(t, twopc.EventCommitted, e.Kind)
				seen[e.Txn.ID]++
			}
			for _, id := range made {
				assert.Equal(t, 1, seen[id], "transaction %s", id.Hex())
			}
			again, _, err := reader.Read(ctx, "", 100)
			require.NoError(t, err)
			assert.Equal(t, ids(all), ids(again), "the same events in the same order, read again")
		})
	}
}

// TestFeedOrphanNumberedAgain: a sequencer reads the events waiting and
// stalls before its tags; a second takes the lease over and stalls in
// turn before its first round; the first's tags then land (a write
// delivered late, after its epoch ended) and its publish is refused. The
// second finds those tags (an orphan of the epoch it took over), numbers
// them again, and publishes: every event once, never under the first's
// epoch.
func TestFeedOrphanNumberedAgain(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	// The first waits, once its lease is taken, for the three transfers,
	// so that one scan finds them all, and stalls after that scan.
	gate := newStallAt(t, twopc.FeedTaken)
	scanned := newStallAt(t, twopc.FeedScanned)
	first := b.c.Feed("o", twopc.WithFeedLease(300*time.Millisecond), twopc.WithFeedPoll(5*time.Millisecond),
		twopc.WithFeedHook(func(step int) error { _ = gate.hook(step); return scanned.hook(step) }))
	stopFirst := feedRun(t, b, first)
	<-gate.stalled
	made := transfers(t, b, b.c, 3)
	close(gate.released)
	<-scanned.stalled

	// The second's lease is long: the first, refused, cannot take it back
	// while the second is stalled.
	taken := newStallAt(t, twopc.FeedTaken)
	second := b.c.Feed("o", twopc.WithFeedLease(time.Minute), twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(taken.hook))
	ctx2, cancel2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- second.Run(ctx2) }()
	<-taken.stalled // the lease is the second's now
	close(scanned.released)
	// The first's tags land; its publish is refused by its epoch.
	for {
		n, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{{Key: "fx_o", Value: bson.D{{Key: "$exists", Value: true}}}})
		require.NoError(t, err)
		if n == 3 {
			break
		}
		b.serverPast(time.Now().Add(-time.Hour))
	}
	reader := b.c.Feed("o")
	evs, _, err := reader.Read(ctx, "", 10)
	require.NoError(t, err)
	assert.Empty(t, evs, "an orphan's tags read as a batch")
	close(taken.released)
	got, _ := readUntil(t, reader, "", 3)
	cancel2()
	require.ErrorIs(t, <-done2, context.Canceled)
	stopFirst()
	seen := map[bson.ObjectID]int{}
	for _, e := range got {
		seen[e.Txn.ID]++
	}
	for _, id := range made {
		assert.Equal(t, 1, seen[id], "transaction %s", id.Hex())
	}
	var fd struct {
		Orphans []bson.M `bson:"orphans"`
		Epoch   int64    `bson:"epoch"`
	}
	require.NoError(t, b.db.Collection("transactions_feeds").FindOne(ctx, bson.D{{Key: "_id", Value: "feed:o"}}).Decode(&fd))
	assert.NotEmpty(t, fd.Orphans, "the takeover recorded the batch the first epoch may have tagged")
}

// TestFeedSubscriberResumes: a hold held, captured twice and expired,
// and transfers; a subscriber that stops after every slice it handled
// (the next call fails, as a process dying there) and is started again
// handles every event, in the feed's order, none skipped, none twice
// (its position is saved after each slice).
func TestFeedSubscriberResumes(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("subs", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	h, err := b.c.Hold(ctx, "A", "B", 100, twopc.WithExpiry(time.Hour))
	require.NoError(t, err)
	c1, err := b.c.Capture(ctx, h.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	c2, err := b.c.Capture(ctx, h.ID, 20, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	b.backdate(h.ID, 2*time.Hour)
	_, err = twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"))).RecoverOnce(ctx)
	require.NoError(t, err)
	transfers(t, b, b.c, 2)
	want, _ := readUntil(t, f, "", 6)
	holdEvents := 0
	for _, e := range want {
		if e.Txn.ID == h.ID || e.Txn.ID == c1.ID || e.Txn.ID == c2.ID {
			holdEvents++
		}
	}
	require.Equal(t, 4, holdEvents, "held, captured, captured, expired")

	sub := b.c.Feed("subs", twopc.WithFeedSlice(1), twopc.WithFeedPoll(5*time.Millisecond))
	var handled []twopc.Event
	errStop := errors.New("stopped")
	starts := 0
	for len(handled) < len(want) {
		starts++
		require.Less(t, starts, 50, "the subscriber does not get on")
		calls := 0
		run, stop := context.WithCancel(ctx)
		err := sub.Subscribe(run, "webhook", func(_ context.Context, evs []twopc.Event) error {
			calls++
			if calls > 1 {
				return errStop // dies before handling the next slice
			}
			handled = append(handled, evs...)
			if len(handled) >= len(want) {
				stop() // all there: the subscriber is stopped as it saves
			}
			return nil
		})
		stop()
		if !errors.Is(err, context.Canceled) {
			require.ErrorIs(t, err, errStop)
		}
	}
	assert.GreaterOrEqual(t, starts, len(want), "one start per event")
	assert.Equal(t, ids(want), ids(handled), "every event once, in order")
}

// TestFeedHistoryWaits: history keeps a transaction until the feed
// published its events, records the batch before it moves it, and a
// reader behind it gets ErrFeedTruncated; a deleted feed no longer holds
// history back, and its name is not used again.
func TestFeedHistoryWaits(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	archive := b.db.Collection("archive")
	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	stall := newStallAt(t, twopc.FeedTagged)
	f := c.Feed("hist", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(stall.hook))
	feedRun(t, b, f)
	made := transfers(t, b, c, 2)
	<-stall.stalled
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive)))
	inLog := func() int64 {
		n, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: made}}}})
		require.NoError(t, err)
		return n
	}
	b.ageFinal()
	_, err := r.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, inLog(), "history took transactions the feed had not published")

	close(stall.released)
	evs, pos := readUntil(t, f, "", 2)
	b.ageFinal()
	_, err = r.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, inLog(), "published, then moved")
	_, _, err = f.Read(ctx, evs[0].Pos, 10)
	require.ErrorIs(t, err, twopc.ErrFeedTruncated, "a reader behind what the log keeps")
	fresh, _, err := f.Read(ctx, "", 10)
	require.NoError(t, err, `a new reader ("") starts at what the feed keeps`)
	assert.Empty(t, fresh)
	more, _, err := f.Read(ctx, pos, 10)
	require.NoError(t, err, "a reader past it goes on")
	assert.Empty(t, more)
	assert.Len(t, evs, 2)

	require.NoError(t, f.Delete(ctx))
	kept := transfers(t, b, c, 1)
	b.ageFinal()
	_, err = r.RecoverOnce(ctx)
	require.NoError(t, err)
	n, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{{Key: "_id", Value: kept[0]}})
	require.NoError(t, err)
	assert.Zero(t, n, "a deleted feed held history back")
	_, _, err = f.Read(ctx, "", 1)
	require.ErrorIs(t, err, twopc.ErrFeedDeleted)
	require.ErrorIs(t, c.Feed("hist").Run(ctx), twopc.ErrFeedDeleted)
}

// TestFeedHistoryKeepsForAnotherFeed: of two feeds, one published a
// transaction's events and the other has not: history keeps the
// transaction, and the first feed's gone stays where it was, so its
// readers still read the event (from "" and from before it), which is
// still in the log. Before, the pass raised that feed's gone for every
// transaction it had published, moved or not, and its readers were told
// ErrFeedTruncated of an event the log still held.
func TestFeedHistoryKeepsForAnotherFeed(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	archive := b.db.Collection("archive")
	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	stall := newStallAt(t, twopc.FeedTagged)
	behind := c.Feed("behind", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(stall.hook))
	feedRun(t, b, behind)
	t.Cleanup(func() { close(stall.released) }) // before its Run is stopped
	ahead := c.Feed("ahead", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, ahead)
	made := transfers(t, b, c, 1)
	<-stall.stalled
	early, start, err := ahead.Read(ctx, "", 1) // before the event, if it is not published yet
	require.NoError(t, err)
	evs, _ := readUntil(t, ahead, "", 1)
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive)))
	b.ageFinal()
	_, err = r.RecoverOnce(ctx)
	require.NoError(t, err)
	n, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{{Key: "_id", Value: made[0]}})
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "history took a transaction a feed had not published")
	st, err := ahead.Status(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Gone, "gone raised for a transaction still in the log")
	again, _, err := ahead.Read(ctx, "", 10)
	require.NoError(t, err)
	assert.Equal(t, ids(evs), ids(again), `a reader from ""`)
	if len(early) == 0 { // start is before the event
		again, _, err = ahead.Read(ctx, start, 10)
		require.NoError(t, err, "a reader from before the event")
		assert.Equal(t, ids(evs), ids(again))
	}
}

// batchOf returns the batch feed name numbered transaction id's final
// event in, read from its tag.
func batchOf(t *testing.T, b *bank, name string, id bson.ObjectID) int64 {
	t.Helper()
	raw, err := b.db.Collection("transactions").FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(t, err)
	tag, ok := raw.Lookup("fx_" + name).StringValueOK()
	require.True(t, ok, "transaction %s has no tag", id.Hex())
	bs, _, _ := strings.Cut(tag, ".")
	n, err := strconv.ParseInt(bs, 36, 64)
	require.NoError(t, err)
	return n
}

// TestFeedOrderAcrossBatches: an event acknowledged before the sequencer
// began the scan for batch k is in batch k or an earlier one. Transfers
// made while the sequencer waits before its first round are all in batch
// 1; one made while it waits after publishing batch 1 is in batch 2.
func TestFeedOrderAcrossBatches(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	gate := newStallAt(t, twopc.FeedTaken)
	after := newStallAt(t, twopc.FeedPublished)
	f := b.c.Feed("order", twopc.WithFeedPoll(5*time.Millisecond),
		twopc.WithFeedHook(func(step int) error { _ = gate.hook(step); return after.hook(step) }))
	feedRun(t, b, f)
	<-gate.stalled
	first := transfers(t, b, b.c, 3) // acknowledged before the first scan
	close(gate.released)
	<-after.stalled // batch 1 published; the next scan has not begun
	second := transfers(t, b, b.c, 1)
	close(after.released)
	readUntil(t, f, "", 4)
	for _, id := range first {
		assert.EqualValues(t, 1, batchOf(t, b, "order", id))
	}
	assert.EqualValues(t, 2, batchOf(t, b, "order", second[0]))
}
