package twopc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// refundLegs is a refund's legs, by account.
func refundLegs(txn *twopc.Txn) map[any]int64 {
	out := map[any]int64{}
	for _, l := range txn.Legs {
		out[l.Account] = l.Amount
	}
	return out
}

// bookDoc is a refund book as stored.
type bookDoc struct {
	Seq      int64   `bson:"seq"`
	Left     int64   `bson:"left"`
	Returned []int64 `bson:"returned"`
	Refunds  []struct {
		ID     bson.ObjectID `bson:"id"`
		Amount int64         `bson:"amount"`
		Legs   []int64       `bson:"legs"`
	} `bson:"refunds"`
}

// book reads the refund book of id.
func (b *bank) book(id bson.ObjectID) bookDoc {
	b.t.Helper()
	var d bookDoc
	require.NoError(b.t, b.db.Collection("transactions_refunds").FindOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}}).Decode(&d))
	return d
}

// TestRefundLegsExactInParts: the cases. A sale buyer −100,
// seller +67, fees +33, the seller and the fees holding only what the
// sale paid them, refunded 50 and 50: [seller −34, fees −16] then
// [seller −33, fees −17], so each returns exactly what it received (the
// second half was refused for funds before: it asked the seller 34 of
// the 33 left). A payout x −5, y −5 → s +10 refunded by ten refunds of
// 1: x and y get 5 each. The book's per-leg sums are each entry's legs
// added up.
func TestRefundLegsExactInParts(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 100, "seller": 0, "fees": 0, "x": 5, "y": 5, "s": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)
	first, err := b.c.Refund(ctx, sale.ID, 50)
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"buyer": 50, "seller": -34, "fees": -16}, refundLegs(first))
	second, err := b.c.Refund(ctx, sale.ID, 50)
	require.NoError(t, err, "the seller holds the 33 it has left to return")
	assert.Equal(t, map[any]int64{"buyer": 50, "seller": -33, "fees": -17}, refundLegs(second))
	assert.Equal(t, []int64{100, 0, 0}, []int64{b.balance("buyer"), b.balance("seller"), b.balance("fees")})
	assert.Zero(t, refundable(t, b.c, sale.ID))
	book := b.book(sale.ID)
	assert.Equal(t, []int64{100, 67, 33}, book.Returned)
	assert.Equal(t, [][]int64{{50, 34, 16}, {50, 33, 17}}, [][]int64{book.Refunds[0].Legs, book.Refunds[1].Legs})

	payout, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "x", Amount: -5}, {Account: "y", Amount: -5}, {Account: "s", Amount: 10}})
	require.NoError(t, err)
	for range 10 {
		_, err := b.c.Refund(ctx, payout.ID, 1)
		require.NoError(t, err)
	}
	assert.Equal(t, []int64{5, 5, 0}, []int64{b.balance("x"), b.balance("y"), b.balance("s")})
	b.checkSettled(map[string]int64{"buyer": 100, "seller": 0, "fees": 0, "x": 5, "y": 5, "s": 0})
}

// TestRefundLegsRefusedAmongParts: a refund refused for funds among a
// sequence (the seller spent its money) is canceled, and its release gives
// back exactly its own legs: the book's per-leg sums are as before it,
// Refundable is unchanged, and once the seller has the money again the
// rest is refunded to exactly zero on every leg.
func TestRefundLegsRefusedAmongParts(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "seller": 0, "fees": 0, "other": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -1000}, {Account: "seller", Amount: 777}, {Account: "fees", Amount: 223}})
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 101)
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 333, twopc.WithKey("r-2"))
	require.NoError(t, err)
	before := b.book(sale.ID)
	left := refundable(t, b.c, sale.ID)

	_, err = b.c.Transfer(ctx, "seller", "other", b.balance("seller")) // the seller spent it
	require.NoError(t, err)
	refused, err := b.c.Refund(ctx, sale.ID, 250, twopc.WithKey("r-3"))
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	assert.Equal(t, twopc.StateCanceled, refused.State)
	after := b.book(sale.ID)
	assert.Equal(t, before.Returned, after.Returned, "its release gave back exactly its legs")
	assert.Equal(t, before.Left, after.Left)
	assert.Len(t, after.Refunds, 2)
	assert.Equal(t, left, refundable(t, b.c, sale.ID), "still refundable")

	_, err = b.c.Transfer(ctx, "other", "seller", b.balance("other"))
	require.NoError(t, err)
	for _, part := range []int64{7, 1, 250} {
		_, err := b.c.Refund(ctx, sale.ID, part)
		require.NoError(t, err)
	}
	_, err = b.c.Refund(ctx, sale.ID, refundable(t, b.c, sale.ID))
	require.NoError(t, err)
	assert.Equal(t, []int64{1000, 777, 223}, b.book(sale.ID).Returned)
	assert.Equal(t, []int64{1000, 0, 0}, []int64{b.balance("buyer"), b.balance("seller"), b.balance("fees")})
	b.checkSettled(map[string]int64{"buyer": 1000, "seller": 0, "fees": 0, "other": 0})
}

