package twopc_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
)

// simFeedName is the simulations' feed.
const simFeedName = "sim"

// startSimFeed starts two sequencers of the simulation's feed, in
// applications of their own on clients that meet the simulation's faults,
// racing for its lease (as long as the applications' StaleAfter), until
// ctx is done; it returns once the feed exists and the server's clock is
// past its since, so every transaction of the load is the feed's.
func startSimFeed(t *testing.T, ctx context.Context, log *mongo.Database, newApp func(string) *twopc.Coordinator, lease time.Duration) (wait func()) {
	t.Helper()
	done := make(chan struct{}, 2)
	for i := range 2 {
		f := newApp(fmt.Sprintf("feed-%d", i)).Feed(simFeedName, twopc.WithFeedLease(lease), twopc.WithFeedPoll(20*time.Millisecond))
		go func() {
			defer func() { done <- struct{}{} }()
			_ = f.Run(ctx) // faults make rounds fail; it ends with ctx
		}()
	}
	waitFeed(t, ctx, log, simFeedName)
	return func() { <-done; <-done }
}

// checkSimFeed runs the feed's sequencer, with no fault, until nothing
// waits, then reads the whole feed and checks it against the log: every
// event once after dedupe (by Event.ID), and exactly one committed or
// captured event for each transaction that committed (a hold's end by its
// captures is its captures' events), one held event for each hold held,
// one for each end of a hold voided or expired, and none for a
// transaction that did not reach its kind; and each event after its cause
// (a hold's end and its captures after its held event, a refund after its
// transfer's event) when the feed has it.
func checkSimFeed(t *testing.T, c *twopc.Coordinator, log *mongo.Database) (events int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f := c.Feed(simFeedName, twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedLease(time.Second))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- f.Run(runCtx) }()
	for {
		st, err := f.Status(ctx)
		require.NoError(t, err)
		if st.Waiting == 0 && st.Orphaned == 0 && st.Unpublished == 0 {
			break
		}
		require.NoError(t, ctx.Err(), "the sequencer does not catch up: %+v", st)
		runtime.Gosched()
	}
	stop()
	<-ran
	var since struct {
		Since time.Time `bson:"since"`
	}
	require.NoError(t, log.Collection("transactions_feeds").FindOne(ctx, bson.D{{Key: "_id", Value: "feed:" + simFeedName}}).Decode(&since))

	got := map[string]twopc.Event{}
	place := map[string]int{} // an event's place in the feed
	var pos twopc.Position
	for {
		evs, next, err := f.Read(ctx, pos, 1000)
		require.NoError(t, err)
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			_, dup := got[e.ID]
			require.False(t, dup, "event %s read twice from one reader", e.ID)
			got[e.ID] = e
			place[e.ID] = len(place)
		}
		pos = next
	}

	want := map[string]bool{}
	cur, err := log.Collection("transactions").Find(ctx, bson.D{{Key: "eventAt", Value: bson.D{{Key: "$gte", Value: since.Since}}}})
	require.NoError(t, err)
	for cur.Next(ctx) {
		var d struct {
			ID          bson.ObjectID `bson:"_id"`
			State       twopc.State   `bson:"state"`
			Hold        bool          `bson:"hold"`
			HeldAt      time.Time     `bson:"heldAt"`
			CaptureOf   bson.ObjectID `bson:"captureOf"`
			Reason      string        `bson:"reason"`
			Placeholder bool          `bson:"placeholder"`
		}
		require.NoError(t, cur.Decode(&d))
		id := d.ID.Hex()
		if d.Hold && !d.HeldAt.IsZero() {
			want[id+".held"] = true
		}
		switch {
		case d.State.Committed() && d.Hold:
		case d.State.Committed() && !d.CaptureOf.IsZero():
			want[id+".captured"] = true
		case d.State.Committed():
			want[id+".committed"] = true
		case d.State != twopc.StateCanceled || d.Placeholder || d.Reason == "late_copy":
		case d.Hold && d.Reason == "voided":
			want[id+".voided"] = true
		case d.Hold && d.Reason == "expired":
			want[id+".expired"] = true
		default:
			want[id+".canceled"] = true
		}
	}
	require.NoError(t, cur.Err())
	for id := range want {
		require.Contains(t, got, id, "an event the feed did not deliver")
	}
	for id, e := range got {
		require.True(t, want[id], "an event %s (%s) of no transaction that reached it", id, e.Kind)
		var causes []string
		switch {
		case e.Kind == twopc.EventCaptured:
			causes = []string{e.Txn.CaptureOf.Hex() + ".held"}
		case !e.Txn.RefundOf.IsZero():
			causes = []string{e.Txn.RefundOf.Hex() + ".committed", e.Txn.RefundOf.Hex() + ".captured"}
		case e.Kind == twopc.EventVoided || e.Kind == twopc.EventExpired || (e.Kind == twopc.EventCanceled && e.Txn.Hold):
			causes = []string{e.Txn.ID.Hex() + ".held"}
		}
		for _, c := range causes {
			if at, ok := place[c]; ok {
				require.Less(t, at, place[id], "event %s before its cause %s", id, c)
			}
		}
	}
	return len(got)
}
