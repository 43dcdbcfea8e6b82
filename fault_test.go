package twopc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// faultAt returns a step hook that, the first time step is reached, has
// the server's front break the very next database operation with kind:
// every coordinator of the test must be made WithFrozenMark, or a
// background reading of its mark may be that operation.
func faultAt(t *testing.T, b *bank, step twopc.Step, kind string) func(context.Context, twopc.Step, *twopc.Txn) error {
	armed := true
	return func(ctx context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s != step || !armed {
			return nil
		}
		armed = false
		return b.server.Faults.Add(ctx, mongotest.Fault{Kind: kind, Count: 1})
	}
}

// TestLostRepliesAtEveryStep loses the reply of each operation of a
// transfer after the server applied it (the ambiguous write), or drops the
// request before it: the library re-reads what happened and the money
// moves exactly once.
func TestLostRepliesAtEveryStep(t *testing.T) {
	steps := append([]twopc.Step{}, transferSteps...)
	for _, kind := range []string{mongotest.DropAfterForward, mongotest.DropBeforeForward} {
		for _, step := range steps {
			t.Run(fmt.Sprintf("%s/%s", kind, step), func(t *testing.T) {
				ctx := testCtx(t)
				var hook func(context.Context, twopc.Step, *twopc.Txn) error
				// Frozen: the operation after the hook is the step's own.
				b := newFaultBank(t, twopc.WithFrozenMark(), twopc.WithSyncSettle(), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, tx *twopc.Txn) error {
					return hook(ctx, s, tx)
				}))
				hook = faultAt(t, b, step, kind)
				b.open(map[string]int64{"A": 100, "B": 0})
				before, err := b.server.Faults.Stats(ctx)
				require.NoError(t, err)
				txn, err := b.c.Transfer(ctx, "A", "B", 60)
				require.NoError(t, err)
				assert.Equal(t, twopc.StateDone, txn.State)
				after, err := b.server.Faults.Stats(ctx)
				require.NoError(t, err)
				injected := after.DropAfterForward + after.DropBeforeForward - before.DropAfterForward - before.DropBeforeForward
				assert.Equal(t, int64(1), injected, "the fault was injected")
				require.Len(t, b.txns(), 1)
				b.checkSettled(map[string]int64{"A": 100, "B": 0})
				assert.Equal(t, int64(40), b.balance("A"))
			})
		}
	}
}

// TestLostRepliesInCancelAndRecovery does the same for the canceler's and
// the recoverer's operations.
func TestLostRepliesInCancelAndRecovery(t *testing.T) {
	for _, step := range []twopc.Step{twopc.StepRead, twopc.StepCancel, twopc.StepFence, twopc.StepUndo, twopc.StepCanceled} {
		t.Run("cancel/"+step.String(), func(t *testing.T) {
			ctx := testCtx(t)
			b := newFaultBank(t, twopc.WithFrozenMark(), twopc.WithStepHook(crashAt(twopc.StepCommit)), twopc.WithApplication("app"))
			b.open(map[string]int64{"A": 100, "B": 0})
			txn, err := b.c.Transfer(ctx, "A", "B", 60)
			require.ErrorIs(t, err, errCrash)
			var hook func(context.Context, twopc.Step, *twopc.Txn) error
			k := twopc.NewCanceler(b.coordinator(twopc.WithFrozenMark(), twopc.WithApplication("app"), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, tx *twopc.Txn) error {
				return hook(ctx, s, tx)
			})))
			hook = faultAt(t, b, step, mongotest.DropAfterForward)
			b.backdate(txn.ID, time.Hour) // another Coordinator's canceler takes over only a stale transaction
			got, err := k.Cancel(ctx, txn.ID)
			require.NoError(t, err)
			assert.Equal(t, twopc.StateCanceled, got.State)
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
		})
	}
	for _, step := range []twopc.Step{twopc.StepScan, twopc.StepTakeover, twopc.StepApply, twopc.StepCommit, twopc.StepSettle, twopc.StepDone} {
		t.Run("recover/"+step.String(), func(t *testing.T) {
			ctx := testCtx(t)
			// Legs applied, then the owner died: recovery rolls forward.
			b := newFaultBank(t, twopc.WithFrozenMark(), twopc.WithStepHook(crashAt(twopc.StepCommit)))
			b.open(map[string]int64{"A": 100, "B": 0})
			_, err := b.c.Transfer(ctx, "A", "B", 60)
			require.ErrorIs(t, err, errCrash)
			b.backdateAll(3600e9)
			var hook func(context.Context, twopc.Step, *twopc.Txn) error
			r := twopc.NewRecoverer(b.coordinator(twopc.WithFrozenMark(), twopc.WithApplication("r"), twopc.WithStepHook(func(ctx context.Context, s twopc.Step, tx *twopc.Txn) error {
				return hook(ctx, s, tx)
			})))
			hook = faultAt(t, b, step, mongotest.DropAfterForward)
			rep, err := r.RecoverOnce(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, rep.RolledForward)
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			assert.Equal(t, int64(40), b.balance("A"))
		})
	}
}

