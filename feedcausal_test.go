package twopc_test

// The change feed's causal order across batches (issue 50, item 3): a
// hold's held event before its captures' captured, a transfer's committed
// before its refunds', whatever the scans' limits and the takeovers; each
// test a deterministic repro written before the fix.

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

// eventIndex returns the index in evs of the event of transaction id of
// kind, failing the test if there is none.
func eventIndex(t *testing.T, evs []twopc.Event, id bson.ObjectID, kind twopc.EventKind) int {
	t.Helper()
	for i, e := range evs {
		if e.Txn.ID == id && e.Kind == kind {
			return i
		}
	}
	t.Fatalf("no %s event of %s in %v", kind, id.Hex(), ids(evs))
	return -1
}

// TestFeedTrustCaptureAfterItsHold: two holds, H1 and H2, are held and H2
// captured in part while the feed's sequencer is down; it then runs with
// WithFeedBatch(1), so its first round's search for held events finds H1
// alone, and its search for final ones the capture. H2's held event must
// come before its capture's. Before, the first round numbered H1's held
// event and the capture into batch 1, H2's held event into batch 2: a
// consumer saw a capture of a hold it had never seen held.
func TestFeedTrustCaptureAfterItsHold(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	beginFeed(t, b, "hold")
	h1, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	h2, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	c2, err := b.c.Capture(ctx, h2.ID, 40, twopc.WithFinalCapture(false))
	require.NoError(t, err)

	f := b.c.Feed("hold", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedBatch(1))
	feedRun(t, b, f)
	evs, _ := readUntil(t, f, "", 3)
	eventIndex(t, evs, h1.ID, twopc.EventHeld)
	held, captured := eventIndex(t, evs, h2.ID, twopc.EventHeld), eventIndex(t, evs, c2.ID, twopc.EventCaptured)
	assert.Less(t, held, captured, "H2's held event before its capture's: %v", ids(evs))
}

// TestFeedTrustRefundAfterItsTransfer: sequencer A scans transfer T and
// stalls past its lease before tagging it; refund R of T is made;
// sequencer B takes over and scans T and R, and stalls before its tags;
// A's tag write of T lands then (a late write of a taken-over epoch: an
// orphan) and A gives its epoch up; B's tag of T, guarded by T's tag
// being null, matches nothing, its tag of R lands, and B publishes. T's
// committed event must come before R's. Before, B published R alone in
// batch 1 and T, its orphan numbered again, in batch 2.
func TestFeedTrustRefundAfterItsTransfer(t *testing.T) {
	const lease = 300 * time.Millisecond
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	beginFeed(t, b, "refund")
	tr := transfers(t, b, b.c, 1)[0]

	scanA, scanB := newGate(t), newGate(t)
	gaveUp := errors.New("A gave its epoch up")
	fA := b.c.Feed("refund", twopc.WithFeedLease(lease), twopc.WithFeedPoll(5*time.Millisecond),
		twopc.WithFeedHook(func(step int) error {
			switch step {
			case twopc.FeedScanned:
				scanA.stop()
			case twopc.FeedLost:
				return gaveUp
			}
			return nil
		}))
	doneA := make(chan error, 1)
	go func() { doneA <- fA.Run(ctx) }()
	scanA.reached(t, "A's scan of T")
	r, err := b.c.Refund(ctx, tr, 1)
	require.NoError(t, err)

	other := b.coordinator(twopc.WithApplication("other"), twopc.WithSyncSettle())
	fB := other.Feed("refund", twopc.WithFeedLease(lease), twopc.WithFeedPoll(5*time.Millisecond),
		twopc.WithFeedHook(func(step int) error {
			if step == twopc.FeedScanned {
				scanB.stop()
			}
			return nil
		}))
	feedRun(t, b, fB) // takes over once A's lease lapses
	scanB.reached(t, "B's scan of T and R")
	close(scanA.open) // A tags T, late, and gives its epoch up
	require.ErrorIs(t, <-doneA, gaveUp)
	close(scanB.open)

	evs, _ := readUntil(t, fB, "", 2)
	assert.Equal(t, []string{tr.Hex(), r.ID.Hex()}, []string{evs[0].Txn.ID.Hex(), evs[1].Txn.ID.Hex()},
		"T's committed event before its refund's")
}