// TestRefundLegsRepeatTakesItsOwnLegs: a keyed refund repeated after
// another refund of the transfer returns the refund it made, whose legs
// were its share of the total then, not what a first refund of its amount
// takes: legs are never computed again for a repeat (that would be
// ErrKeyConflict).
func TestRefundLegsRepeatTakesItsOwnLegs(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 100, "seller": 0, "fees": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 25, twopc.WithKey("k-1"))
	require.NoError(t, err)
	made, err := b.c.Refund(ctx, sale.ID, 50, twopc.WithKey("k-2"))
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"buyer": 50, "seller": -33, "fees": -17}, refundLegs(made), "its share of 75 less that of 25")
	_, err = b.c.Refund(ctx, sale.ID, 10)
	require.NoError(t, err)
	again, err := b.c.Refund(ctx, sale.ID, 50, twopc.WithKey("k-2"))
	require.NoError(t, err)
	assert.Equal(t, made.ID, again.ID)
	_, err = b.c.Refund(ctx, sale.ID, 40, twopc.WithKey("k-2"))
	assert.ErrorIs(t, err, twopc.ErrKeyConflict, "another amount under the key")
	assert.Equal(t, int64(15), refundable(t, b.c, sale.ID))
	b.checkSettled(map[string]int64{"buyer": 100, "seller": 0, "fees": 0})
}

// TestRefundLegsAtOnce: 16 refunds of a transfer of legs at once from two
// coordinators, which together refund all of it: every one is made (the
// compare-and-set on the book is tried again when another write came
// first), and every leg returns exactly what it received.
func TestRefundLegsAtOnce(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	other := b.coordinator(twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1600, "seller": 0, "fees": 0, "tax": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -1600}, {Account: "seller", Amount: 1111}, {Account: "fees", Amount: 333}, {Account: "tax", Amount: 156}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.c
			if i%2 == 1 {
				c = other
			}
			_, errs[i] = c.Refund(ctx, sale.ID, int64(50+(i%4)*25), twopc.WithKey(fmt.Sprintf("at-once-%d", i)))
		}()
	}
	wg.Wait()
	var refunded int64
	for i, err := range errs {
		require.NoError(t, err, "refund %d", i)
		refunded += int64(50 + (i%4)*25)
	}
	require.NoError(t, other.Settle(ctx))
	rest := 1600 - refunded
	_, err = b.c.Refund(ctx, sale.ID, rest)
	require.NoError(t, err)
	book := b.book(sale.ID)
	assert.Equal(t, []int64{1600, 1111, 333, 156}, book.Returned)
	assert.Len(t, book.Refunds, 17)
	assert.Equal(t, []int64{1600, 0, 0, 0}, []int64{b.balance("buyer"), b.balance("seller"), b.balance("fees"), b.balance("tax")})
	b.checkSettled(map[string]int64{"buyer": 1600, "seller": 0, "fees": 0, "tax": 0})
}

// TestRefundLegsDeliveredAgain: every write of refunds of a transfer of
// legs (the book's insert, its compare-and-sets, a refused refund's
// release, the refunds' own writes) delivered again late, after all of
// them, changes no balance and no part of the book: each book write names
// the book's sequence number as it read it, which has moved on.
func TestRefundLegsDeliveredAgain(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"buyer": 100, "seller": 0, "fees": 0, "other": 0})
	sale, err := c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 30)
	require.NoError(t, err)
	_, err = c.Transfer(ctx, "seller", "other", b.balance("seller"))
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 40)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	_, err = c.Transfer(ctx, "other", "seller", b.balance("other"))
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 40)
	require.NoError(t, err)
	_, err = c.Refund(ctx, sale.ID, 29)
	require.NoError(t, err)

	balances, book := b.accountStates(), b.book(sale.ID)
	resendAll(t, b.db, rec.recorded())
	b.recoverAll()
	assert.Equal(t, balances, b.accountStates(), "a write delivered again moved money")
	assert.Equal(t, book, b.book(sale.ID), "a write delivered again changed the book")
	_, err = c.Refund(ctx, sale.ID, 1)
	require.NoError(t, err)
	assert.Equal(t, []int64{100, 67, 33}, b.book(sale.ID).Returned)
	assert.Equal(t, []int64{100, 0, 0}, []int64{b.balance("buyer"), b.balance("seller"), b.balance("fees")})
}

// TestRefundBookWriteRetried: a reservation refused once by a transient
// error (a step-down) is tried again, not the caller's error.
func TestRefundBookWriteRetried(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	sale, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 10)
	require.NoError(t, err)
	fired := b.failNext("transactions_refunds")
	_, err = b.c.Refund(ctx, sale.ID, 20)
	require.NoError(t, err)
	fired()
	assert.Equal(t, int64(70), refundable(t, b.c, sale.ID))
	assert.Equal(t, int64(30), b.balance("A"))
}
