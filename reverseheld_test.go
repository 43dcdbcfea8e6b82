package twopc_test

// Reverse of a hold refunded as one order (221ab44), whose base grows as
// its captures commit: refused while the hold is held, and its repeat
// answers the refund its key made, never computed again (review 3).

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// TestReverseExchangeHoldWhileHeldThenEnded: an exchange hold (100 USD for
// 92 EUR) is captured in half and left held. Reverse is ErrNotRefundable
// and reserves nothing: before, it reserved the book's whole base as it
// stood (96), and once a second capture ended the hold (base 192) no call
// returned the second half (Reverse ErrRefundExceeded or ErrKeyConflict,
// Refund and RefundLegs ErrInvalidTransfer). Once the second capture ends
// the hold, Reverse returns both halves, every leg whole; repeated, it
// answers that reversal; under another key, ErrRefundExceeded.
func TestReverseExchangeHoldWhileHeldThenEnded(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.openAsset("USD/2", map[string]int64{"alice-usd": 100, "desk-usd": 1000})
	b.openAsset("EUR/2", map[string]int64{"alice-eur": 200, "desk-eur": 500})
	h, err := b.c.HoldLegs(ctx, []twopc.Leg{
		{Account: "alice-usd", Amount: -100, Asset: "USD/2"}, {Account: "desk-usd", Amount: 100, Asset: "USD/2"},
		{Account: "desk-eur", Amount: -92, Asset: "EUR/2"}, {Account: "alice-eur", Amount: 92, Asset: "EUR/2"},
	})
	require.NoError(t, err)
	_, err = b.c.CaptureLegs(ctx, h.ID, []int64{-50, 50, -46, 46}, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	_, err = b.c.Reverse(ctx, h.ID)
	require.ErrorIs(t, err, twopc.ErrNotRefundable, "a hold still held is not reversed: more may be captured")
	_, err = b.c.Reverse(ctx, h.ID, twopc.WithKey("held-reverse"))
	require.ErrorIs(t, err, twopc.ErrNotRefundable, "keyed too")
	_, err = b.c.CaptureLegs(ctx, h.ID, []int64{-50, 50, -46, 46})
	require.NoError(t, err, "the second half captured, ending the hold")
	assert.Equal(t, int64(0), b.balance("alice-usd"))

	rev, err := b.c.Reverse(ctx, h.ID)
	require.NoError(t, err, "both halves reversed once the hold ended")
	assert.True(t, rev.State.Committed(), "the reversal committed: %s", rev.State)
	assert.Equal(t, int64(100), b.balance("alice-usd"))
	assert.Equal(t, int64(1000), b.balance("desk-usd"))
	assert.Equal(t, int64(200), b.balance("alice-eur"))
	assert.Equal(t, int64(500), b.balance("desk-eur"))
	again, err := b.c.Reverse(ctx, h.ID)
	require.NoError(t, err, "Reverse repeated, unkeyed")
	assert.Equal(t, rev.ID, again.ID)
	_, err = b.c.Reverse(ctx, h.ID, twopc.WithKey("second-reverse"))
	assert.ErrorIs(t, err, twopc.ErrRefundExceeded, "reversed once, whatever keys ask")
	assert.Equal(t, int64(100), b.balance("alice-usd"))
}

// TestReverseRepeatOfGrowingHold: a hold of 100 captured 30, left held:
// Reverse is ErrNotRefundable, and Refund of what was captured stays
// allowed. A refund of 30 made under Reverse's derived key (reverse:<id>)
// while the hold is held, and the hold then ended by a capture of 50:
// Reverse repeats that key and answers the refund it made, as it stands.
// Before, the repeat computed the whole anew from the order's new base
// (80) and was ErrKeyConflict against the library's own key. Another
// hold ended the same way and reversed is repeated as made.
func TestReverseRepeatOfGrowingHold(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"buyer": 1000, "shop": 0})
	h, err := b.c.Hold(ctx, "buyer", "shop", 100)
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, h.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	before := len(b.txns())
	_, err = b.c.Reverse(ctx, h.ID)
	require.ErrorIs(t, err, twopc.ErrNotRefundable, "a hold still held is not reversed")
	assert.Len(t, b.txns(), before, "nothing written")
	left, err := b.c.Refundable(ctx, h.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(30), left, "the refused Reverse reserved nothing")
	first, err := b.c.Refund(ctx, h.ID, 30, twopc.WithKey("reverse:"+h.ID.Hex()))
	require.NoError(t, err, "a held hold's captures refunded in part")
	_, err = b.c.Capture(ctx, h.ID, 50)
	require.NoError(t, err)
	again, err := b.c.Reverse(ctx, h.ID)
	require.NoError(t, err, "Reverse, whose key made a refund: answered as it stands")
	assert.Equal(t, first.ID, again.ID)
	assert.Equal(t, int64(30), again.Value)
	assert.Equal(t, int64(1000-80+30), b.balance("buyer"))

	h2, err := b.c.Hold(ctx, "buyer", "shop", 100)
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, h2.ID, 30, twopc.WithFinalCapture(false))
	require.NoError(t, err)
	_, err = b.c.Capture(ctx, h2.ID, 50)
	require.NoError(t, err)
	rev, err := b.c.Reverse(ctx, h2.ID, twopc.WithKey("reverse-h2"))
	require.NoError(t, err)
	assert.Equal(t, int64(80), rev.Value, "every capture reversed")
	rep, err := b.c.Reverse(ctx, h2.ID, twopc.WithKey("reverse-h2"))
	require.NoError(t, err, "a keyed repeat")
	assert.Equal(t, rev.ID, rep.ID)
	_, err = b.c.Reverse(ctx, h2.ID, twopc.WithKey("reverse-h2"), twopc.WithMetadata(map[string]string{"a": "b"}))
	assert.ErrorIs(t, err, twopc.ErrKeyConflict, "a repeat with other metadata")
}