// readWithin reads f's events from the start until it has want of them or
// d passes, and returns those it read.
func readWithin(t *testing.T, f *twopc.Feed, want int, d time.Duration) []twopc.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), d)
	defer cancel()
	var out []twopc.Event
	for e, err := range f.All(ctx, "") {
		if err != nil {
			break
		}
		out = append(out, e)
		if len(out) == want {
			break
		}
	}
	return out
}

// TestFeedTrustRefundOfHeldHold: a hold of 100 is captured 40 and left
// held; two refunds of 5 are made of it (a hold's order is refundable while
// held), then transfer T. With WithFeedBatch(2) every event is published,
// each refund after its hold's held event and the capture it takes from.
// Before, a refund's cause was its hold's final event, which a hold still
// held does not have: each round read the two refunds first (the oldest),
// held both back, and T was never published while the hold stayed held
// (review 3).
func TestFeedTrustRefundOfHeldHold(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	beginFeed(t, b, "hr")
	h, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	c1, err := b.c.Capture(ctx, h.ID, 40, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	r1, err := b.c.Refund(ctx, h.ID, 5)
	require.NoError(t, err)
	r2, err := b.c.Refund(ctx, h.ID, 5)
	require.NoError(t, err)
	tr := transfers(t, b, b.c, 1)[0]

	f := b.c.Feed("hr", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedBatch(2))
	feedRun(t, b, f)
	evs := readWithin(t, f, 5, 5*time.Second)
	require.Equal(t, 5, len(evs), "held, captured, two refunds and T, the hold still held: %v", ids(evs))
	held, captured := eventIndex(t, evs, h.ID, twopc.EventHeld), eventIndex(t, evs, c1.ID, twopc.EventCaptured)
	assert.Less(t, held, captured)
	for _, r := range []*twopc.Txn{r1, r2} {
		assert.Less(t, captured, eventIndex(t, evs, r.ID, twopc.EventCommitted), "a refund after the capture it takes from")
	}
	eventIndex(t, evs, tr, twopc.EventCommitted)
	assert.Equal(t, twopc.StateHeld, b.txn(h.ID).State)
}

// TestFeedTrustWaitingFillsNoRound: a hold is captured and its void
// stopped in canceling (its coordinator crashed before canceled), so the
// capture's cause, the hold's held event, is not settled and the capture
// waits; transfer T is made after. With WithFeedBatch(1), each round's
// search reads the oldest event first: the capture. T must be published
// all the same: what a round holds back is read by its _id after, never
// by the bounded search, which then reaches T. Before, every round read
// the capture alone, held it back, and never reached T.
func TestFeedTrustWaitingFillsNoRound(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	beginFeed(t, b, "wait")
	h, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	c1, err := b.c.Capture(ctx, h.ID, 40, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	_, err = b.coordinator(twopc.WithStepHook(crashAt(twopc.StepCanceled))).Void(ctx, h.ID)
	require.Error(t, err)
	require.Equal(t, twopc.StateCanceling, b.txn(h.ID).State, "the void stopped in canceling")
	tr := transfers(t, b, b.c, 1)[0]

	f := b.c.Feed("wait", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedBatch(1))
	feedRun(t, b, f)
	evs := readWithin(t, f, 1, 5*time.Second)
	require.Equal(t, 1, len(evs), "T published while the capture waits for its hold's held event")
	assert.Equal(t, tr, evs[0].Txn.ID)
	assert.Equal(t, twopc.EventCommitted, evs[0].Kind)
	assert.NotEqual(t, c1.ID, evs[0].Txn.ID)
}
