package twopc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// unreachable returns a database on an address where nothing listens,
// held so for the test (mongotest.DeadAddr: a server another test starts
// meanwhile cannot take it), reached by a client at the driver's defaults
// (a server selection timeout of 30 s, retryable writes on).
func unreachable(t *testing.T) *mongo.Database {
	t.Helper()
	return mongotest.ConnectURI(t, "mongodb://"+mongotest.DeadAddr(t)+"/").Database("nowhere")
}

// boundSlack is how much longer than its bound a call may take in these
// tests: the driver's own server selection timeout (30 s), which the
// library's retries multiplied, is far above it.
const boundSlack = 5 * time.Second

// moneyCalls are the calls a bound applies to, each made once on c.
var moneyCalls = map[string]func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error){
	"Transfer": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return c.Transfer(ctx, "A", "B", 10)
	},
	"Transfer with a key": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k1"))
	},
	"TransferLegs": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 10}})
	},
	"TransferBatch": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		res, err := c.TransferBatch(ctx, []twopc.TransferRequest{{Source: "A", Destination: "B", Value: 10}})
		if err != nil {
			return nil, err
		}
		return res[0].Txn, res[0].Err
	},
	"Hold": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return c.Hold(ctx, "A", "B", 10)
	},
	"Capture": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return c.Capture(ctx, bson.NewObjectID(), 10)
	},
	"Void": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return c.Void(ctx, bson.NewObjectID())
	},
	"Reverse": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return c.Reverse(ctx, bson.NewObjectID())
	},
	"Cancel": func(ctx context.Context, c *twopc.Coordinator) (*twopc.Txn, error) {
		return twopc.NewCanceler(c).Cancel(ctx, bson.NewObjectID())
	},
}

// TestMoneyCallsFailWithinTheCallBound: with no server answering and the
// driver at its defaults, every money call of a coordinator made
// WithCallTimeout fails within that bound, though the caller's context
// has a later deadline, with an error that wraps what happened (the
// server selection that found no server, context.DeadlineExceeded) and
// names the bound. Before, each took the driver's server selection
// timeout times the library's retries: 90 s.
func TestMoneyCallsFailWithinTheCallBound(t *testing.T) {
	ownServers(t)
	const bound = 300 * time.Millisecond
	c, err := twopc.NewCoordinator(unreachable(t), twopc.WithCallTimeout(bound))
	require.NoError(t, err)
	for name, call := range moneyCalls {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			txn, err := call(testCtx(t), c) // a deadline minutes away
			elapsed := time.Since(start)
			require.Error(t, err)
			assert.Less(t, elapsed, bound+boundSlack, "failed within the bound: %v", err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), "server selection", "what happened")
			assert.Contains(t, err.Error(), "WithCallTimeout", "the bound that ended it")
			t.Logf("after %v: %v", elapsed.Round(time.Millisecond), err)
			assert.True(t, strings.HasPrefix(err.Error(), "twopc: "), err.Error())
			assert.Equal(t, 1, strings.Count(err.Error(), "twopc:"), err.Error())
			assert.Nil(t, txn, "nothing was sent")
		})
	}
	t.Run("the caller's earlier deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), bound/3)
		defer cancel()
		start := time.Now()
		_, err := c.Transfer(ctx, "A", "B", 10)
		assert.Less(t, time.Since(start), bound/3+boundSlack)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotContains(t, err.Error(), "WithCallTimeout", "the caller's deadline ended it, not the bound")
	})
}

