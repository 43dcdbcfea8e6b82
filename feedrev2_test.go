package twopc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestFeedReviewNullTag: a transaction whose tag field holds null (a
// program's write, or a field set by hand) matches the search for what
// waits ({fx: null}); the tag's guard matches it too, so it is numbered
// like any other, and the feed neither spins nor publishes empty batches
// for it, nor holds a later event back.
func TestFeedReviewNullTag(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	gate := newStallAt(t, twopc.FeedTaken)
	f := b.c.Feed("nul", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedBatch(1), twopc.WithFeedHook(gate.hook))
	feedRun(t, b, f)
	<-gate.stalled
	first := transfers(t, b, b.c, 1)
	_, err := b.db.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: first[0]}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "fx_nul", Value: nil}}}})
	require.NoError(t, err)
	close(gate.released)
	later := transfers(t, b, b.c, 1)
	evs, _ := readUntil(t, f, "", 2)
	assert.ElementsMatch(t, []string{first[0].Hex() + ".committed", later[0].Hex() + ".committed"}, ids(evs))
	st, err := f.Status(ctx)
	require.NoError(t, err)
	assert.LessOrEqual(t, st.Published, int64(2), "empty batches published")
}

// TestFeedReviewGroupStartMoves: a new group's position stays "" until its
// first save; "" starts at gone+1, read anew at every Read. A group whose
// handler refused its first slice, restarted after history moved batch 1,
// starts past it: the event it never acknowledged is skipped, no
// ErrFeedTruncated (a group with a saved position gets one).
func TestFeedReviewGroupStartMoves(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("start", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	transfers(t, b, b.c, 1)
	readUntil(t, f, "", 1)
	transfers(t, b, b.c, 1)
	readUntil(t, f, "", 2)
	boom := assert.AnError
	var got []string
	err := f.Subscribe(ctx, "g", func(_ context.Context, evs []twopc.Event) error {
		got = append(got, ids(evs)...)
		return boom // not acknowledged
	})
	require.ErrorIs(t, err, boom)
	// History moves batch 1's transaction: it raises gone first (as
	// feedsAllow does).
	_, err = b.db.Collection("transactions_feeds").UpdateOne(ctx, bson.D{{Key: "_id", Value: "feed:start"}},
		bson.D{{Key: "$max", Value: bson.D{{Key: "gone", Value: int64(1)}}}})
	require.NoError(t, err)
	var again []string
	err = f.Subscribe(ctx, "g", func(_ context.Context, evs []twopc.Event) error {
		again = append(again, ids(evs)...)
		return boom // stop here
	})
	t.Logf("first delivery %v; after gone moved: %v, err %v", got, again, err)
	assert.ErrorIs(t, err, twopc.ErrFeedTruncated, "an unacknowledged event skipped silently")
}

// TestFeedReviewLeaseFloor: a lease under a millisecond was written as
// 0 ms, a lease always free; WithFeedLease takes anything under 100 ms as
// 100 ms.
func TestFeedReviewLeaseFloor(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("ms", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	transfers(t, b, b.c, 1)
	readUntil(t, f, "", 1)
	sub := b.c.Feed("ms", twopc.WithFeedLease(500*time.Microsecond), twopc.WithFeedPoll(5*time.Millisecond))
	errStop := errors.New("stop")
	var leaseMs int64
	err := sub.Subscribe(ctx, "g", func(context.Context, []twopc.Event) error {
		var d struct {
			LeaseMs int64 `bson:"leaseMs"`
		}
		require.NoError(t, b.db.Collection("transactions_feeds").FindOne(ctx, bson.D{{Key: "_id", Value: "group:ms:g"}}).Decode(&d))
		leaseMs = d.LeaseMs
		return errStop
	})
	require.ErrorIs(t, err, errStop)
	assert.EqualValues(t, 100, leaseMs)
}

// TestFeedReviewCleanRelease: a sequencer that stops with every tag it
// sent published gives the lease up clean: the next takes it over with
// no orphan entry (an outage of lost replies, or restarts, no longer use
// up the feed's takeovers).
func TestFeedReviewCleanRelease(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("clean", twopc.WithFeedPoll(5*time.Millisecond))
	stop := feedRun(t, b, f)
	transfers(t, b, b.c, 2)
	readUntil(t, f, "", 2)
	stop()
	feedRun(t, b, b.c.Feed("clean", twopc.WithFeedPoll(5*time.Millisecond)))
	transfers(t, b, b.c, 1)
	readUntil(t, f, "", 3)
	st, err := f.Status(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, st.Epoch, "taken again")
	assert.Zero(t, st.Takeovers, "an orphan entry for a clean release")
}
