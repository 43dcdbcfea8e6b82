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

// feedEntries reads the lengths of feed name's runs and orphans, and its
// epoch and run.
func feedEntries(t *testing.T, b *bank, name string) (runs, orphans int, epoch, run int64) {
	t.Helper()
	var d struct {
		Epoch   int64    `bson:"epoch"`
		Run     int64    `bson:"run"`
		Runs    []bson.D `bson:"runs"`
		Orphans []bson.D `bson:"orphans"`
	}
	require.NoError(t, b.db.Collection("transactions_feeds").FindOne(testCtx(t), bson.D{{Key: "_id", Value: "feed:" + name}}).Decode(&d))
	return len(d.Runs), len(d.Orphans), d.Epoch, d.Run
}

// TestFeedDocumentBounded: the feed's document grows only by takeovers
// that may leave tags unpublished, at most maxFeedTakeovers (10,000) of
// them, with no Recoverer running. Restarts that stop clean (every tag
// published) continue one run: the document keeps one run and no orphan
// however often the sequencer restarts, and every event is read once. A
// takeover mid-batch adds one run and one orphan. At the cap, Run
// refuses to take the lease, and writes nothing.
func TestFeedDocumentBounded(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	const restarts = 5
	for i := range restarts {
		f := b.c.Feed("bound", twopc.WithFeedPoll(5*time.Millisecond))
		stop := feedRun(t, b, f)
		transfers(t, b, b.c, 1)
		readUntil(t, f, "", i+1)
		stop()
	}
	runs, orphans, epoch, run := feedEntries(t, b, "bound")
	assert.EqualValues(t, restarts, epoch, "each restart takes the lease")
	assert.Equal(t, 1, runs, "clean restarts start no run")
	assert.Zero(t, orphans, "clean restarts record no orphan")
	assert.EqualValues(t, 1, run, "the first epoch's run, continued")

	// A sequencer stalled after tagging, taken over once its lease lapsed.
	stall := newStallAt(t, twopc.FeedTagged)
	stalled := b.c.Feed("bound", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(200*time.Millisecond),
		twopc.WithFeedHook(stall.hook))
	stopStalled := feedRun(t, b, stalled)
	transfers(t, b, b.c, 1)
	<-stall.stalled
	next := b.coordinator().Feed("bound", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, next)
	evs, _ := readUntil(t, next, "", restarts+1)
	assert.Len(t, uniq(ids(evs)), restarts+1, "every event once")
	close(stall.released)
	stopStalled()
	runs, orphans, _, _ = feedEntries(t, b, "bound")
	assert.Equal(t, 2, runs, "a takeover mid-batch starts one run")
	assert.Equal(t, 1, orphans, "and records one orphan")

	// At the cap: a lease left by a holder that stopped mid-batch.
	capped := b.c.Feed("capped", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, capped)()
	full := make(bson.A, 10000)
	for i := range full {
		full[i] = bson.D{{Key: "e", Value: int64(1)}, {Key: "b", Value: int64(1)}}
	}
	coll := b.db.Collection("transactions_feeds")
	_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "feed:capped"}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "orphans", Value: full}, {Key: "epoch", Value: int64(3)}, {Key: "run", Value: int64(3)},
		{Key: "holder", Value: "gone"}, {Key: "clean", Value: false},
		{Key: "lastModified", Value: time.Unix(0, 0)}}}})
	require.NoError(t, err)
	_, _, before, _ := feedEntries(t, b, "capped")
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = b.c.Feed("capped").Run(runCtx)
	require.Error(t, err)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "refused, not timed out: %v", err)
	assert.Contains(t, err.Error(), "taken over 10000 times")
	_, orphans, after, _ := feedEntries(t, b, "capped")
	assert.Equal(t, before, after, "the lease not taken")
	assert.Equal(t, 10000, orphans, "no orphan added")
}

// uniq returns ss without repeats.
func uniq(ss []string) map[string]bool {
	out := map[string]bool{}
	for _, s := range ss {
		out[s] = true
	}
	return out
}