// TestMoneyCallDefaultBound: without WithCallTimeout, a Transfer with no
// server answering fails within DefaultCallTimeout (a caller's deadline
// minutes away does not lift it). Before, it took 90 s.
func TestMoneyCallDefaultBound(t *testing.T) {
	ownServers(t)
	c, err := twopc.NewCoordinator(unreachable(t))
	require.NoError(t, err)
	start := time.Now()
	txn, err := c.Transfer(testCtx(t), "A", "B", 10)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Less(t, elapsed, twopc.DefaultCallTimeout+boundSlack, "failed within the default bound: %v", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Nil(t, txn)
}

// TestTransferBatchBoundGrows: a TransferBatch's bound is WithCallTimeout's
// and 50 ms for each transfer of the batch: with no server answering, a
// batch of 20 fails when that bound passes, not before, with an error
// that names it.
func TestTransferBatchBoundGrows(t *testing.T) {
	ownServers(t)
	const bound, n = 300 * time.Millisecond, 20
	grown := bound + n*50*time.Millisecond
	c, err := twopc.NewCoordinator(unreachable(t), twopc.WithCallTimeout(bound))
	require.NoError(t, err)
	reqs := make([]twopc.TransferRequest, n)
	for i := range reqs {
		reqs[i] = twopc.TransferRequest{Source: "A", Destination: "B", Value: int64(i + 1)}
	}
	start := time.Now()
	res, err := c.TransferBatch(testCtx(t), reqs)
	elapsed := time.Since(start)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, elapsed, grown, "the bound grew with the batch")
	assert.Less(t, elapsed, grown+boundSlack)
	for _, r := range res {
		assert.ErrorIs(t, r.Err, context.DeadlineExceeded)
		assert.Contains(t, r.Err.Error(), "the batch's bound of "+grown.String()+" (WithCallTimeout and 50ms a transfer)")
	}
	t.Logf("after %v: %v", elapsed.Round(time.Millisecond), res[0].Err)
}

// delayReplyAt returns a step hook that, the first time step is reached,
// has the server's front hold back the reply of the next command named
// command (the coordinator must be made WithFrozenMark, so that this is
// the step's own), and sends the transaction's id on ids.
func delayReplyAt(t *testing.T, b *bank, step twopc.Step, command string, ids chan<- bson.ObjectID) func(context.Context, twopc.Step, *twopc.Txn) error {
	armed := true
	return func(ctx context.Context, s twopc.Step, tx *twopc.Txn) error {
		if s != step || !armed {
			return nil
		}
		armed = false
		assert.NoError(t, b.server.Faults.Add(ctx, mongotest.Fault{Command: command, Kind: mongotest.Delay, Count: 1, Delay: time.Minute}))
		ids <- tx.ID
		return nil
	}
}

// TestContextEndsAfterTheCommit: the caller's context ends after the
// server applied the call's commit (of a transfer, of a hold, of a
// capture) and before its reply came (the front holds it back): the call
// reads the transaction back on a context of its own and reports what the
// log holds, the commit, with no error; under WithSyncSettle, the commit
// with an error that says it committed and settles in the background.
// Before, it returned the record it held, pending (held, for the
// capture), with the context's error.
func TestContextEndsAfterTheCommit(t *testing.T) {
	cases := map[string]struct {
		step    twopc.Step
		command string      // the write's
		from    twopc.State // where the write finds the transaction
		want    twopc.State // what it moves the transaction to
		call    func(ctx context.Context, c *twopc.Coordinator, hold *twopc.Txn) (*twopc.Txn, error)
		sync    bool // WithSyncSettle
	}{
		"transfer": {twopc.StepCommit, "update", twopc.StatePending, twopc.StateApplied, func(ctx context.Context, c *twopc.Coordinator, _ *twopc.Txn) (*twopc.Txn, error) {
			return c.Transfer(ctx, "A", "B", 30)
		}, false},
		"transfer settled in the call": {twopc.StepCommit, "update", twopc.StatePending, twopc.StateApplied, func(ctx context.Context, c *twopc.Coordinator, _ *twopc.Txn) (*twopc.Txn, error) {
			return c.Transfer(ctx, "A", "B", 30)
		}, true},
		"hold": {twopc.StepCommit, "findAndModify", twopc.StatePending, twopc.StateHeld, func(ctx context.Context, c *twopc.Coordinator, _ *twopc.Txn) (*twopc.Txn, error) {
			return c.Hold(ctx, "A", "B", 30)
		}, false},
		// A capture is a transfer of its own: its commit is.
		"capture": {twopc.StepCommit, "update", twopc.StatePending, twopc.StateApplied, func(ctx context.Context, c *twopc.Coordinator, hold *twopc.Txn) (*twopc.Txn, error) {
			return c.Capture(ctx, hold.ID, 20)
		}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			bg := testCtx(t)
			ids := make(chan bson.ObjectID, 1)
			var hook func(context.Context, twopc.Step, *twopc.Txn) error
			opts := []twopc.Option{twopc.WithFrozenMark(), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, tx *twopc.Txn) error {
				if hook == nil {
					return nil
				}
				return hook(ctx, s, tx)
			})}
			if tc.sync {
				opts = append(opts, twopc.WithSyncSettle())
			}
			b := newFaultBank(t, opts...)
			b.open(map[string]int64{"A": 100, "B": 0})
			var hold *twopc.Txn
			if name == "capture" {
				var err error
				hold, err = b.c.Hold(bg, "A", "B", 30)
				require.NoError(t, err)
			}
			hook = delayReplyAt(t, b, tc.step, tc.command, ids)

			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			res := make(chan transferResult, 1)
			go func() {
				txn, err := tc.call(ctx, b.c, hold)
				res <- transferResult{txn, err}
			}()
			id := <-ids
			for b.txn(id).State == tc.from {
				// until the server has applied the write whose reply the
				// front holds back
			}
			require.Equal(t, tc.want, b.txn(id).State)
			cancel()
			r := <-res
			if tc.sync {
				require.ErrorIs(t, r.err, context.Canceled)
				assert.Contains(t, r.err.Error(), "committed", "it says the money moved")
			} else {
				require.NoError(t, r.err, "the log holds the commit")
			}
			require.NotNil(t, r.txn)
			assert.Equal(t, id, r.txn.ID)
			logged := b.txn(id).State
			assert.True(t, r.txn.State == logged || r.txn.State == twopc.StateApplied && logged == twopc.StateDone,
				"answered %s, the log holds %s", r.txn.State, logged)
			assert.Equal(t, tc.want, r.txn.State)

			require.NoError(t, b.c.Settle(bg))
			if name != "hold" {
				b.checkSettled(map[string]int64{"A": 100, "B": 0})
				wantB := map[string]int64{"transfer": 30, "transfer settled in the call": 30, "capture": 20}[name]
				assert.Equal(t, wantB, b.balance("B"), "moved once")
			}
		})
	}
}