// TestRoundTripsAndCommands counts, with a driver CommandMonitor, the data
// commands of a transfer: three on the caller's path to the commit point,
// five in all for a transfer settled alone, and fewer per transfer when
// the background settler batches; one find more, before the insert, for
// the first transfer naming accounts the coordinator has not seen.
func TestRoundTripsAndCommands(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1_000_000, "B": 0})
	var cc commandCounter
	atSettle := -1
	for _, sync := range []bool{true, false} {
		opts := []twopc.Option{twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
			if s == twopc.StepSettle && atSettle < 0 {
				atSettle = cc.total()
			}
			return nil
		})}
		if sync {
			opts = append(opts, twopc.WithSyncSettle())
		}
		c, err := twopc.NewCoordinator(b.countedDatabase(&cc), opts...)
		require.NoError(t, err)
		// A coordinator reads the server's clock once before its first
		// transfer (a hello), then in the background with the mark.
		require.NoError(t, twopc.SyncClock(ctx, c))
		// The first transfer naming accounts this coordinator has not
		// seen reads that they exist first: one find (one ledger); the
		// next, between accounts it saw, costs three.
		for _, tc := range []struct {
			name        string
			trips, cmds int
		}{{"accounts not seen", 4, 6}, {"accounts seen", 3, 5}} {
			cc.reset()
			atSettle = -1
			_, err = c.Transfer(ctx, "A", "B", 1)
			require.NoError(t, err)
			require.NoError(t, c.Settle(ctx))
			assert.Equal(t, tc.trips, atSettle, "round trips to the commit point (sync=%v, %s)", sync, tc.name)
			assert.Equal(t, tc.cmds, cc.total(), "commands per settled transfer (sync=%v, %s)", sync, tc.name)
			if tc.trips == 4 {
				assert.Equal(t, 1, cc.count("find"), "the one find (sync=%v)", sync)
			}
		}
		require.NoError(t, c.Close(ctx))
	}

	// Under concurrency the settler batches: fewer than five per transfer.
	c, err := twopc.NewCoordinator(b.countedDatabase(&cc))
	require.NoError(t, err)
	defer c.Close(ctx)
	cc.reset()
	const workers, each = 8, 10
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var err error
			for i := 0; i < each && err == nil; i++ {
				_, err = c.Transfer(ctx, "A", "B", 1)
			}
			errs <- err
		}()
	}
	for w := 0; w < workers; w++ {
		require.NoError(t, <-errs)
	}
	require.NoError(t, c.Settle(ctx))
	perTransfer := float64(cc.total()) / (workers * each)
	t.Logf("%d transfers, %d commands, %.2f per transfer", workers*each, cc.total(), perTransfer)
	assert.LessOrEqual(t, perTransfer, 5.0)
	b.checkSettled(map[string]int64{"A": 1_000_000, "B": 0})
}

// TestLostCommandInASettleBatch: the front loses the first of a settle
// pass's write commands, before or after the server applied it. That pass
// moves nothing to done (no transaction is done with a leg still open),
// and the next pass finishes all of them.
func TestLostCommandInASettleBatch(t *testing.T) {
	for _, kind := range []string{mongotest.DropBeforeForward, mongotest.DropAfterForward} {
		t.Run(kind, func(t *testing.T) {
			ctx := testCtx(t)
			b := newFaultBank(t, twopc.WithStepHook(failAt(twopc.StepSettle)), twopc.WithSyncSettle())
			opening, ids := appliedTransfers(t, b, 3)
			// Legs go in commands of 2: [A, B0], [A, B1], [A, B2].
			r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithWriteBatch(2), twopc.WithRetries(1)))
			require.NoError(t, b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: kind, Count: 1}))

			rep, err := r.RecoverOnce(ctx)
			require.Error(t, err)
			assert.Zero(t, rep.Settled)
			for _, id := range ids {
				assert.Equal(t, twopc.StateApplied, b.txn(id).State)
			}
			for i := 1; i < 3; i++ {
				assert.Len(t, b.account(fmt.Sprint("B", i)).Pending, 1, "the commands after the lost one were not sent")
			}

			rep, err = r.RecoverOnce(ctx)
			require.NoError(t, err)
			assert.Equal(t, 3, rep.Settled)
			b.checkSettled(opening)
		})
	}
}
