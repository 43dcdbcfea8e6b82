package twopc_test

// A repeat with the key drives the first attempt to its end and answers
// with it (PROTOCOL.md "Repeats"): in the coordinator that made the
// attempt at once, from another process once the attempt's takeover lease
// has passed; the first attempt's late writes meet the claim, markers and
// fences; a race with the Recoverer's rollback has one winner.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestRepeatFinishesInSameCoordinator: a keyed call that stopped before
// its commit (legs applied), or before its apply (nothing applied), is
// finished by a repeat in the same coordinator, at once: committed, the
// money moved once, the same transaction.
func TestRepeatFinishesInSameCoordinator(t *testing.T) {
	for _, step := range []twopc.Step{twopc.StepApply, twopc.StepCommit} {
		t.Run(step.String(), func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithStepHook(crashAt(step)))
			b.open(map[string]int64{"A": 100, "B": 0})
			first, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
			require.ErrorIs(t, err, errCrash)
			require.Equal(t, twopc.StatePending, b.txn(first.ID).State)
			claim := b.txn(first.ID).Claim

			again, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
			require.NoError(t, err, "the repeat finishes the first attempt")
			assert.Equal(t, first.ID, again.ID)
			assert.True(t, again.State.Committed(), "committed, not %s", again.State)
			assert.NotEqual(t, claim, b.txn(first.ID).Claim, "taken over with a claim of its own, not the first attempt's")
			require.NoError(t, b.c.Settle(ctx))
			assert.Len(t, b.txns(), 1)
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
		})
	}
}

// TestRepeatHoldFinishes: a keyed hold stopped before its commit is made
// held by its repeat (the caller asked for it again), not rolled back.
func TestRepeatHoldFinishes(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)))
	b.open(map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Hold(ctx, "A", "B", 30, twopc.WithKey("h"))
	require.ErrorIs(t, err, errCrash)
	again, err := b.c.Hold(ctx, "A", "B", 30, twopc.WithKey("h"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	assert.Equal(t, twopc.StateHeld, again.State)
	captured, err := b.c.Capture(ctx, first.ID, 30)
	require.NoError(t, err)
	assert.True(t, captured.State.Committed())
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// TestRepeatFromAnotherProcess: another coordinator (another application,
// or another process sharing the first's application name) waits out the
// first attempt's takeover lease, not its abort lease (StaleAfter, an
// hour here), then finishes it. Within the lease a repeat whose context
// ends first is told the transfer is in progress, and the key is not
// spent.
func TestRepeatFromAnotherProcess(t *testing.T) {
	for _, app := range []string{"other", "same"} {
		t.Run(app, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithApplication("same"), twopc.WithStaleAfter(time.Hour),
				twopc.WithTakeoverAfter(400*time.Millisecond), twopc.WithStepHook(crashAt(twopc.StepCommit)))
			b.open(map[string]int64{"A": 100, "B": 0})
			first, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
			require.ErrorIs(t, err, errCrash)
			other := b.coordinator(twopc.WithApplication(app), twopc.WithStaleAfter(time.Hour))

			short, cancel := context.WithTimeout(ctx, time.Millisecond)
			defer cancel()
			<-short.Done()
			_, err = other.Transfer(short, "A", "B", 60, twopc.WithKey("k"))
			require.Error(t, err)
			assert.Equal(t, twopc.StatePending, b.txn(first.ID).State, "a repeat that gave up moved nothing")

			again, err := other.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
			require.NoError(t, err)
			assert.Equal(t, first.ID, again.ID)
			assert.True(t, again.State.Committed())
			require.NoError(t, other.Settle(ctx))
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
		})
	}
}

// TestRepeatAfterFirstOwnersLateWrites: every write command the first
// attempt sent is delivered again after its repeat finished the transfer
// (a duplicate, or a request that sat in the network): its state writes
// meet the new claim, its leg writes the markers and fences; nothing
// moves.
func TestRepeatAfterFirstOwnersLateWrites(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	var w writeRecorder
	owner, err := twopc.NewCoordinator(w.database(b), twopc.WithSyncSettle(), twopc.WithStepHook(crashAt(twopc.StepCommit)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close(context.Background()) })
	first, err := owner.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
	require.ErrorIs(t, err, errCrash)
	late := w.recorded()
	require.NotEmpty(t, late)

	again, err := owner.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	require.NoError(t, owner.Settle(ctx))
	before, txnBefore := b.accountStates(), b.txn(first.ID)
	resendAll(t, b.db, late)
	assert.Equal(t, before, b.accountStates(), "the first attempt's late writes moved nothing")
	assert.Equal(t, txnBefore.State, b.txn(first.ID).State)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// TestRepeatRacesRecoverer: a repeat and a Recoverer's presumed abort of
// the same stale attempt race; exactly one wins, and the answer and the
// money agree: committed and moved once, or canceled and nothing moved.
func TestRepeatRacesRecoverer(t *testing.T) {
	for i := range 6 {
		t.Run("", func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepApply)), twopc.WithStaleAfter(time.Second))
			b.open(map[string]int64{"A": 100, "B": 0})
			first, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
			require.ErrorIs(t, err, errCrash)
			b.backdate(first.ID, time.Hour)
			rec := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithStaleAfter(time.Second)))
			var wg sync.WaitGroup
			var got *twopc.Txn
			var rerr error
			wg.Add(2)
			go func() {
				defer wg.Done()
				if i%2 == 0 {
					runtimeYield()
				}
				_, _ = rec.RecoverOnce(ctx)
			}()
			go func() {
				defer wg.Done()
				got, rerr = b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
			}()
			wg.Wait()
			b.recoverAll()
			switch {
			case rerr == nil:
				require.True(t, got.State.Committed())
				b.checkSettled(map[string]int64{"A": 100, "B": 0})
			case errors.Is(rerr, twopc.ErrCanceled):
				b.checkSettled(map[string]int64{"A": 100, "B": 0})
			default:
				t.Fatalf("the repeat answered %v", rerr)
			}
			auditOK(t, b, "after the race")
		})
	}
}

