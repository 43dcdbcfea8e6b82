package twopc_test

// An adversarial review of captures as transactions of their own (commit
// 1a920a6): each test is an interleaving the book or its callers get wrong.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twopc/twopc"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// ageReservations makes every reservation in hold id's book look made an
// hour ago: past any lease.
func (b *bank) ageReservations(id bson.ObjectID) {
	b.t.Helper()
	n := len(b.txnCaptures(id))
	for i := range n {
		_, err := b.db.Collection("transactions").UpdateOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: fmt.Sprintf("captures.%d.at", i), Value: time.Now().Add(-time.Hour)}}}})
		require.NoError(b.t, err)
	}
}

// txnCaptures is hold id's book entries, as stored.
func (b *bank) txnCaptures(id bson.ObjectID) []bson.Raw {
	b.t.Helper()
	var d struct {
		Captures []bson.Raw `bson:"captures"`
	}
	require.NoError(b.t, b.db.Collection("transactions").FindOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}}).Decode(&d))
	return d.Captures
}

// TestReviewCaptureKeyReusedOnAnotherHoldAfterCrash: a keyed capture of
// hold H1 dies after its reservation, before its insert. The key is then
// used for a capture of hold H2 (nothing is under the key yet, so it is not
// ErrKeyConflict). H1's book now names a committed transaction, H2's
// capture, and settled/sweep take it for a capture of H1: Void of H1 says
// ErrHoldCaptured, recovery ends H1 "captured 30" although nothing of it was
// captured, and its release leaves 30 in A's pendingDebit and B's
// pendingCredit with no marker, for good.
func TestReviewCaptureKeyReusedOnAnotherHoldAfterCrash(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	h1, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	h2, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)

	dying := b.coordinator(twopc.WithApplication("dying"), twopc.WithStepHook(crashAt(twopc.StepInsert)))
	_, err = dying.Capture(ctx, h1.ID, 30, twopc.WithKey("order-7"))
	require.ErrorIs(t, err, errCrash)
	require.Equal(t, []int64{30, 30}, b.txn(h1.ID).CapturedLegs, "reserved, never inserted")

	_, err = b.c.Capture(ctx, h2.ID, 30, twopc.WithKey("order-7"))
	if err != nil {
		require.ErrorIs(t, err, twopc.ErrKeyConflict, "the key is H1's capture's")
	}
	b.ageReservations(h1.ID) // the dead capture's lease has passed

	_, err = b.c.Void(ctx, h1.ID)
	assert.NoError(t, err, "nothing of H1 was captured: its void must go through")
	b.recoverAll()
	for _, id := range []bson.ObjectID{h1.ID, h2.ID} {
		if b.txn(id).State == twopc.StateHeld {
			_, err := b.c.Void(ctx, id)
			require.NoError(t, err)
		}
	}
	b.recoverAll()
	assert.Zero(t, b.txn(h1.ID).Captured, "H1 reports a capture that was H2's")
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
}

// TestReviewCaptureLostFinalReservationBlocksCaptures: a final capture
// dies after its reservation, before its insert. Past its lease, a new
// capture of the hold "needs the room" (PROTOCOL.md: such a reservation is
// given back by the next call that needs it), but reserve answers
// ErrHoldCaptured ("its final capture is made or in flight") without
// sweeping: nothing was captured, and every Capture says it was.
func TestReviewCaptureLostFinalReservationBlocksCaptures(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	dying := b.coordinator(twopc.WithApplication("dying"), twopc.WithStepHook(crashAt(twopc.StepInsert)))
	_, err = dying.Capture(ctx, hold.ID, 30) // final, by default
	require.ErrorIs(t, err, errCrash)
	b.ageReservations(hold.ID)

	c, err := b.c.Capture(ctx, hold.ID, 50)
	require.NoError(t, err, "the lost capture can no longer move money; its reservation must not refuse this one")
	assert.Equal(t, twopc.StateDone, c.State)
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
	assert.EqualValues(t, 950, b.balance("A"))
}

