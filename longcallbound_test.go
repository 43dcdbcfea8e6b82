package twopc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// longCalls are the calls bounded per round trip (or, Settle, as a
// whole), not by one bound over the call: each made once on c, which
// runs until its context ends when the server answers.
var longCalls = map[string]func(ctx context.Context, c *twopc.Coordinator) error{
	"EnsureIndexes": func(ctx context.Context, c *twopc.Coordinator) error { return c.EnsureIndexes(ctx) },
	"Feed.Run":      func(ctx context.Context, c *twopc.Coordinator) error { return c.Feed("orders").Run(ctx) },
	"Feed.Subscribe": func(ctx context.Context, c *twopc.Coordinator) error {
		return c.Feed("orders").Subscribe(ctx, "hooks", func(context.Context, []twopc.Event) error { return nil })
	},
	"Feed.Delete": func(ctx context.Context, c *twopc.Coordinator) error { return c.Feed("gone").Delete(ctx) },
	"RecoverOnce": func(ctx context.Context, c *twopc.Coordinator) error {
		_, err := twopc.NewRecoverer(c).RecoverOnce(ctx)
		return err
	},
}

// assertLongCallBounded asserts that err, the error of a long call after
// elapsed, came within bound (and boundSlack) of the server going away,
// and, unless a connection's reset ended it first, says plainly that the
// server could not be reached, wraps context.DeadlineExceeded, names the
// bound and none of the call's steps.
func assertLongCallBounded(t *testing.T, err error, elapsed, bound time.Duration) {
	t.Helper()
	require.Error(t, err)
	t.Logf("after %v: %v", elapsed.Round(time.Millisecond), err)
	assert.Less(t, elapsed, bound+boundSlack, "ended within the bound")
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "twopc: "), msg)
	if mongo.IsNetworkError(err) {
		return // a connection the server's end closed: said at once, as the driver says it
	}
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, msg, "the server could not be reached", "said plainly")
	assert.Regexp(t, `within the (read|call)'?s? bound of `+bound.String(), msg, "the bound that ended it")
	for _, step := range internalSteps {
		if !strings.HasPrefix(msg, "twopc: ensure "+step) { // EnsureIndexes names itself
			assert.NotContains(t, msg, step, "names the call, not its steps")
		}
	}
}

// TestLongCallsFailWithinTheirBounds: with no server answering and the
// driver at its defaults (30 s to select a server, times the library's
// retries), the calls that run long (Feed.Run and Subscribe, a recovery
// pass, EnsureIndexes, Feed.Delete) of a coordinator made
// WithReadTimeout and WithCallTimeout (300 ms) fail within those bounds,
// each round trip under one of them, though the caller's context is
// minutes away; their errors say the server could not be reached.
func TestLongCallsFailWithinTheirBounds(t *testing.T) {
	ownServers(t)
	const bound = 300 * time.Millisecond
	c, err := twopc.NewCoordinator(unreachable(t), twopc.WithReadTimeout(bound), twopc.WithCallTimeout(bound))
	require.NoError(t, err)
	for name, call := range longCalls {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := call(testCtx(t), c)
			assertLongCallBounded(t, err, time.Since(start), bound)
		})
	}
}

// TestLongCallsEndWhenTheServerGoes: a sequencer (Feed.Run) and a
// subscriber (Subscribe) at work on a dev server of the test's own, and a
// Settle waiting for a settle held at its step, all end within their
// bounds (300 ms) of the server stopping (Settle, of its start), their
// errors saying it could not be reached; before, each round trip waited
// the driver's 30 s server selection on each of the library's attempts,
// and Settle as long as the settle.
func TestLongCallsEndWhenTheServerGoes(t *testing.T) {
	ownServers(t)
	const bound = 300 * time.Millisecond
	ctx := testCtx(t)
	server, err := mongotest.StartDevServer(ctx, "", "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = server.Stop() })
	db := mongotest.ConnectURI(t, server.URI).Database("longbound")
	// The transfer's settle waits at its step until the test ends (then
	// fails, left to recovery), so that Settle has one to wait for.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the client's disconnect, which waits for it
	hold := func(ctx context.Context, step twopc.Step, _ *twopc.Txn) error {
		if step == twopc.StepSettle {
			<-release
			return errors.New("the test ended")
		}
		return nil
	}
	c, err := twopc.NewCoordinator(db, twopc.WithReadTimeout(bound), twopc.WithCallTimeout(bound),
		twopc.WithStepHook(hold))
	require.NoError(t, err)
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))

	taken := make(chan struct{})
	var takeOnce sync.Once
	f := c.Feed("orders", twopc.WithFeedPoll(20*time.Millisecond), twopc.WithFeedLease(time.Second),
		twopc.WithFeedHook(func(step int) error {
			if step == twopc.FeedTaken {
				takeOnce.Do(func() { close(taken) })
			}
			return nil
		}))
	handled := make(chan struct{})
	var once sync.Once
	type ended struct {
		name string
		err  error
		at   time.Time
	}
	ends := make(chan ended, 3)
	go func() { err := f.Run(ctx); ends <- ended{"Feed.Run", err, time.Now()} }()
	go func() {
		err := f.Subscribe(ctx, "hooks", func(context.Context, []twopc.Event) error {
			once.Do(func() { close(handled) })
			return nil
		})
		ends <- ended{"Feed.Subscribe", err, time.Now()}
	}()
	select {
	case <-taken: // the feed began: the transfer below is in it
	case <-ctx.Done():
		t.Fatal("the sequencer did not start")
	}
	_, err = c.Transfer(ctx, "A", "B", 10) // its settle waits at the hook
	require.NoError(t, err)
	select {
	case <-handled: // the sequencer and the subscriber are at work
	case <-ctx.Done():
		t.Fatal("no event handed to the subscriber")
	}
	go func() { err := c.Settle(ctx); ends <- ended{"Settle", err, time.Now()} }()

	require.NoError(t, server.Stop())
	gone := time.Now()
	for range 3 {
		select {
		case e := <-ends:
			t.Run(e.name, func(t *testing.T) {
				if e.name == "Settle" {
					// A wait for the settle, which its writes' bound ends
					// later: Settle's own bound ends it first.
					require.Error(t, e.err)
					t.Logf("after %v: %v", e.at.Sub(gone).Round(time.Millisecond), e.err)
					assert.ErrorIs(t, e.err, context.DeadlineExceeded)
					assert.Contains(t, e.err.Error(), "WithCallTimeout")
					assert.Less(t, e.at.Sub(gone), bound+boundSlack)
					return
				}
				assertLongCallBounded(t, e.err, e.at.Sub(gone), bound)
			})
		case <-ctx.Done():
			t.Fatal("a long call did not end with the server gone")
		}
	}
}
