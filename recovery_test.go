package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

var errCrash = errors.New("crash")

// crashAt returns a step hook that fails the first time step is reached,
// as if the process died just before that database operation.
func crashAt(step twopc.Step) func(context.Context, twopc.Step, *twopc.Txn) error {
	var once sync.Once
	return func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		var err error
		if s == step {
			once.Do(func() { err = errCrash })
		}
		return err
	}
}

// failAt returns a step hook that fails every time step is reached; at
// StepSettle, a transfer commits and stays applied.
func failAt(step twopc.Step) func(context.Context, twopc.Step, *twopc.Txn) error {
	return func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == step {
			return errCrash
		}
		return nil
	}
}

// stall is a step hook that blocks at one step until released, like a
// process paused by GC or cut off by a partition.
type stall struct {
	step    twopc.Step
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newStall(step twopc.Step) *stall {
	return &stall{step: step, reached: make(chan struct{}), release: make(chan struct{})}
}

func (s *stall) hook(ctx context.Context, step twopc.Step, _ *twopc.Txn) error {
	if step != s.step {
		return nil
	}
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return nil
	}
	close(s.reached)
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recoverAll runs passes of a recoverer of another application until
// nothing is left to finish, and returns the summed report.
func (b *bank) recoverAll(opts ...twopc.Option) twopc.RecoveryReport {
	b.t.Helper()
	// No checkpoint horizon: the tests' commits are visible at once, and
	// WithHistory's removal may take what committed a moment ago.
	r := twopc.NewRecoverer(b.coordinator(append([]twopc.Option{twopc.WithApplication("recoverer"), twopc.WithCheckpoints(1000, 0)}, opts...)...))
	var sum twopc.RecoveryReport
	for pass := 0; pass < 5; pass++ {
		b.backdateAll(time.Hour)
		// A pass over a soak's thousands of transactions on the dev server
		// takes minutes: more than testCtx gives.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		rep, err := r.RecoverOnce(ctx)
		cancel()
		require.NoError(b.t, err)
		sum.RolledForward += rep.RolledForward
		sum.Settled += rep.Settled
		sum.RolledBack += rep.RolledBack
		sum.Canceled += rep.Canceled
		sum.Skipped += rep.Skipped
		if rep.Finished() == 0 {
			break
		}
	}
	return sum
}

// transferSteps are the steps a transfer meets on its way to done.
var transferSteps = []twopc.Step{twopc.StepInsert, twopc.StepApply, twopc.StepCommit, twopc.StepSettle, twopc.StepDone}

// TestCrashAtEveryStepThenRecover kills a transfer before each of its
// database operations, then lets a recoverer of another application finish
// it: the money moves exactly once or not at all.
func TestCrashAtEveryStepThenRecover(t *testing.T) {
	for _, step := range transferSteps {
		for _, sync := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/sync=%v", step, sync), func(t *testing.T) {
				ctx := testCtx(t)
				opts := []twopc.Option{twopc.WithStepHook(crashAt(step))}
				if sync {
					opts = append(opts, twopc.WithSyncSettle())
				}
				b := newBank(t, opts...)
				b.open(map[string]int64{"A": 100, "B": 0})
				txn, err := b.c.Transfer(ctx, "A", "B", 60)
				require.NoError(t, b.c.Settle(ctx))
				committed := step == twopc.StepSettle || step == twopc.StepDone
				switch {
				case committed && !sync:
					require.NoError(t, err) // settling failed in the background
				default:
					require.ErrorIs(t, err, errCrash)
					var se *twopc.StepError
					require.ErrorAs(t, err, &se)
					assert.Equal(t, step, se.Step)
				}
				if committed {
					require.NotNil(t, txn)
					assert.True(t, txn.State.Committed())
					assert.Equal(t, twopc.StateApplied, b.txn(txn.ID).State, "left applied")
				}
				rep := b.recoverAll()
				all := b.txns()
				switch step {
				case twopc.StepInsert:
					assert.Empty(t, all, "crash before insert writes nothing")
				case twopc.StepApply:
					// No leg applied: recovery presumes abort.
					require.Len(t, all, 1)
					assert.Equal(t, twopc.StateCanceled, all[0].State, "recovery rolls back a transfer that never began")
					assert.Equal(t, "stale_pending", all[0].Reason)
					assert.Equal(t, 1, rep.Finished())
				default:
					require.Len(t, all, 1)
					assert.Equal(t, twopc.StateDone, all[0].State, "recovery rolls forward")
					assert.Equal(t, 1, rep.Finished())
				}
				b.checkSettled(map[string]int64{"A": 100, "B": 0})
				if step != twopc.StepInsert && step != twopc.StepApply {
					assert.Equal(t, int64(40), b.balance("A"))
				}
			})
		}
	}
}

