package twopc_test

// A feed's membership, decided by no host clock (issue 50, finding 6):
// a transaction is the feed's when the move that gave it its last event
// (held, applied, canceled) was stamped by the server at or after the
// feed's since, itself the server's clock; history decides what a feed
// numbers by the same rule.

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// steppedBack is a coordinator whose host clock falls 30 s behind once it
// has read the server's (its mark frozen, so that it is not read again):
// the transfers it makes next are stamped (created) 30 s early.
func steppedBack(t *testing.T, b *bank, opts ...twopc.Option) *twopc.Coordinator {
	t.Helper()
	var shift atomic.Int64
	c := b.coordinator(append([]twopc.Option{twopc.WithApplication("behind"), twopc.WithSyncSettle(), twopc.WithFrozenMark(),
		twopc.WithHostClock(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) })}, opts...)...)
	require.NoError(t, twopc.SyncClock(testCtx(t), c))
	shift.Store(int64(-30 * time.Second))
	return c
}

// beginFeed makes feed name begin (a sequencer that stops at once, its
// lease given up clean) and returns its since, once the server's clock
// is past it.
func beginFeed(t *testing.T, b *bank, name string) time.Time {
	t.Helper()
	ctx := testCtx(t)
	stopped := errors.New("stopped at once")
	require.ErrorIs(t, b.c.Feed(name, twopc.WithFeedHook(func(int) error { return stopped })).Run(ctx), stopped)
	return waitFeed(t, ctx, b.db, name)
}

// TestFeedTrustMembershipByServerClock: a coordinator whose clock stepped
// back 30 s commits a transfer after the feed began: it must be in the
// feed. Before, membership was created ≥ since, created stamped by the
// coordinator's clock: the transfer, stamped before the feed's start, was
// never in it, and Status showed nothing waiting.
func TestFeedTrustMembershipByServerClock(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	behind := steppedBack(t, b)
	since := beginFeed(t, b, "member")

	late, err := behind.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	require.True(t, late.Created.Before(since), "stamped before the feed began: %v, since %v", late.Created, since)
	st, err := b.c.Feed("member").Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Waiting, "the transfer waits to be numbered (both its places)")

	f := b.c.Feed("member", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	marker := transfers(t, b, b.c, 1)[0]
	var got []bson.ObjectID
	var at twopc.Position
	for e, err := range f.All(ctx, "") {
		require.NoError(t, err)
		got = append(got, e.Txn.ID)
		if e.Txn.ID == marker {
			at = e.Pos
			break
		}
	}
	rest, _, err := f.Read(ctx, at, 10) // the rest of the marker's batch, if any
	require.NoError(t, err)
	for _, e := range rest {
		got = append(got, e.Txn.ID)
	}
	assert.ElementsMatch(t, []bson.ObjectID{late.ID, marker}, got, "the transfer committed after the feed began, and the next")
}

// TestFeedTrustHistoryMembershipAgrees: history decides what a feed
// numbers by the feed's own rule. A transfer stamped before the feed's
// since by a coordinator whose clock stepped back, committed after the
// feed began, is kept by history until the feed (down meanwhile) has
// published it, then delivered. Judged by created, history would take it
// as none of the feed's and remove it before the feed numbered it.
func TestFeedTrustHistoryMembershipAgrees(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	behind := steppedBack(t, b, twopc.WithHistory(time.Millisecond, nil))
	beginFeed(t, b, "hmember")

	late, err := behind.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	remover := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("remover"), twopc.WithHistory(time.Millisecond, nil),
		twopc.WithCheckpoints(1000, 0)))
	inLog := func() int64 {
		n, err := b.db.Collection("transactions").CountDocuments(ctx, bson.D{{Key: "_id", Value: late.ID}})
		require.NoError(t, err)
		return n
	}
	b.ageFinal()
	_, err = remover.RecoverOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, inLog(), "history took a transfer the feed numbers before the feed published it")

	f := b.c.Feed("hmember", twopc.WithFeedPoll(5*time.Millisecond))
	stop := feedRun(t, b, f)
	evs, _ := readUntil(t, f, "", 1)
	assert.Equal(t, late.ID, evs[0].Txn.ID)
	stop()
	b.ageFinal()
	_, err = remover.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Zero(t, inLog(), "published, then removed")
}
