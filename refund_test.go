package twopc_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// refundable is what is left to refund of id.
func refundable(t *testing.T, c *twopc.Coordinator, id bson.ObjectID) int64 {
	t.Helper()
	left, err := c.Refundable(testCtx(t), id)
	require.NoError(t, err)
	return left
}

// TestRefundInParts: a transfer refunded in parts, each its own transfer
// and entry; a refund past what is left is ErrRefundExceeded and writes
// nothing, and so is a Reverse after a partial refund.
func TestRefundInParts(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle(), twopc.WithStatementHorizon(0))
	b.open(map[string]int64{"A": 100, "B": 0})
	sale, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	assert.Equal(t, int64(100), refundable(t, b.c, sale.ID))

	first, err := b.c.Refund(ctx, sale.ID, 30, twopc.WithMetadata(map[string]string{"reason": "one broken cup"}))
	require.NoError(t, err)
	assert.Equal(t, sale.ID, first.RefundOf)
	assert.Equal(t, "B", first.Source)
	assert.Equal(t, int64(30), b.balance("A"))
	assert.Equal(t, int64(70), refundable(t, b.c, sale.ID))

	before := len(b.txns())
	refused, err := b.c.Refund(ctx, sale.ID, 80)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)
	assert.Nil(t, refused)
	_, err = b.c.Reverse(ctx, sale.ID)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded, "reversed whole after a partial refund")
	assert.Len(t, b.txns(), before, "nothing written")
	assert.Equal(t, int64(30), b.balance("A"))

	_, err = b.c.Refund(ctx, sale.ID, 70)
	require.NoError(t, err)
	assert.Zero(t, refundable(t, b.c, sale.ID))
	_, err = b.c.Refund(ctx, sale.ID, 1)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})

	var amounts []int64
	for _, e := range fullStatement(t, b.c, "A", false) {
		amounts = append(amounts, e.Amount)
	}
	assert.Equal(t, []int64{-100, 30, 70}, amounts, "each refund its own entry")

	for _, bad := range []int64{0, -5} {
		_, err := b.c.Refund(ctx, sale.ID, bad)
		assert.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	}
	_, err = b.c.Refund(ctx, bson.NewObjectID(), 1)
	assert.ErrorIs(t, err, twopc.ErrTxnNotFound)
}

// TestRefundsAtOnce: refunds of one transfer from many goroutines and two
// coordinators at once never return more than it moved.
func TestRefundsAtOnce(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	other := b.coordinator(twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 500})
	sale, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	made, exceeded := 0, 0
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.c
			if i%2 == 1 {
				c = other
			}
			_, err := c.Refund(ctx, sale.ID, 10)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				made++
			case assert.ErrorIs(t, err, twopc.ErrRefundExceeded):
				exceeded++
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 10, made)
	assert.Equal(t, 14, exceeded)
	require.NoError(t, other.Settle(ctx))
	b.checkSettled(map[string]int64{"A": 100, "B": 500})
	assert.Equal(t, int64(100), b.balance("A"), "refunded 100, no more")
}

// TestRefundDeliveredAgain: every write of refunds (made, refused and
// given back, exceeded) delivered again afterwards, in order, changes no
// balance and no refund book.
func TestRefundDeliveredAgain(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"A": 100, "B": 0, "C": 0})
	sale, err := c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 40)
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "B", "C", 60) // B spends the rest
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 20)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds, "refused, its reservation given back")
	assert.Equal(t, int64(60), refundable(t, c, sale.ID))
	_, err = c.Transfer(ctx, "C", "B", 60)
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 60)
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 1)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)

	balances := b.accountStates()
	var book bson.Raw
	require.NoError(t, b.db.Collection("transactions_refunds").FindOne(ctx, bson.D{{Key: "_id", Value: sale.ID}}).Decode(&book))
	resendAll(t, b.db, rec.recorded())
	b.recoverAll()
	assert.Equal(t, balances, b.accountStates(), "a write delivered again moved money")
	var again bson.Raw
	require.NoError(t, b.db.Collection("transactions_refunds").FindOne(ctx, bson.D{{Key: "_id", Value: sale.ID}}).Decode(&again))
	assert.Equal(t, book.Lookup("left"), again.Lookup("left"), "what is left to refund")
	assert.Zero(t, refundable(t, c, sale.ID), "canceled refunds' reservations given back again")
	assert.Equal(t, int64(100), b.balance("A"))
}

