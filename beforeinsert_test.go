package twopc_test

// What a call can know before its insert is checked before it, and leaves
// its key free: the accounts' assets (a leg naming none takes its
// account's) and WithMaxAmount's ceiling.

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// openAsset opens accounts in b's default ledger, each of asset with its
// balance.
func (b *bank) openAsset(asset string, balances map[string]int64) {
	b.t.Helper()
	for id, bal := range balances {
		require.NoError(b.t, b.c.OpenAccount(testCtx(b.t), id, bal, twopc.AccountAsset(asset)))
	}
}

// TestAssetTakenFromAccounts: a transfer naming no asset between accounts
// of one asset takes it, whether the coordinator opened them (it knows
// their asset) or reads them first (another coordinator); a repeat naming
// the asset is the same call.
func TestAssetTakenFromAccounts(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.openAsset("USD/2", map[string]int64{"A": 100, "B": 0})
	txn, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k1"))
	require.NoError(t, err)
	assert.Equal(t, "USD/2", txn.Asset)
	again, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k1"), twopc.WithAsset("USD/2"))
	require.NoError(t, err, "the same call: the asset named or taken")
	assert.Equal(t, txn.ID, again.ID)

	other := b.coordinator(twopc.WithSyncSettle())
	txn, err = other.Transfer(ctx, "A", "B", 5)
	require.NoError(t, err)
	assert.Equal(t, "USD/2", txn.Asset)
	assert.Equal(t, int64(85), b.balance("A"))
}

// TestAssetSlipWritesNothing: a transfer naming an asset its accounts do
// not hold, or naming none between accounts of two assets, is refused
// before its insert: nothing is written, and the corrected call with the
// same key succeeds.
func TestAssetSlipWritesNothing(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.openAsset("USD/2", map[string]int64{"A": 100, "B": 0})
	b.openAsset("EUR/2", map[string]int64{"E": 0})
	for _, c := range []*twopc.Coordinator{b.c, b.coordinator()} {
		_, err := c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"), twopc.WithAsset("EUR/2"))
		require.ErrorIs(t, err, twopc.ErrAssetMismatch)
		_, err = c.Transfer(ctx, "A", "E", 10, twopc.WithKey("k"))
		require.ErrorIs(t, err, twopc.ErrAssetMismatch)
		_, err = c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 5}, {Account: "E", Amount: 5}}, twopc.WithKey("k"))
		require.ErrorIs(t, err, twopc.ErrAssetMismatch)
		assert.Empty(t, b.txns(), "nothing written")
	}
	assert.Equal(t, int64(100), b.balance("A"))
	txn, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey("k"))
	require.NoError(t, err, "the key is free")
	assert.Equal(t, "USD/2", txn.Asset)
}

// TestAssetTakenPerLeg: TransferLegs takes, for each leg naming no asset,
// its account's; an exchange of two assets balances in each.
func TestAssetTakenPerLeg(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.openAsset("USD/2", map[string]int64{"A": 100, "B": 0})
	b.openAsset("EUR/2", map[string]int64{"E": 100, "F": 0})
	txn, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 10}, {Account: "E", Amount: -9}, {Account: "F", Amount: 9}})
	require.NoError(t, err)
	for _, l := range txn.Legs {
		assert.NotEmpty(t, l.Asset, "leg %v", l)
	}
	assert.Equal(t, int64(9), b.balance("F"))
}

// TestMaxAmountWritesNothing: an amount above WithMaxAmount is refused
// before anything is written, and its key stays free.
func TestMaxAmountWritesNothing(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithMaxAmount(1000))
	b.open(map[string]int64{"A": 5000, "B": 0})
	for _, v := range []int64{1001, math.MaxInt64} {
		_, err := b.c.Transfer(ctx, "A", "B", v, twopc.WithKey("k"))
		require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	}
	_, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -2000}, {Account: "B", Amount: 2000}}, twopc.WithKey("k"))
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	_, err = b.c.Hold(ctx, "A", "B", 1001, twopc.WithKey("k"))
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	assert.Empty(t, b.txns(), "nothing written")
	txn, err := b.c.Transfer(ctx, "A", "B", 1000, twopc.WithKey("k"))
	require.NoError(t, err, "the key is free")
	assert.True(t, txn.State.Committed())
}