// TestCrashInRecoveryThenRecoverAgain kills the recoverer itself before
// each of its operations; the next pass finishes the work.
func TestCrashInRecoveryThenRecoverAgain(t *testing.T) {
	recoverySteps := []twopc.Step{twopc.StepClock, twopc.StepScan, twopc.StepTakeover, twopc.StepApply, twopc.StepInspect, twopc.StepCommit, twopc.StepSettle, twopc.StepDone}
	for _, step := range recoverySteps {
		t.Run(step.String(), func(t *testing.T) {
			ctx := testCtx(t)
			// The owner dies with its legs applied: recovery rolls forward.
			b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)))
			b.open(map[string]int64{"A": 100, "B": 0})
			_, err := b.c.Transfer(ctx, "A", "B", 60)
			require.ErrorIs(t, err, errCrash)

			b.backdateAll(time.Hour)
			dying := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("dying"), twopc.WithStepHook(crashAt(step))))
			_, err = dying.RecoverOnce(ctx)
			require.ErrorIs(t, err, errCrash)
			b.recoverAll()
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			assert.Equal(t, int64(40), b.balance("A"))
		})
	}
}

// TestRecoverSettlesFreshApplied: a committed transfer whose settling
// failed is settled by the next pass, however fresh.
func TestRecoverSettlesFreshApplied(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepSettle)), twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	require.Equal(t, twopc.StateApplied, txn.State)
	rep, err := twopc.NewRecoverer(b.coordinator()).RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Settled)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// appliedTransfers opens A with 10·n and B0…Bn-1 empty, and has b's
// coordinator (hooked with failAt(StepSettle)) move 10 from A to each Bi; they
// stay applied, in the order of their ids' lastModified (transfer i is
// the i-th oldest). It returns the opening balances and the ids.
func appliedTransfers(t *testing.T, b *bank, n int) (map[string]int64, []bson.ObjectID) {
	t.Helper()
	opening := map[string]int64{"A": int64(10 * n)}
	for i := range n {
		opening[fmt.Sprint("B", i)] = 0
	}
	b.open(opening)
	var ids []bson.ObjectID
	for i := range n {
		txn, err := b.c.Transfer(testCtx(t), "A", fmt.Sprint("B", i), 10)
		require.ErrorIs(t, err, errCrash)
		require.Equal(t, twopc.StateApplied, txn.State)
		ids = append(ids, txn.ID)
	}
	for i, id := range ids {
		b.backdate(id, time.Duration(n-i)*time.Second)
	}
	return opening, ids
}

// TestRecoverLargeBatches settles more transactions in one pass, and
// unfences them in the next, than fit in one write command. Every update
// command stays within the write batch, which is 100 here: FerretDB v1
// used to hang for good on an update of 100 single-document statements
// (it did, in the soak run); the library's are statements of many on one
// _id, which it serves. Everything is finished.
func TestRecoverLargeBatches(t *testing.T) {
	const n = 130 // more than a recovery batch, 260 legs
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(failAt(twopc.StepSettle)), twopc.WithSyncSettle())
	opening, _ := appliedTransfers(t, b, n)

	var cc commandCounter
	c, err := twopc.NewCoordinator(b.countedDatabase(&cc), twopc.WithApplication("recoverer"), twopc.WithWriteBatch(100))
	require.NoError(t, err)
	r := twopc.NewRecoverer(c)
	rep, err := r.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, n, rep.Settled)
	assert.Equal(t, 100, cc.largestUpdate(), "legs go in full write batches, never more")
	b.checkSettled(opening)
	for _, d := range b.txns() {
		b.backdate(d.ID, time.Hour)
	}
	_, err = r.RecoverOnce(ctx)
	require.NoError(t, err)
}

