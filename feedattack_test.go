package twopc_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestFeedAttackSlowReadBeforeHandler: a subscriber alone in its group
// whose Read of the events takes longer than nine tenths of its lease
// (every find answered 100 ms late: the feed's document, the batch's two
// scans and the second look, 400 ms or more, against a 300 ms lease)
// hands them to its handler and saves the position after it. Before, the
// handler's watchdog counted from the lease's last stamp, made before the
// Read: it ended the handler's context at once, every time, and the group
// handed the same event again forever, with no other subscriber anywhere.
func TestFeedAttackSlowReadBeforeHandler(t *testing.T) {
	b := newFaultBank(t)
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	f := b.c.Feed("slowread", twopc.WithFeedPoll(5*time.Millisecond))
	feedRun(t, b, f)
	transfers(t, b, b.c, 1)
	readUntil(t, f, "", 1)
	require.NoError(t, b.server.Faults.Add(ctx, mongotest.Fault{Command: "find", Kind: mongotest.Delay, Probability: 1, Delay: 100 * time.Millisecond}))

	sub := b.c.Feed("slowread", twopc.WithFeedLease(300*time.Millisecond), twopc.WithFeedPoll(5*time.Millisecond))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan struct{})
	var once sync.Once
	handed := map[string]bool{} // the handler's alone
	var again string
	done := make(chan error, 1)
	go func() {
		done <- sub.Subscribe(sctx, "g", func(_ context.Context, evs []twopc.Event) error {
			for _, e := range evs {
				if handed[e.ID] {
					again = e.ID
					cancel()
					return nil
				}
				handed[e.ID] = true
			}
			if len(handed) == 2 {
				cancel()
			}
			once.Do(func() { close(first) })
			return nil
		})
	}()
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("the handler was never called")
	}
	transfers(t, b, b.c, 1) // handed next only once the first is acknowledged
	err := <-done
	require.True(t, errors.Is(err, context.Canceled), "Subscribe: %v", err)
	require.Empty(t, again, "an event the handler acknowledged was handed again")
}

// TestFeedAttackTagsStopAtTheFirstUnknown: a round whose first tag
// command the call bound cut (every update answered 5 s late, a 300 ms
// bound) gives its epoch up at once. Before, it sent every other tag
// command of the round all the same, each cut by the bound in turn: Run
// ended a bound per command after the server stopped answering, not one,
// and each command left more tags for the next epoch to number again.
func TestFeedAttackTagsStopAtTheFirstUnknown(t *testing.T) {
	b := newFaultBank(t, twopc.WithWriteBatch(2), twopc.WithCallTimeout(300*time.Millisecond))
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	made := errors.New("made")
	require.ErrorIs(t, b.c.Feed("unknown", twopc.WithFeedHook(func(int) error { return made })).Run(ctx), made)
	waitFeed(t, ctx, b.db, "unknown")
	transfers(t, b, b.c, 6) // six tag statements: three commands
	before, err := b.server.Faults.Stats(ctx)
	require.NoError(t, err)
	var delayed int64 = -1
	stop := errors.New("stop")
	f := b.c.Feed("unknown", twopc.WithFeedPoll(5*time.Millisecond), twopc.WithFeedHook(func(step int) error {
		switch step {
		case twopc.FeedScanned:
			return b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.Delay, Probability: 1, Delay: 5 * time.Second})
		case twopc.FeedLost:
			st, err := b.server.Faults.Stats(ctx)
			if err != nil {
				return err
			}
			delayed = st.Delay - before.Delay
			return stop
		}
		return nil
	}))
	require.ErrorIs(t, f.Run(ctx), stop)
	// Two updates late: the first tag command and the lease's release.
	require.Equal(t, int64(2), delayed, "tag commands sent after the first whose outcome was unknown")
}
