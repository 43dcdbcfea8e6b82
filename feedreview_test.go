package twopc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestFeedReviewCanceledAtMoves: a canceled transfer's event is ordered
// by its lastModified, which a duplicate of its own insert (the upsert
// {_id} → {$setOnInsert, $currentDate:{lastModified}}) delivered late
// refreshes. The published batch is then read in another order, and a
// reader resuming at its saved position skips an event.
func TestFeedReviewCanceledAtMoves(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0, "poor": 5})
	gate := newStallAt(t, twopc.FeedTaken)
	f := b.c.Feed("atmove", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(gate.hook))
	feedRun(t, b, f)
	<-gate.stalled
	_, err := b.c.Transfer(ctx, "poor", "B", 50) // canceled: At = lastModified
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	committed, err := b.c.Transfer(ctx, "A", "B", 10) // At = committedAt, later
	require.NoError(t, err)
	close(gate.released) // one scan: both in batch 1
	evs, _ := readUntil(t, f, "", 2)
	var canceledID bson.ObjectID
	for _, e := range evs {
		if e.Kind == twopc.EventCanceled {
			canceledID = e.Txn.ID
		}
	}
	require.False(t, canceledID.IsZero(), "a canceled event: %v", ids(evs))
	_ = committed

	// The canceled transfer's insert, delivered again (a duplicate the
	// network delayed): the library's own insertWrite.
	_, err = b.db.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: canceledID}},
		bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: "state", Value: "pending"}}},
			{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}}},
		options.UpdateOne().SetUpsert(true))
	require.NoError(t, err)

	// Every position saved before still resumes after its event: the
	// events after it, in the same order.
	for i := range evs {
		rest, _, err := f.Read(ctx, evs[i].Pos, 10)
		require.NoError(t, err)
		assert.Equal(t, ids(evs[i+1:]), ids(rest), "resumed after event %d", i)
	}
	again, _, err := f.Read(ctx, "", 10)
	require.NoError(t, err)
	assert.Equal(t, ids(evs), ids(again), "a published batch read in another order")
}

// TestFeedReviewSilentGap: history moves the transactions of the batches
// a reader is about to read after the reader read the feed's document
// (gone below its position). The reader finds the batches empty, returns
// no events and a position past them, with no second look: the events
// are skipped, no ErrFeedTruncated.
func TestFeedReviewSilentGap(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	archive := b.db.Collection("archive")
	c := b.coordinator(twopc.WithHistory(time.Millisecond, archive), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := c.Feed("gap", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	_, start, err := f.Read(ctx, "", 10) // a reader's position before any event
	require.NoError(t, err)
	transfers(t, b, c, 2)
	readUntil(t, f, "", 2)
	b.ageFinal()
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithHistory(time.Millisecond, archive)))

	// A reader whose client runs history right before its first read of
	// the log (after its read of the feed's document).
	var armed atomic.Bool
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "find" || e.Command.Lookup("find").StringValue() != "transactions" || !armed.CompareAndSwap(true, false) {
			return
		}
		_, err := r.RecoverOnce(ctx)
		assert.NoError(t, err)
	}}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(mon)).Database(b.db.Name())
	rc, err := twopc.NewCoordinator(db)
	require.NoError(t, err)
	reader := rc.Feed("gap")
	armed.Store(true)
	evs, pos, err := reader.Read(ctx, start, 10)
	require.False(t, armed.Load(), "history ran during the read")
	n, cerr := b.db.Collection("transactions").CountDocuments(ctx, bson.D{})
	require.NoError(t, cerr)
	require.Zero(t, n, "history moved the transfers")
	require.ErrorIs(t, err, twopc.ErrFeedTruncated, "got %d events and position %q: a silent gap", len(evs), pos)
}

// TestFeedReviewLostTagReply: the reply of the sequencer's tag bulk is
// lost after it applied; bulkByID's retry modifies nothing, so the round
// returns without publishing, and with no new event the batch is never
// published: the event waits for the next one.
func TestFeedReviewLostTagReply(t *testing.T) {
	b := newFaultBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	var faulted atomic.Bool
	f := b.c.Feed("lost", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(func(step int) error {
		if step == twopc.FeedScanned && faulted.CompareAndSwap(false, true) {
			return b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.DropAfterForward, Count: 1})
		}
		return nil
	}))
	feedRun(t, b, f)
	transfers(t, b, b.c, 1)
	// The sequencer polls every 5 ms: the event is published by a later
	// round, or never (the test's time runs out).
	evs, _ := readUntil(t, f, "", 1)
	require.Len(t, evs, 1)
	st, err := f.Status(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Unpublished, "tags left unpublished: %+v", st)
}

// TestFeedReviewSlowHandler: a handler slower than the group's lease,
// with a second subscriber of the group waiting: each takes the group
// over while the other's handler runs, so two handlers run at once and
// neither position save lands: the group makes no progress.
func TestFeedReviewSlowHandler(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("slow", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	transfers(t, b, b.c, 3)
	readUntil(t, f, "", 3)
	sub := b.c.Feed("slow", twopc.WithFeedLease(300*time.Millisecond), twopc.WithFeedPoll(20*time.Millisecond), twopc.WithFeedSlice(1))
	var running, overlap, calls atomic.Int32
	h := func(ctx context.Context, evs []twopc.Event) error {
		calls.Add(1)
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}
	run, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- sub.Subscribe(run, "g", h) }()
	}
	<-done
	<-done
	var g struct {
		Pos string `bson:"pos"`
	}
	require.NoError(t, b.db.Collection("transactions_feeds").FindOne(ctx, bson.D{{Key: "_id", Value: "group:slow:g"}}).Decode(&g))
	t.Logf("handler calls %d, overlapping %d, saved position %q", calls.Load(), overlap.Load(), g.Pos)
	assert.Zero(t, overlap.Load(), "two handlers of one group at once")
	assert.NotEmpty(t, g.Pos, "no position saved in 5s of handling")
}