// TestRepeatTwoProcessesAtOnce: two processes repeat one stalled attempt
// at once; both answer its one outcome, and the money moved once.
func TestRepeatTwoProcessesAtOnce(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)), twopc.WithTakeoverAfter(300*time.Millisecond))
	b.open(map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
	require.ErrorIs(t, err, errCrash)
	cs := []*twopc.Coordinator{b.coordinator(twopc.WithApplication("p1")), b.coordinator(twopc.WithApplication("p2"))}
	var wg sync.WaitGroup
	got := make([]*twopc.Txn, 2)
	errs := make([]error, 2)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
		}()
	}
	wg.Wait()
	for i := range cs {
		require.NoError(t, errs[i], "process %d", i)
		assert.Equal(t, first.ID, got[i].ID)
		assert.True(t, got[i].State.Committed())
	}
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// TestRepeatWhileGroupedWriteInFlight: the first call gives up while the
// apply write it joined is still running (the server applied it; its reply
// is relayed a second late), under the stage's context, which no caller
// ends; the repeat, made at once in the same coordinator, finishes the
// transfer, and the write's late reply changes nothing.
func TestRepeatWhileGroupedWriteInFlight(t *testing.T) {
	ctx := testCtx(t)
	var b *bank
	var once sync.Once
	b = newFaultBank(t, twopc.WithStepHook(func(ctx context.Context, s twopc.Step, _ *twopc.Txn) error {
		var err error
		if s == twopc.StepApply {
			once.Do(func() {
				err = b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.Delay, Count: 1, Delay: time.Second})
			})
		}
		return err
	}))
	b.open(map[string]int64{"A": 100, "B": 0})
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	first, err := b.c.Transfer(short, "A", "B", 60, twopc.WithKey("k"))
	require.ErrorIs(t, err, context.DeadlineExceeded, "the first call gave up while its apply write ran")
	require.NotNil(t, first)

	again, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	assert.True(t, again.State.Committed())
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	auditOK(t, b, "after the repeat")
}

// runtimeYield gives the other goroutine of a race a head start of a few
// scheduling points, so that both orders are tried across runs.
func runtimeYield() {
	for range 50 {
		runtime.Gosched()
	}
}