// TestRefundRolledBackGivesBack: a refund whose process died before its
// legs applied is rolled back by recovery, which gives its reservation
// back; one whose insert never reached the log is canceled (a
// placeholder) and given back by the next call that needs the room once
// its lease ran out.
func TestRefundRolledBackGivesBack(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	sale, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)

	dying := b.coordinator(twopc.WithStepHook(crashAt(twopc.StepApply)))
	_, err = dying.Refund(ctx, sale.ID, 70)
	require.ErrorIs(t, err, errCrash)
	assert.Equal(t, int64(30), refundable(t, b.c, sale.ID), "reserved while in flight")
	b.backdateAll(time.Hour)
	rep := b.recoverAll()
	assert.Equal(t, 1, rep.RolledBack)
	assert.Equal(t, int64(100), refundable(t, b.c, sale.ID), "given back by recovery's rollback")

	lost := b.coordinator(twopc.WithStepHook(crashAt(twopc.StepInsert)))
	_, err = lost.Refund(ctx, sale.ID, 80, twopc.WithKey("refund-80"))
	require.ErrorIs(t, err, errCrash, "%v", err)
	_, err = b.c.Refund(ctx, sale.ID, 50)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded, "the lost one's reservation stands within its lease")
	_, err = b.db.Collection("transactions_refunds").UpdateOne(ctx, bson.D{{Key: "_id", Value: sale.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "refunds.0.at", Value: time.Now().Add(-time.Hour)}}}})
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 50)
	require.NoError(t, err, "the lost one canceled and given back")
	placeholder, err := b.c.GetByKey(ctx, "refund-80")
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, placeholder.State)
	b.checkSettled(map[string]int64{"A": 100, "B": 0})
	assert.Equal(t, int64(50), b.balance("A"))
}

// TestRefundLegs: a transfer of legs refunded in part, in proportion
// (the refunds' apportionment, see TestUnitApportionShares), so the legs
// still sum to zero.
func TestRefundLegs(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 100, "seller": 0, "fees": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)
	refund, err := b.c.Refund(ctx, sale.ID, 50)
	require.NoError(t, err)
	got := map[any]int64{}
	for _, l := range refund.Legs {
		got[l.Account] = l.Amount
	}
	assert.Equal(t, map[any]int64{"buyer": 50, "seller": -34, "fees": -16}, got)
	b.checkSettled(map[string]int64{"buyer": 100, "seller": 0, "fees": 0})
	assert.Equal(t, int64(50), b.balance("buyer"))
	assert.Equal(t, int64(33), b.balance("seller"))
	assert.Equal(t, int64(17), b.balance("fees"))
	assert.Equal(t, int64(50), refundable(t, b.c, sale.ID))
}