// TestReviewCaptureSweepIgnoresCapturersLease: a capture by a process whose
// StaleAfter is a minute is between its reservation and its insert; a
// Void by a coordinator with a StaleAfter of 200 ms, 400 ms later, judges
// the reservation by its own StaleAfter, writes Cancel's placeholder under
// the capture's id and voids the hold: the live owner's capture is killed
// within its lease (transfers' takeover and Cancel judge by the longest
// lease recorded; a reservation records none).
func TestReviewCaptureSweepIgnoresCapturersLease(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle(), twopc.WithStaleAfter(200*time.Millisecond))
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	s := newStall(twopc.StepInsert)
	slow := b.coordinator(twopc.WithApplication("slow"), twopc.WithStaleAfter(time.Minute), twopc.WithStepHook(s.hook), twopc.WithSyncSettle())
	res := make(chan error, 1)
	go func() {
		_, err := slow.Capture(ctx, hold.ID, 30, twopc.WithFinalCapture(false))
		res <- err
	}()
	<-s.reached
	// A voider whose clock, once corrected to the server's, runs a second
	// on: past its own lease (200 ms), within the capturer's (a minute).
	var shift atomic.Int64
	later := b.coordinator(twopc.WithApplication("later"), twopc.WithStaleAfter(200*time.Millisecond), twopc.WithFrozenMark(),
		twopc.WithHostClock(func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }))
	require.NoError(t, twopc.SyncClock(ctx, later))
	shift.Store(int64(time.Second))
	_, verr := later.Void(ctx, hold.ID)
	close(s.release)
	cerr := <-res
	assert.ErrorIs(t, verr, twopc.ErrInProgress, "a capture within its owner's lease is in flight")
	assert.NoError(t, cerr, "the owner's capture, within its lease, was canceled under it")
}

// TestReviewCaptureKeyedRepeatWithOtherFinality: a keyed capture, not
// final, dies after its reservation; its repeat under the key asks for the
// final capture. The repeat finds the reservation "reserved already" by
// amounts alone and goes on: it answers success, yet the hold stays held
// with the rest reserved for nobody (it never ends by this capture), where
// any other difference in a keyed repeat is ErrKeyConflict.
func TestReviewCaptureKeyedRepeatWithOtherFinality(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	dying := b.coordinator(twopc.WithApplication("dying"), twopc.WithStepHook(crashAt(twopc.StepInsert)))
	_, err = dying.Capture(ctx, hold.ID, 30, twopc.WithKey("ship-1"), twopc.WithFinalCapture(false))
	require.ErrorIs(t, err, errCrash)

	c, err := b.c.Capture(ctx, hold.ID, 30, twopc.WithKey("ship-1")) // final
	if errors.Is(err, twopc.ErrKeyConflict) {
		return // refused: a repeat that differs
	}
	require.NoError(t, err)
	require.True(t, c.State.Committed())
	assert.Equal(t, twopc.StateDone, b.txn(hold.ID).State, "a final capture that succeeded ends its hold")
}

var _ = context.Background

// TestReviewCaptureSameKeyTwoHoldsAtOnce: two captures under one key, of
// two holds of the same accounts and amount, at once: each reads the key
// free (before either inserts) and reserves in its own hold's book; the
// later insert finds the other hold's capture under the key, and replay
// compares legs, key and metadata but not CaptureOf, so the call on H1 is
// answered with H2's capture, committed, and ends H1 by it: H1 "captured
// 30" with nothing moved from it, 30 left in A's pendingDebit and B's
// pendingCredit with no marker. No crash is needed.
func TestReviewCaptureSameKeyTwoHoldsAtOnce(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	h1, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	h2, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	s := newStall(twopc.StepCapture) // after the key's read, before the reservation
	first := b.coordinator(twopc.WithApplication("first"), twopc.WithStepHook(s.hook), twopc.WithSyncSettle())
	res := make(chan error, 1)
	var c1 *twopc.Txn
	go func() {
		var err error
		c1, err = first.Capture(ctx, h1.ID, 30, twopc.WithKey("order-9"))
		res <- err
	}()
	<-s.reached
	c2, err := b.c.Capture(ctx, h2.ID, 30, twopc.WithKey("order-9"))
	require.NoError(t, err)
	close(s.release)
	err1 := <-res
	if err1 == nil {
		assert.Equal(t, h1.ID, c1.CaptureOf, "the call on H1 answered with a capture of H2 (%s)", c2.ID.Hex())
	} else {
		assert.ErrorIs(t, err1, twopc.ErrKeyConflict)
	}
	b.recoverAll()
	for _, id := range []bson.ObjectID{h1.ID, h2.ID} {
		if b.txn(id).State == twopc.StateHeld {
			b.ageReservations(id)
			_, err := b.c.Void(ctx, id)
			require.NoError(t, err)
		}
	}
	b.recoverAll()
	assert.Zero(t, b.txn(h1.ID).Captured, "H1 reports H2's capture as its own")
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
}