// TestSettleWriteErrorInABatch: when one leg of a settle fails with a
// write error, in a later write command than the first, at its start or at
// its end, exactly its transaction stays applied and the others are done.
// FerretDB v1 reports such an error at index 0 and skips the rest of the
// command: trusting the index marked the wrong transaction done.
func TestSettleWriteErrorInABatch(t *testing.T) {
	// Legs go in commands of 3: [A, B0, A], [B1, A, B2].
	for full, stuck := range map[string]int{"B1": 1, "B2": 2} {
		t.Run(full, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithStepHook(failAt(twopc.StepSettle)), twopc.WithSyncSettle())
			_, ids := appliedTransfers(t, b, 3)
			// By hand, the account is put where its held credit cannot land.
			_, err := b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: full}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "balance", Value: int64(math.MaxInt64)}}}})
			require.NoError(t, err)

			r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer"), twopc.WithWriteBatch(3)))
			rep, err := r.RecoverOnce(ctx)
			require.Error(t, err, "the overflow is reported")
			assert.Equal(t, 2, rep.Settled)
			assert.Equal(t, int64(0), b.balance("A"))
			for i, id := range ids {
				acct := fmt.Sprint("B", i)
				if i == stuck {
					assert.Equal(t, twopc.StateApplied, b.txn(id).State)
					assert.Equal(t, []bson.ObjectID{twopc.LegMarker(id, 1)}, b.account(acct).Pending, "its leg is still open")
					continue
				}
				assert.Equal(t, twopc.StateDone, b.txn(id).State)
				assert.Equal(t, int64(10), b.balance(acct))
				assert.Empty(t, b.account(acct).Pending)
			}
		})
	}
}

// TestKeyedRetryAfterCrash: the first call with a key dies half way; a
// retry takes that transaction over and finishes it (see repeat_test.go),
// the debit applied once; once settled, a retry returns it done.
func TestKeyedRetryAfterCrash(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)))
	b.open(map[string]int64{"A": 100, "B": 0})
	first, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
	require.ErrorIs(t, err, errCrash)
	assert.Equal(t, int64(40), b.balance("A"), "the debit applied")
	retry, err := b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, retry.ID)
	assert.True(t, retry.State.Committed())
	assert.Equal(t, int64(40), b.balance("A"), "the retry applied nothing twice")
	b.recoverAll()
	retry, err = b.c.Transfer(ctx, "A", "B", 60, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, retry.State)
	assert.Len(t, b.txns(), 1)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// TestHeldCreditCannotBeSpent: a credit of a transfer that has not
// reached its commit point is not spendable, so canceling the transfer
// never takes the destination below zero.
func TestHeldCreditCannotBeSpent(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)), twopc.WithApplication("app"))
	b.open(map[string]int64{"A": 100, "B": 0, "C": 0})
	t1, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	acct, err := b.c.Account(ctx, "B")
	require.NoError(t, err)
	assert.Equal(t, int64(0), acct.Balance)
	assert.Equal(t, int64(60), acct.PendingCredit)
	assert.Equal(t, []bson.ObjectID{t1.ID}, acct.PendingTransactions)

	_, err = b.c.Transfer(ctx, "B", "C", 60)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds, "B cannot spend a credit that is not settled")
	_, err = twopc.NewCanceler(b.c).Cancel(ctx, t1.ID)
	require.NoError(t, err)
	b.checkSettled(map[string]int64{"A": 100, "B": 0, "C": 0})
}

func TestRecoverRollsBackWhenALegCannotApply(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepApply)))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn := b.diedAfterCredit("A", "B", 60)
	// Meanwhile the source was drained by something else.
	_, err := b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "A"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "balance", Value: int64(10)}}}})
	require.NoError(t, err)
	rep := b.recoverAll()
	assert.Equal(t, 1, rep.RolledBack)
	d := b.txn(txn.ID)
	assert.Equal(t, twopc.StateCanceled, d.State)
	assert.Equal(t, "insufficient_funds", d.Reason)
	b.checkSettled(map[string]int64{"A": 10, "B": 0})
}

func TestRecoverPartiallyAppliedPendingRollsForward(t *testing.T) {
	ctx := testCtx(t)
	// The debit applied, then the process died: simulate by applying the
	// debit leg by hand, as the tutorial's step-by-step applier would have.
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepApply)))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	b.applyLegByHand(txn, 0)
	rep := b.recoverAll()
	assert.Equal(t, 1, rep.RolledForward)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	assert.Equal(t, int64(40), b.balance("A"), "the applied debit is not applied twice")
	assert.Equal(t, int64(60), b.balance("B"))
}

func TestRecoverLeavesFreshTransactionsAlone(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepApply)))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("recoverer")))
	rep, err := r.RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, twopc.RecoveryReport{}, rep)
	assert.Equal(t, twopc.StatePending, b.txn(txn.ID).State)
}