// TestRefundNotRefundable: Refund, Reverse and Refundable of a transaction
// that moved nothing that can be given back (pending, canceling, canceled,
// a placeholder, a hold held or voided with nothing captured) and of a
// capture of a hold (its hold is refunded as one order) are
// ErrNotRefundable, with advice that fits its state, and write nothing:
// no reservation in the refund book, no transaction, no account touched.
// A hold captured, or voided after a capture, is refundable.
func TestRefundNotRefundable(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1000, "B": 0})
	id := func(txn *twopc.Txn, err error) bson.ObjectID {
		t.Helper()
		require.NotNil(t, txn, "%v", err)
		return txn.ID
	}
	pending := id(b.coordinator(twopc.WithStepHook(crashAt(twopc.StepCommit))).Transfer(ctx, "A", "B", 10))
	pendingHold := id(b.coordinator(twopc.WithStepHook(crashAt(twopc.StepCommit))).Hold(ctx, "A", "B", 10))
	var canceling bson.ObjectID
	stuck := b.coordinator(twopc.WithStepHook(func(_ context.Context, s twopc.Step, tx *twopc.Txn) error {
		if s == twopc.StepCanceled {
			canceling = tx.ID
			return errCrash
		}
		return nil
	}))
	_, err := stuck.Transfer(ctx, "A", "B", 5000)
	require.Error(t, err)
	canceled := id(b.c.Transfer(ctx, "A", "B", 5000))
	placeholder := id(twopc.NewCanceler(b.c).Cancel(ctx, bson.NewObjectID()))
	held := id(b.c.Hold(ctx, "A", "B", 10))
	voided := id(b.c.Hold(ctx, "A", "B", 10))
	_ = id(b.c.Void(ctx, voided))
	captureThenVoid := id(b.c.Hold(ctx, "A", "B", 10))
	_ = id(b.c.Capture(ctx, captureThenVoid, 4, twopc.WithFinalCapture(false)))
	_ = id(b.c.Void(ctx, captureThenVoid))
	captured := id(b.c.Hold(ctx, "A", "B", 10))
	capture := id(b.c.Capture(ctx, captured, 6))
	for txn, state := range map[bson.ObjectID]twopc.State{pending: twopc.StatePending, pendingHold: twopc.StatePending,
		canceling: twopc.StateCanceling, canceled: twopc.StateCanceled, held: twopc.StateHeld, voided: twopc.StateCanceled,
		captureThenVoid: twopc.StateCanceled, captured: twopc.StateDone} {
		require.Equal(t, state, b.txn(txn).State)
	}

	refunds := func() int64 {
		n, err := b.db.Collection("transactions_refunds").CountDocuments(ctx, bson.D{})
		require.NoError(t, err)
		return n
	}
	accounts, txns, books := b.accountStates(), len(b.txns()), refunds()
	for _, c := range []struct {
		name   string
		id     bson.ObjectID
		advice string
	}{
		{"pending", pending, "repeat its call with its key"},
		{"a hold being made", pendingHold, "once it is held, release it with Void"},
		{"canceling", canceling, "it moved nothing"},
		{"canceled", canceled, "it moved nothing"},
		{"a placeholder", placeholder, "it moved nothing"},
		{"held", held, "Void"},
		{"voided", voided, "a hold, canceled (voided): it moved nothing"},
		{"a capture of a hold", capture, "the hold instead"},
	} {
		_, err := b.c.Refund(ctx, c.id, 1)
		assert.ErrorIs(t, err, twopc.ErrNotRefundable, "refund of %s", c.name)
		assert.ErrorContains(t, err, c.advice, "refund of %s", c.name)
		assert.NotContains(t, fmt.Sprint(err), "cancel it instead", "refund of %s", c.name)
		_, err = b.c.Reverse(ctx, c.id)
		assert.ErrorIs(t, err, twopc.ErrNotRefundable, "reverse of %s", c.name)
		assert.ErrorContains(t, err, strings.ReplaceAll(c.advice, "refund", "reverse"), "reverse of %s", c.name)
		_, err = b.c.Refundable(ctx, c.id)
		assert.ErrorIs(t, err, twopc.ErrNotRefundable, "refundable of %s", c.name)
		assert.NotContains(t, fmt.Sprint(err), "refundable them", "refundable of %s", c.name)
	}
	for _, hold := range []bson.ObjectID{captureThenVoid, captured} {
		_, err := b.c.Refundable(ctx, hold)
		assert.NoError(t, err, "a hold whose captures took something")
	}
	assert.Equal(t, accounts, b.accountStates(), "no account touched")
	assert.Len(t, b.txns(), txns, "no transaction written")
	assert.Equal(t, books, refunds(), "no refund book written")
}