// TestRepeatHoldWhileCaptureInFlight: a capture whose first call stopped
// before its commit is in flight; the hold's own repeat answers the hold
// (held), and the capture's repeat finishes the capture, the money moved
// once.
func TestRepeatHoldWhileCaptureInFlight(t *testing.T) {
	ctx := testCtx(t)
	var once sync.Once
	b := newBank(t, twopc.WithStepHook(func(_ context.Context, s twopc.Step, txn *twopc.Txn) error {
		var err error
		if s == twopc.StepCommit && !txn.CaptureOf.IsZero() {
			once.Do(func() { err = errCrash })
		}
		return err
	}))
	b.open(map[string]int64{"A": 100, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 30, twopc.WithKey("h"))
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, hold.ID, 30, twopc.WithKey("c"))
	require.ErrorIs(t, err, errCrash)

	again, err := b.c.Hold(ctx, "A", "B", 30, twopc.WithKey("h"))
	require.NoError(t, err)
	assert.Equal(t, hold.ID, again.ID)
	assert.Equal(t, twopc.StateHeld, again.State, "the hold, held while its capture is in flight")

	captured, err := b.c.Capture(ctx, hold.ID, 30, twopc.WithKey("c"))
	require.NoError(t, err, "the capture's repeat finishes it")
	assert.True(t, captured.State.Committed())
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	assert.Equal(t, int64(30), b.balance("B"))
}

// TestRepeatAfterShortDeadlines: keyed transfers, transfers of legs and
// holds cut by deadlines of 1 to 20 ms, each repeated at once with its key
// and a fresh context while a Recoverer runs at its defaults: every repeat
// answers the first attempt's outcome (here, success: the funds suffice),
// none ErrInProgress; the money moved once per key, and the audit is
// clean.
func TestRepeatAfterShortDeadlines(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 1_000_000, "B": 0, "C": 0})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	recovered := make(chan struct{})
	go func() {
		defer close(recovered)
		_ = twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"))).Run(rctx)
	}()
	const n = 30
	for i := range 3 * n {
		key := fmt.Sprintf("k%d", i)
		call := func(ctx context.Context) (*twopc.Txn, error) {
			switch i % 3 {
			case 0:
				return b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey(key))
			case 1:
				return b.c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 7}, {Account: "C", Amount: 3}}, twopc.WithKey(key))
			default:
				return b.c.Hold(ctx, "A", "C", 10, twopc.WithKey(key))
			}
		}
		short, cancel := context.WithTimeout(ctx, time.Duration(1+i%20)*time.Millisecond)
		_, _ = call(short)
		cancel()
		got, err := call(ctx)
		require.NoError(t, err, "repeat of %s", key)
		if i%3 == 2 {
			assert.Equal(t, twopc.StateHeld, got.State, key)
			_, err = b.c.Void(ctx, got.ID)
			require.NoError(t, err)
		} else {
			assert.True(t, got.State.Committed(), key)
		}
	}
	stop()
	<-recovered
	require.NoError(t, b.c.Settle(ctx))
	b.recoverAll()
	assert.Len(t, b.txns(), 3*n, "one transaction a key")
	b.checkSettled(map[string]int64{"A": 1_000_000, "B": 0, "C": 0})
	assert.Equal(t, int64(1_000_000-20*n), b.balance("A"))
	auditOK(t, b, "after the repeats")
}

// TestRepeatFinishesARollback: a keyed transfer the server refuses (no
// funds) stops after its move to canceling, before canceled; its repeat,
// in the same coordinator and from another application, answers the
// refusal with the transaction canceled, its rollback finished, not left
// canceling for a Recoverer's pass a StaleAfter later.
func TestRepeatFinishesARollback(t *testing.T) {
	for _, where := range []string{"same coordinator", "another application"} {
		t.Run(where, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCanceled)), twopc.WithTakeoverAfter(200*time.Millisecond))
			b.open(map[string]int64{"P": 0, "B": 0})
			first, err := b.c.Transfer(ctx, "P", "B", 10, twopc.WithKey("r"))
			require.ErrorIs(t, err, errCrash)
			require.Equal(t, twopc.StateCanceling, b.txn(first.ID).State)
			c := b.c
			if where != "same coordinator" {
				c = b.coordinator(twopc.WithApplication("other"))
			}
			again, err := c.Transfer(ctx, "P", "B", 10, twopc.WithKey("r"))
			require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
			require.NotNil(t, again)
			assert.Equal(t, first.ID, again.ID)
			assert.Equal(t, twopc.StateCanceled, b.txn(first.ID).State, "the repeat finished the rollback")
			b.checkSettled(map[string]int64{"P": 0, "B": 0})
		})
	}
}
