package twopc_test

// The change feed's findings of the trust review, each a deterministic
// repro written before its fix.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
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
	const lease = 500 * time.Millisecond
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
				// The next update is the publication: it applies, its
				// reply is lost.
				return b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.DropAfterForward, Count: 1})
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
