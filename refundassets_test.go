package twopc_test

// A transfer of several assets (an exchange) under a whole-or-nothing
// refund book: reversed once, whatever keys ask (issue 48, item 4).

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// exchange opens the accounts of an exchange of 100 USD for 92 EUR and
// makes it: alice's dollars to the desk, the desk's euros to alice. Both
// hold more than the exchange, so a second reversal would find the funds.
func exchange(t *testing.T, b *bank) *twopc.Txn {
	t.Helper()
	b.openAsset("USD/2", map[string]int64{"alice-usd": 100, "desk-usd": 1000})
	b.openAsset("EUR/2", map[string]int64{"alice-eur": 200, "desk-eur": 500})
	fx, err := b.c.TransferLegs(testCtx(t), []twopc.Leg{
		{Account: "alice-usd", Amount: -100, Asset: "USD/2"}, {Account: "desk-usd", Amount: 100, Asset: "USD/2"},
		{Account: "desk-eur", Amount: -92, Asset: "EUR/2"}, {Account: "alice-eur", Amount: 92, Asset: "EUR/2"},
	})
	require.NoError(t, err)
	return fx
}

// TestReverseExchangeOnce: an exchange of 100 USD for 92 EUR reversed
// under two caller keys, then unkeyed, moves back once: the second and
// third are ErrRefundExceeded and write nothing; a repeat under the first
// key returns the reversal made. Written first: the exchange had no book
// and was undone twice.
func TestReverseExchangeOnce(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	fx := exchange(t, b)
	opening := map[string]int64{"alice-usd": 100, "desk-usd": 1000, "alice-eur": 200, "desk-eur": 500}

	first, err := b.c.Reverse(ctx, fx.ID, twopc.WithKey("req-3"))
	require.NoError(t, err)
	assert.Equal(t, fx.ID, first.RefundOf)
	before := len(b.txns())
	for _, opts := range [][]twopc.TransferOption{{twopc.WithKey("req-4")}, nil} {
		again, err := b.c.Reverse(ctx, fx.ID, opts...)
		require.ErrorIs(t, err, twopc.ErrRefundExceeded, "a second reversal, %v", opts)
		assert.Nil(t, again)
	}
	assert.Len(t, b.txns(), before, "nothing written by the refused reversals")
	repeat, err := b.c.Reverse(ctx, fx.ID, twopc.WithKey("req-3"))
	require.NoError(t, err, "a repeat under the first key")
	assert.Equal(t, first.ID, repeat.ID)

	b.checkSettled(opening)
	for id, bal := range opening {
		assert.Equal(t, bal, b.balance(id), "balance of %s: moved back once", id)
	}
	// Partial refunds of an exchange are not supported: whole only.
	_, err = b.c.Refund(ctx, fx.ID, 10)
	assert.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	_, err = b.c.Refundable(ctx, fx.ID)
	assert.ErrorIs(t, err, twopc.ErrInvalidTransfer)
}

// TestReverseExchangeCanceledThenAgain: a reversal of an exchange refused
// for funds (the desk spent the dollars) gives its reservation back, so a
// later Reverse, once the desk can cover it, moves it back, once.
func TestReverseExchangeCanceledThenAgain(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	fx := exchange(t, b)
	require.NoError(t, b.c.OpenAccount(ctx, "elsewhere", 0, twopc.AccountAsset("USD/2")))
	spent, err := b.c.Transfer(ctx, "desk-usd", "elsewhere", 1100)
	require.NoError(t, err)

	_, err = b.c.Reverse(ctx, fx.ID, twopc.WithKey("req-1"))
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	_, err = b.c.Reverse(ctx, spent.ID)
	require.NoError(t, err)
	second, err := b.c.Reverse(ctx, fx.ID, twopc.WithKey("req-2"))
	require.NoError(t, err, "the canceled reversal's reservation was given back")
	assert.True(t, second.State.Committed(), "%s", second.State)
	_, err = b.c.Reverse(ctx, fx.ID)
	require.ErrorIs(t, err, twopc.ErrRefundExceeded)

	var book struct {
		Left     int64   `bson:"left"`
		Returned []int64 `bson:"returned"`
	}
	require.NoError(t, b.db.Collection("transactions_refunds").FindOne(ctx, bson.D{{Key: "_id", Value: fx.ID}}).Decode(&book))
	assert.Zero(t, book.Left)
	assert.Equal(t, []int64{100, 100, 92, 92}, book.Returned, "every leg returned whole")
	b.checkSettled(map[string]int64{"alice-usd": 100, "desk-usd": 1000, "alice-eur": 200, "desk-eur": 500, "elsewhere": 0})
	assert.Equal(t, int64(100), b.balance("alice-usd"))
	assert.Equal(t, int64(500), b.balance("desk-eur"))
}
