package twopc_test

// The change feed's causal order across batches (issue 50, item 3): a
// hold's held event before its captures' captured, a transfer's committed
// before its refunds', whatever the scans' limits and the takeovers; each
// test a deterministic repro written before the fix.

import (
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
