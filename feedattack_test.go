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