// TestReviewCaptureCanceledFinalReservationDeliveredAgain: a final capture
// dies before its legs and recovery rolls it back, giving its reservation
// back. Its reservation write, delivered again late, re-reserves it (the
// entry is gone, so "captures.id" ≠ passes) and sets finalCapture again.
// From then on every Capture of the hold answers ErrHoldCaptured ("its
// final capture is made or in flight") without looking: the capture is
// canceled, nothing was captured, and reserve sweeps only past that check.
func TestReviewCaptureCanceledFinalReservationDeliveredAgain(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"A": 1000, "B": 0})
	hold, err := b.c.Hold(ctx, "A", "B", 100)
	require.NoError(t, err)
	rec := &writeRecorder{}
	dying, err := twopc.NewCoordinator(rec.database(b), twopc.WithApplication("dying"), twopc.WithStepHook(crashAt(twopc.StepApply)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = dying.Close(context.Background()) })
	c1, err := dying.Capture(ctx, hold.ID, 30) // final
	require.ErrorIs(t, err, errCrash)
	b.recoverAll()
	require.Equal(t, twopc.StateCanceled, b.txn(c1.ID).State)
	require.Equal(t, []int64{0, 0}, b.txn(hold.ID).CapturedLegs, "given back")

	resendAll(t, b.db, rec.recorded()) // the network delivers its writes again
	_, err = b.c.Capture(ctx, hold.ID, 50)
	require.NoError(t, err, "the only final capture reserved is canceled")
	b.checkSettled(map[string]int64{"A": 1000, "B": 0})
}

// TestVoidEndsAHoldItsFinalCaptureCompleted: a capture reserved whose
// insert never came (its caller died, keyed, so nothing gave its part
// back) keeps a final capture that committed after it from ending the
// hold. Once the lost one's lease ran out, a Void (or another Capture)
// gives its part back and finds the book complete: it answers
// ErrHoldCaptured, and ends the hold by its captures there and then, not
// leaving it held until a recovery pass (the simulation's end found such
// a hold still held).
func TestVoidEndsAHoldItsFinalCaptureCompleted(t *testing.T) {
	for _, op := range []string{"void", "capture"} {
		t.Run(op, func(t *testing.T) {
			b := newBank(t, twopc.WithSyncSettle())
			ctx := testCtx(t)
			b.open(map[string]int64{"A": 1000, "B": 0})
			hold, err := b.c.Hold(ctx, "A", "B", 100)
			require.NoError(t, err)
			dies := b.coordinator(twopc.WithApplication("dies"), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
				if s == twopc.StepInsert {
					return errCrash
				}
				return nil
			}))
			_, err = dies.Capture(ctx, hold.ID, 30, twopc.WithFinalCapture(false), twopc.WithKey("lost-capture"))
			require.ErrorIs(t, err, errCrash)
			final, err := b.c.Capture(ctx, hold.ID, 50)
			require.NoError(t, err, "the final capture fits beside the lost one's reservation")
			assert.Equal(t, twopc.StateDone, final.State)
			assert.Equal(t, twopc.StateHeld, b.txn(hold.ID).State, "the lost capture, in flight within its lease, keeps the hold from ending")

			_, err = b.c.Void(ctx, hold.ID)
			require.ErrorIs(t, err, twopc.ErrInProgress, "within the lost capture's lease")
			_, err = b.db.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: hold.ID}},
				bson.D{{Key: "$set", Value: bson.D{{Key: "captures.0.at", Value: time.Now().Add(-time.Hour)}}}})
			require.NoError(t, err)
			if op == "void" {
				got, err := b.c.Void(ctx, hold.ID)
				require.ErrorIs(t, err, twopc.ErrHoldCaptured, "its final capture committed")
				require.NotNil(t, got)
				assert.True(t, got.State.Committed(), "the Void ended the hold by its captures: %s", got.State)
				assert.EqualValues(t, 50, got.Captured)
			} else {
				_, err := b.c.Capture(ctx, hold.ID, 10)
				require.ErrorIs(t, err, twopc.ErrHoldCaptured, "its final capture committed")
			}
			require.NoError(t, b.c.Settle(ctx))
			assert.Equal(t, twopc.StateDone, b.txn(hold.ID).State, "ended by its captures")
			b.checkSettled(map[string]int64{"A": 1000, "B": 0})
			assert.EqualValues(t, 950, b.balance("A"))
			assert.EqualValues(t, 50, b.balance("B"))
		})
	}
}