// TestStalledOwnerResumesAfterRecovery is the tutorial's hazard on the
// roll-forward side: the owner stalls just before applying its legs, a
// recoverer takes the transaction over and finishes it (pulling it from
// the accounts), and then the owner resumes. It must not apply a leg again
// nor move the state.
func TestStalledOwnerResumesAfterRecovery(t *testing.T) {
	for _, step := range []twopc.Step{twopc.StepApply, twopc.StepCommit} {
		t.Run(step.String(), func(t *testing.T) {
			s := newStall(step)
			b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithApplication("owner"))
			b.open(map[string]int64{"A": 100, "B": 0})
			res := stalledTransfer(t, b, s, "A", "B", 60)
			rep := b.recoverAll()
			// Stalled before its legs, the transfer never began: recovery
			// presumes abort. Stalled before its commit, it rolls forward.
			began := step == twopc.StepCommit
			if began {
				assert.Equal(t, 1, rep.RolledForward)
			} else {
				assert.Equal(t, 1, rep.RolledBack)
			}
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			close(s.release)
			r := <-res
			want := map[bool]int64{true: 60, false: 0}[began]
			if began {
				require.NoError(t, r.err, "the transfer happened, by the recoverer's hand")
				assert.True(t, r.txn.State.Committed())
			} else {
				require.ErrorIs(t, r.err, twopc.ErrCanceled)
			}
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			assert.Equal(t, 100-want, b.balance("A"), "no leg applied twice")
			assert.Equal(t, want, b.balance("B"))
			assert.Equal(t, "recoverer", b.txn(r.txn.ID).Application)
		})
	}
}

// TestStalledOwnerResumesAfterCancel is the tutorial's hazard itself: the
// owner stalls, a canceler of another application takes the stale
// transaction and rolls it back (pulling it from the accounts), and the
// owner resumes. Its apply must not match again: money from nowhere.
func TestStalledOwnerResumesAfterCancel(t *testing.T) {
	for _, step := range []twopc.Step{twopc.StepApply, twopc.StepCommit} {
		t.Run(step.String(), func(t *testing.T) {
			ctx := testCtx(t)
			s := newStall(step)
			b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithApplication("owner"))
			b.open(map[string]int64{"A": 100, "B": 0})
			res := stalledTransfer(t, b, s, "A", "B", 60)
			txns := b.txns()
			require.Len(t, txns, 1)
			id := txns[0].ID
			canceler := twopc.NewCanceler(b.coordinator(twopc.WithApplication("canceler")))
			_, err := canceler.Cancel(ctx, id)
			require.ErrorIs(t, err, twopc.ErrInProgress, "a fresh transaction of another application is not canceled")
			b.backdate(id, time.Hour)
			canceled, err := canceler.Cancel(ctx, id)
			require.NoError(t, err)
			assert.Equal(t, twopc.StateCanceled, canceled.State)
			b.checkSettled(map[string]int64{"A": 100, "B": 0})

			close(s.release)
			r := <-res
			require.ErrorIs(t, r.err, twopc.ErrCanceled)
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			assert.Equal(t, int64(100), b.balance("A"), "no leg of a canceled transfer remains")
			assert.Equal(t, int64(0), b.balance("B"))
			assert.Equal(t, twopc.StateCanceled, b.txn(id).State)
		})
	}
}

// TestTwoRecoverersRace lets two recoverers of different applications, each
// with its own client, finish the same stale set at once: every
// transaction is finished exactly once.
func TestTwoRecoverersRace(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(failAt(twopc.StepCommit)))
	opening := map[string]int64{"A": 1000, "B": 1000, "C": 1000}
	b.open(opening)
	pairs := [][2]string{{"A", "B"}, {"B", "C"}, {"C", "A"}, {"A", "C"}}
	const n = 12
	for i := 0; i < n; i++ {
		p := pairs[i%len(pairs)]
		_, err := b.c.Transfer(ctx, p[0], p[1], int64(10+i))
		require.ErrorIs(t, err, errCrash)
	}
	b.backdateAll(time.Hour)
	reps := make([]twopc.RecoveryReport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range reps {
		r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication(fmt.Sprintf("r%d", i))), twopc.WithBatch(5))
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reps[i], errs[i] = r.RecoverOnce(ctx)
		}()
	}
	close(start)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, n, reps[0].RolledForward+reps[1].RolledForward, "each transaction rolled forward once: %+v", reps)
	b.checkSettled(opening)
	for _, d := range b.txns() {
		assert.Equal(t, twopc.StateDone, d.State)
	}
}

