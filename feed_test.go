package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
	"github.com/twopc/twopc/internal/schema"
)

// feedRun starts f's sequencer and returns once the feed's document
// exists and the server's clock is past its since (so that every
// transaction the test makes next is the feed's); the sequencer stops
// when the test ends, and its error, other than the test's end, fails
// the test.
func feedRun(t *testing.T, b *bank, f *twopc.Feed) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	waitFeed(t, testCtx(t), b.db, f.Name())
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, twopc.ErrFeedDeleted) {
			t.Errorf("feed %s: Run: %v", f.Name(), err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFeed returns once feed name's document exists in db and the
// server's clock reads later than its since, so that every transaction
// made next is the feed's; it returns the since.
func waitFeed(tb testing.TB, ctx context.Context, db *mongo.Database, name string) time.Time {
	tb.Helper()
	var d struct {
		Since time.Time `bson:"since"`
	}
	for {
		err := db.Collection("transactions_feeds").FindOne(ctx, bson.D{{Key: "_id", Value: "feed:" + name}}).Decode(&d)
		if err == nil {
			break
		}
		require.NoError(tb, ctx.Err())
		runtime.Gosched()
	}
	for {
		now, err := schema.ServerNow(ctx, db)
		require.NoError(tb, err)
		if now.After(d.Since) {
			return d.Since
		}
	}
}

// readUntil reads f from after until it has want events or the test's
// time runs out, and returns them and the position after them.
func readUntil(t *testing.T, f *twopc.Feed, after twopc.Position, want int) ([]twopc.Event, twopc.Position) {
	t.Helper()
	ctx := testCtx(t)
	var out []twopc.Event
	for e, err := range f.All(ctx, after) {
		require.NoError(t, err)
		out = append(out, e)
		if len(out) == want {
			return out, e.Pos
		}
	}
	t.Fatalf("feed %s: %d events, want %d", f.Name(), len(out), want)
	return nil, ""
}

// TestFeedEveryKind numbers every kind of event: a transfer committed,
// one canceled, a hold held, captured twice and expired (four events,
// four IDs), a hold voided; Cancel's placeholder is not an event. Each
// event comes once, in batch order, with its kind, time and transaction.
func TestFeedEveryKind(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0, "poor": 5})
	f := b.c.Feed("audit", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)

	tr, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "poor", "B", 50)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	h, err := b.c.Hold(ctx, "A", "B", 100, twopc.WithExpiry(time.Hour))
	require.NoError(t, err)
	c1, err := b.c.Capture(ctx, h.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	c2, err := b.c.Capture(ctx, h.ID, 20, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	b.backdate(h.ID, 2*time.Hour)
	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"))).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Expired, "%+v", rep)
	v, err := b.c.Hold(ctx, "A", "B", 5)
	require.NoError(t, err)
	_, err = b.c.Void(ctx, v.ID)
	require.NoError(t, err)
	_, err = twopc.NewCanceler(b.c).Cancel(ctx, bson.NewObjectID())
	require.NoError(t, err)

	evs, _ := readUntil(t, f, "", 8)
	kinds := map[string]twopc.EventKind{}
	seen := map[string]bool{}
	for _, e := range evs {
		assert.False(t, seen[e.ID], "event %s twice", e.ID)
		seen[e.ID] = true
		kinds[e.Txn.ID.Hex()+" "+string(e.Kind)] = e.Kind
		assert.False(t, e.At.IsZero(), "event %s has no time", e.ID)
	}
	for _, want := range []string{
		tr.ID.Hex() + " committed", h.ID.Hex() + " held", c1.ID.Hex() + " captured", c2.ID.Hex() + " captured",
		h.ID.Hex() + " expired", v.ID.Hex() + " held", v.ID.Hex() + " voided",
	} {
		assert.Contains(t, kinds, want)
	}
	canceled := 0
	for k := range kinds {
		if kinds[k] == twopc.EventCanceled {
			canceled++
		}
	}
	assert.Equal(t, 1, canceled, "the canceled transfer, and not Cancel's placeholder: %v", kinds)
	// Nothing more: the placeholder is not an event.
	more, _, err := f.Read(ctx, evs[len(evs)-1].Pos, 10)
	require.NoError(t, err)
	assert.Empty(t, more)
	// A reader from the start reads the same events, in the same order.
	again, _, err := f.Read(ctx, "", 100)
	require.NoError(t, err)
	require.Len(t, again, len(evs))
	for i := range evs {
		assert.Equal(t, evs[i].ID, again[i].ID)
		assert.Equal(t, evs[i].Pos, again[i].Pos)
	}
	st, err := f.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, "audit", st.Name)
	assert.GreaterOrEqual(t, st.Published, int64(1))
	assert.Zero(t, st.Waiting, "nothing waits once every event was read")
	assert.NotEmpty(t, st.Holder)
	assert.True(t, st.LeaseEnds.After(st.Since))
	names, err := b.c.Feeds(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"audit"}, names)
	for i, e := range evs {
		ids := []string{}
		for _, x := range evs[i:] {
			ids = append(ids, x.ID)
		}
		rest, _, err := f.Read(ctx, prevPos(evs, i), 100)
		require.NoError(t, err)
		got := []string{}
		for _, x := range rest {
			got = append(got, x.ID)
		}
		assert.Equal(t, ids, got, "resumed before event %d (%s)", i, e.ID)
	}
}

// prevPos is the position before evs[i].
func prevPos(evs []twopc.Event, i int) twopc.Position {
	if i == 0 {
		return ""
	}
	return evs[i-1].Pos
}

// TestFeedLateVisibleEvent: a commit that becomes visible after an event
// was delivered, with a commit time older than that event's (a write
// delayed on its way, or another shard's clock), is delivered, at a later
// position: the feed's position is its numbering, never a time.
func TestFeedLateVisibleEvent(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	f := b.c.Feed("late", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	first, err := b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	evs, pos := readUntil(t, f, "", 1)
	require.Equal(t, first.ID, evs[0].Txn.ID)

	// A committed transaction arrives now, stamped a second before the
	// event already delivered.
	doc := bson.D{}
	raw, err := b.db.Collection("transactions").FindOne(ctx, bson.D{{Key: "_id", Value: first.ID}}).Raw()
	require.NoError(t, err)
	require.NoError(t, bson.Unmarshal(raw, &doc))
	lateID := bson.NewObjectID()
	for i := range doc {
		switch doc[i].Key {
		case "_id":
			doc[i].Value = lateID
		case "committedAt":
			doc[i].Value = evs[0].At.Add(-time.Second)
		case "fh_late", "fx_late":
			doc[i].Key = "ignored_" + doc[i].Key
		}
	}
	_, err = b.db.Collection("transactions").InsertOne(ctx, doc)
	require.NoError(t, err)

	next, _ := readUntil(t, f, pos, 1)
	assert.Equal(t, lateID, next[0].Txn.ID)
	assert.True(t, next[0].At.Before(evs[0].At), "the late event's time is older: %v, %v", next[0].At, evs[0].At)
	assert.NotEqual(t, evs[0].Pos, next[0].Pos)
	all, _, err := f.Read(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, []string{evs[0].ID, next[0].ID}, []string{all[0].ID, all[1].ID}, "delivered after, at a later position")
}

// TestFeedBadInput: names, positions and limits a feed refuses, with
// nothing written.
func TestFeedBadInput(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	for _, name := range []string{"", "Upper", "with-dash", "a.b", string(make([]byte, 33))} {
		f := b.c.Feed(name)
		require.ErrorIs(t, f.Run(ctx), twopc.ErrInvalidFeed, "name %q", name)
		_, _, err := f.Read(ctx, "", 1)
		require.ErrorIs(t, err, twopc.ErrInvalidFeed)
		require.ErrorIs(t, f.Delete(ctx), twopc.ErrInvalidFeed)
	}
	f := b.c.Feed("ok")
	for _, pos := range []twopc.Position{"x", "1", "0.0", "1.-1", "-1.0"} {
		_, _, err := f.Read(ctx, pos, 1)
		require.ErrorIs(t, err, twopc.ErrInvalidFeed, "position %q", pos)
	}
	_, _, err := f.Read(ctx, "", 0)
	require.ErrorIs(t, err, twopc.ErrInvalidFeed)
	require.ErrorIs(t, f.Subscribe(ctx, "Bad Group", func(context.Context, []twopc.Event) error { return nil }), twopc.ErrInvalidFeed)
	n, err := b.db.Collection("transactions_feeds").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Zero(t, n, "a refused call wrote")
	// A feed never run has nothing yet.
	evs, pos, err := f.Read(ctx, "", 10)
	require.NoError(t, err)
	assert.Empty(t, evs)
	assert.Equal(t, twopc.Position("1.0"), pos)
	// A feed deleted before it ever ran: its name is taken all the same.
	never := b.c.Feed("never")
	require.NoError(t, never.Delete(ctx))
	require.ErrorIs(t, never.Run(ctx), twopc.ErrFeedDeleted)
	_, _, err = never.Read(ctx, "", 1)
	require.ErrorIs(t, err, twopc.ErrFeedDeleted)
	_ = fmt.Sprint()
}

// TestFeedReadsByIndex: every read of the log the feed sends (the
// sequencer's search for events not yet numbered, its read of an epoch's
// orphans, a reader's read of a batch, Status) is explained, and none
// scans the log: each is read by the feed's indexes (a query for a
// missing tag matches null, which an ordinary index holds).
func TestFeedReadsByIndex(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	rec := &findRecorder{}
	recorded := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(rec.monitor())).Database(b.db.Name())
	c, err := twopc.NewCoordinator(recorded, twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	f := c.Feed("ix", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(300*time.Millisecond))
	stop := feedRun(t, b, f)
	_, err = b.c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	h, err := b.c.Hold(ctx, "A", "B", 5)
	require.NoError(t, err)
	_, err = b.c.Void(ctx, h.ID)
	require.NoError(t, err)
	readUntil(t, f, "", 3)
	stop()
	// A sequencer stalls after its tags; a second takes over once its
	// lease lapses, and reads the first's orphans.
	stall := newStallAt(t, twopc.FeedTagged)
	stopStalled := feedRun(t, b, c.Feed("ix", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(300*time.Millisecond), twopc.WithFeedHook(stall.hook)))
	_, err = b.c.Transfer(ctx, "A", "B", 2)
	require.NoError(t, err)
	<-stall.stalled
	stop = feedRun(t, b, c.Feed("ix", twopc.WithFeedPoll(5*time.Millisecond)))
	readUntil(t, f, "", 4)
	close(stall.released)
	stopStalled()
	_, err = b.c.Transfer(ctx, "A", "B", 1)
	require.NoError(t, err)
	readUntil(t, f, "", 5)
	_, err = f.Status(ctx)
	require.NoError(t, err)
	stop()

	kinds := map[string]int{}
	for _, cmd := range rec.recorded() {
		if coll, _ := cmd.Lookup("find").StringValueOK(); coll != "transactions" {
			continue
		}
		filter := cmd.Lookup("filter").String()
		if !strings.Contains(filter, "_ix") {
			continue
		}
		text, scans := planScans(t, b.db, cmd)
		assert.False(t, scans, "a scan of the log for %s:\n%s", cmd, text)
		switch {
		case strings.Contains(filter, `"$in"`) && strings.Contains(filter, "eventAt") && strings.Contains(filter, "null"):
			kinds["search"]++
		case strings.Contains(filter, `"$in"`):
			kinds["orphans"]++
		default:
			kinds["batch"]++
		}
	}
	for _, k := range []string{"search", "orphans", "batch"} {
		assert.Positive(t, kinds[k], "no %s read was seen: %v", k, kinds)
	}
}