// TestContextEndsWhileItsGroupCommitIsInFlight: a transfer whose commit
// went into a group write that the stage sends on its own context, and
// whose caller's context ends while that write is in flight, waits a
// moment for the write's outcome and reports it: committed, no error.
// Before, it returned at once, pending, with the context's error, while
// the write committed it.
func TestContextEndsWhileItsGroupCommitIsInFlight(t *testing.T) {
	bg := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	g := newCommitGate()
	c, idx, waiting := b.gatedCoordinator(g, nil)

	g.holdNext("alone")
	r1 := transferAsync(bg, c, 1)
	g.waitHeld(t, "alone")
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	r2 := transferAsync(ctx, c, 2)
	waitFor(t, waiting, "the second commit waits for the next write")
	g.holdNext("alone") // the next write: the second commit's, alone
	g.release <- struct{}{}
	g.waitHeld(t, "alone") // the second commit's write, taken, in flight
	cancel()
	g.release <- struct{}{}

	first := result(t, r1, "first")
	require.NoError(t, first.err)
	second := result(t, r2, "second")
	require.NoError(t, second.err, "its commit was written")
	assert.Equal(t, twopc.StateApplied, second.txn.State)
	assert.True(t, b.txn(idx.id(2)).State.Committed(), "the log holds it committed")
	require.NoError(t, c.Settle(bg))
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	assert.Equal(t, int64(3), b.balance("B"))
}

// TestAccountWritesFailWithinTheCallBound: OpenAccount and SetLimits,
// the library's writes that are not money calls, are bounded as money
// calls are: with no server answering they fail within WithCallTimeout,
// not after the driver's server selection timeout.
func TestAccountWritesFailWithinTheCallBound(t *testing.T) {
	ownServers(t)
	const bound = 300 * time.Millisecond
	c, err := twopc.NewCoordinator(unreachable(t), twopc.WithCallTimeout(bound))
	require.NoError(t, err)
	for name, call := range map[string]func(context.Context) error{
		"OpenAccount": func(ctx context.Context) error { return c.OpenAccount(ctx, "A", 10) },
		"SetLimits":   func(ctx context.Context) error { return c.SetLimits(ctx, "", "A", twopc.AccountFloor(-10)) },
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := call(testCtx(t))
			elapsed := time.Since(start)
			require.Error(t, err)
			assert.Less(t, elapsed, bound+boundSlack, "failed within the bound: %v", err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), "WithCallTimeout", "the bound that ended it")
		})
	}
}