func TestCancel(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)), twopc.WithApplication("app"))
	b.open(map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	assert.Equal(t, int64(40), b.balance("A"), "legs applied before the crash")

	k := twopc.NewCanceler(b.c) // same application: no need to wait for staleness
	got, err := k.Cancel(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, got.State)
	assert.Equal(t, "canceled", got.Reason)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})

	again, err := k.Cancel(ctx, txn.ID)
	require.NoError(t, err, "canceling twice is fine")
	assert.Equal(t, twopc.StateCanceled, again.State)

	unknown := bson.NewObjectID()
	placeholder, err := k.Cancel(ctx, unknown)
	require.NoError(t, err, "an id never written is canceled for good")
	assert.Equal(t, twopc.StateCanceled, placeholder.State)
	got, err = b.c.Get(ctx, unknown)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, got.State)

	done, err := b.coordinator(twopc.WithSyncSettle()).Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
	_, err = k.Cancel(ctx, done.ID)
	require.ErrorIs(t, err, twopc.ErrNotCancelable)
	assert.Contains(t, err.Error(), "done")
}

func TestCancelCrashAtEveryStepThenRecover(t *testing.T) {
	for _, step := range []twopc.Step{twopc.StepRead, twopc.StepCancel, twopc.StepFence, twopc.StepUndo, twopc.StepCanceled} {
		t.Run(step.String(), func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)), twopc.WithApplication("app"))
			b.open(map[string]int64{"A": 100, "B": 0})
			txn, err := b.c.Transfer(ctx, "A", "B", 60)
			require.ErrorIs(t, err, errCrash)
			k := twopc.NewCanceler(b.coordinator(twopc.WithApplication("app"), twopc.WithStepHook(crashAt(step))))
			b.backdate(txn.ID, time.Hour) // another Coordinator's canceler takes over only a stale transaction
			_, err = k.Cancel(ctx, txn.ID)
			require.ErrorIs(t, err, errCrash)
			b.recoverAll()
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
			want := twopc.StateCanceled
			if step == twopc.StepRead || step == twopc.StepCancel {
				want = twopc.StateDone // the cancel never happened: recovery rolls forward
			}
			assert.Equal(t, want, b.txn(txn.ID).State)
		})
	}
}

// TestOwnerRacesCanceler cancels a live transfer while its owner is
// between applying the legs and committing: by a canceler of its own
// Coordinator, which takes over at once, and by one of another process of
// the same application name, which waits until the transfer is stale
// (ownership is per Coordinator; backdated here).
func TestOwnerRacesCanceler(t *testing.T) {
	for _, same := range []bool{true, false} {
		t.Run(fmt.Sprintf("same=%v", same), func(t *testing.T) {
			ctx := testCtx(t)
			s := newStall(twopc.StepCommit)
			b := newBank(t, twopc.WithStepHook(s.hook), twopc.WithApplication("app"))
			b.open(map[string]int64{"A": 100, "B": 0})
			res := stalledTransfer(t, b, s, "A", "B", 60)
			id := b.txns()[0].ID
			k := twopc.NewCanceler(b.c)
			if !same {
				other := twopc.NewCanceler(b.coordinator(twopc.WithApplication("app")))
				_, err := other.Cancel(ctx, id)
				require.ErrorIs(t, err, twopc.ErrInProgress, "a fresh transaction another Coordinator claimed")
				b.backdate(id, time.Hour)
				k = other
			}
			_, err := k.Cancel(ctx, id)
			require.NoError(t, err)
			close(s.release)
			require.ErrorIs(t, (<-res).err, twopc.ErrCanceled)
			b.checkSettled(map[string]int64{"A": 100, "B": 0})
		})
	}
}

func TestRunRecoversUntilCanceled(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithStepHook(crashAt(twopc.StepCommit)))
	b.open(map[string]int64{"A": 100, "B": 0})
	_, err := b.c.Transfer(ctx, "A", "B", 60)
	require.ErrorIs(t, err, errCrash)
	b.backdateAll(time.Hour)
	// Run logs each pass that did something: the first log record means
	// the first pass is through.
	passes := make(chan slog.Record, 100)
	logger := slog.New(recordHandler(passes))
	r := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("runner")),
		twopc.WithInterval(time.Hour), twopc.WithRecoveryLogger(logger))
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	// Run recovers at start, without waiting for the interval.
	for rec := range passes {
		if rec.Message == "twopc: recovery pass" {
			break
		}
	}
	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
}

// recordHandler is a slog.Handler that sends every record to ch.
type recordHandler chan<- slog.Record

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r:
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }
