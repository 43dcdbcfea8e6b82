package twopc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestRefundByLegSellerOnly: a sale buyer −100, seller +67, fees +33, the
// seller and the fees holding only what the sale paid them. The seller's
// part only, 30, the fee kept: the buyer gets 30 back, the fees account is
// not a leg. A proportional refund of 20 after it takes in proportion to
// what each leg has left (seller 37, fees 33: 11 and 9, not the fees'
// catch-up to its share of 50), and the rest, 50, takes exactly what is
// left of every leg.
func TestRefundByLegSellerOnly(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 100, "seller": 0, "fees": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)

	part, err := b.c.RefundLegs(ctx, sale.ID, []twopc.Leg{{Account: "seller", Amount: 30}})
	require.NoError(t, err)
	assert.Equal(t, int64(30), part.Value)
	assert.Equal(t, sale.ID, part.RefundOf)
	assert.Equal(t, map[any]int64{"buyer": 30, "seller": -30}, refundLegs(part))
	assert.Equal(t, int64(70), refundable(t, b.c, sale.ID))

	prop, err := b.c.Refund(ctx, sale.ID, 20)
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"buyer": 20, "seller": -11, "fees": -9}, refundLegs(prop), "in proportion to what is left: 37 and 33")

	rest, err := b.c.Refund(ctx, sale.ID, 50)
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"buyer": 50, "seller": -26, "fees": -24}, refundLegs(rest))
	assert.Equal(t, []int64{100, 67, 33}, b.book(sale.ID).Returned)
	assert.Equal(t, []int64{100, 0, 0}, []int64{b.balance("buyer"), b.balance("seller"), b.balance("fees")})
	b.checkSettled(map[string]int64{"buyer": 100, "seller": 0, "fees": 0})
}

// TestRefundByLegPayers: a payout x −5, y −5 → s +10. The payer side,
// not named, is apportioned over what each payer leg has left (s 4: x 2,
// y 2; s 1: x 1, ties to the first); naming a payer past what its leg has
// left is ErrRefundExceeded with nothing written; naming it within takes
// the receiving side, s, alone; and a proportional refund of the rest
// takes what is left of each.
func TestRefundByLegPayers(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"x": 5, "y": 5, "s": 0})
	payout, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "x", Amount: -5}, {Account: "y", Amount: -5}, {Account: "s", Amount: 10}})
	require.NoError(t, err)

	first, err := b.c.RefundLegs(ctx, payout.ID, []twopc.Leg{{Account: "s", Amount: 4}})
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"x": 2, "y": 2, "s": -4}, refundLegs(first))
	second, err := b.c.RefundLegs(ctx, payout.ID, []twopc.Leg{{Account: "s", Amount: 1}})
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"x": 1, "s": -1}, refundLegs(second))

	seq := b.book(payout.ID).Seq
	_, err = b.c.RefundLegs(ctx, payout.ID, []twopc.Leg{{Account: "x", Amount: 3}})
	require.ErrorIs(t, err, twopc.ErrRefundExceeded, "x has 2 left")
	assert.Equal(t, seq, b.book(payout.ID).Seq, "nothing written")
	assert.Len(t, b.txns(), 3)

	third, err := b.c.RefundLegs(ctx, payout.ID, []twopc.Leg{{Account: "x", Amount: 2}})
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"x": 2, "s": -2}, refundLegs(third))
	last, err := b.c.Refund(ctx, payout.ID, 3)
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"y": 3, "s": -3}, refundLegs(last))
	assert.Equal(t, []int64{5, 5, 10}, b.book(payout.ID).Returned)
	assert.Equal(t, int64(0), refundable(t, b.c, payout.ID))
	b.checkSettled(map[string]int64{"x": 5, "y": 5, "s": 0})
}

// TestRefundByLegBothSides: naming legs of both sides chooses who gets
// what back; their sums must agree. A transfer of two legs is refunded by
// leg too.
func TestRefundByLegBothSides(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"x": 5, "y": 5, "s": 0, "A": 50, "B": 0})
	payout, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "x", Amount: -5}, {Account: "y", Amount: -5}, {Account: "s", Amount: 10}})
	require.NoError(t, err)
	got, err := b.c.RefundLegs(ctx, payout.ID, []twopc.Leg{{Account: "s", Amount: 4}, {Account: "y", Amount: 4}, {Account: "x", Amount: 0}})
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"y": 4, "s": -4}, refundLegs(got))
	_, err = b.c.RefundLegs(ctx, payout.ID, []twopc.Leg{{Account: "s", Amount: 4}, {Account: "x", Amount: 3}})
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)

	plain, err := b.c.Transfer(ctx, "A", "B", 50)
	require.NoError(t, err)
	back, err := b.c.RefundLegs(ctx, plain.ID, []twopc.Leg{{Account: "B", Amount: 20}})
	require.NoError(t, err)
	assert.Equal(t, int64(20), back.Value)
	assert.Equal(t, []int64{20, 30}, []int64{b.balance("A"), b.balance("B")})
	assert.Equal(t, int64(30), refundable(t, b.c, plain.ID))
}

// TestRefundByLegBadInput: amounts RefundLegs refuses, each with nothing
// written (no book, no refund).
func TestRefundByLegBadInput(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 100, "seller": 0, "fees": 0, "other": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		legs []twopc.Leg
		want error
	}{
		"negative":         {[]twopc.Leg{{Account: "seller", Amount: -5}}, twopc.ErrInvalidTransfer},
		"not a leg":        {[]twopc.Leg{{Account: "other", Amount: 5}}, twopc.ErrInvalidTransfer},
		"another ledger":   {[]twopc.Leg{{Ledger: "eu", Account: "seller", Amount: 5}}, twopc.ErrInvalidTransfer},
		"named twice":      {[]twopc.Leg{{Account: "seller", Amount: 5}, {Account: "seller", Amount: 5}}, twopc.ErrInvalidTransfer},
		"sum zero":         {[]twopc.Leg{{Account: "seller", Amount: 0}, {Account: "fees", Amount: 0}}, twopc.ErrInvalidTransfer},
		"none":             {nil, twopc.ErrInvalidTransfer},
		"sides differ":     {[]twopc.Leg{{Account: "seller", Amount: 5}, {Account: "buyer", Amount: 6}}, twopc.ErrInvalidTransfer},
		"another asset":    {[]twopc.Leg{{Account: "seller", Amount: 5, Asset: "EUR"}}, twopc.ErrInvalidTransfer},
		"past what it got": {[]twopc.Leg{{Account: "fees", Amount: 34}}, twopc.ErrRefundExceeded},
	} {
		_, err := b.c.RefundLegs(ctx, sale.ID, tc.legs)
		assert.ErrorIs(t, err, tc.want, name)
	}
	n, err := b.db.Collection("transactions_refunds").CountDocuments(ctx, map[string]any{})
	require.NoError(t, err)
	assert.Zero(t, n, "no book written")
	assert.Len(t, b.txns(), 1)

	// Past what a leg has left, once refunds took from it.
	_, err = b.c.RefundLegs(ctx, sale.ID, []twopc.Leg{{Account: "fees", Amount: 30}})
	require.NoError(t, err)
	seq := b.book(sale.ID).Seq
	_, err = b.c.RefundLegs(ctx, sale.ID, []twopc.Leg{{Account: "fees", Amount: 4}})
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)
	assert.Equal(t, seq, b.book(sale.ID).Seq)
	assert.Equal(t, int64(70), refundable(t, b.c, sale.ID))
}

// TestRefundByLegRepeat: a repeat of RefundLegs under its key returns the
// refund made, with its own legs, and reserves nothing again; the key with
// other amounts of the legs is ErrKeyConflict.
func TestRefundByLegRepeat(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 100, "seller": 0, "fees": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -100}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)
	asked := []twopc.Leg{{Account: "seller", Amount: 30}}
	first, err := b.c.RefundLegs(ctx, sale.ID, asked, twopc.WithKey("order/1/seller"))
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 10)
	require.NoError(t, err)
	again, err := b.c.RefundLegs(ctx, sale.ID, asked, twopc.WithKey("order/1/seller"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	assert.Equal(t, refundLegs(first), refundLegs(again))
	_, err = b.c.RefundLegs(ctx, sale.ID, []twopc.Leg{{Account: "seller", Amount: 20}, {Account: "fees", Amount: 10}}, twopc.WithKey("order/1/seller"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict)
	assert.Equal(t, int64(60), refundable(t, b.c, sale.ID))
	assert.Len(t, b.book(sale.ID).Refunds, 2)
}

// TestRefundByLegRepeatFromItsEntry: a keyed refund by leg whose call
// failed with its reservation in the book (its reply came after the
// call's context ended) and no transaction: its repeat takes the legs of
// its own entry, never computed again, though a refund since changed what
// the payers have left; the key with other amounts of the legs is
// ErrKeyConflict, and reserves nothing.
func TestRefundByLegRepeatFromItsEntry(t *testing.T) {
	ctx := testCtx(t)
	b := newFaultBank(t, twopc.WithFrozenMark(), twopc.WithSyncSettle())
	b.open(map[string]int64{"x": 50, "y": 50, "seller": 0, "fees": 0})
	sale, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "x", Amount: -50}, {Account: "y", Amount: -50}, {Account: "seller", Amount: 67}, {Account: "fees", Amount: 33}})
	require.NoError(t, err)
	_, err = b.c.Refund(ctx, sale.ID, 10) // the book exists: a reservation is an update
	require.NoError(t, err)
	require.NoError(t, b.server.Faults.Add(ctx, mongotest.Fault{Command: "update", Kind: mongotest.Delay, Delay: 2 * time.Second, Count: 1}))
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	asked := []twopc.Leg{{Account: "seller", Amount: 31}}
	_, err = b.c.RefundLegs(short, sale.ID, asked, twopc.WithKey("item/3"))
	cancel()
	require.Error(t, err)
	book := b.book(sale.ID)
	require.Len(t, book.Refunds, 2, "reserved, with no transaction")
	entry := book.Refunds[1].Legs
	_, err = b.c.RefundLegs(ctx, sale.ID, []twopc.Leg{{Account: "x", Amount: 3}}) // the payers' left moves
	require.NoError(t, err)

	_, err = b.c.RefundLegs(ctx, sale.ID, []twopc.Leg{{Account: "seller", Amount: 21}, {Account: "fees", Amount: 10}}, twopc.WithKey("item/3"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict)
	again, err := b.c.RefundLegs(ctx, sale.ID, asked, twopc.WithKey("item/3"))
	require.NoError(t, err)
	assert.Equal(t, map[any]int64{"x": entry[0], "y": entry[1], "seller": -31}, refundLegs(again), "its entry's legs")
	assert.Len(t, b.book(sale.ID).Refunds, 3)
	assert.Equal(t, int64(100-10-31-3), refundable(t, b.c, sale.ID))
}
