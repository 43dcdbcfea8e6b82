package twopc_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

// A payment split with a fee account: every leg applies, the transaction
// records its legs, and Get and AllLegs return them.
func TestTransferLegsSplit(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0, "fee": 0})
	legs := []twopc.Leg{{Account: "A", Amount: -100}, {Account: "B", Amount: 90}, {Account: "fee", Amount: 10}}
	txn, err := b.c.TransferLegs(ctx, legs)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, txn.State)
	assert.Equal(t, int64(100), txn.Value, "the total credited")
	assert.Nil(t, txn.Source)
	assert.Equal(t, legs, txn.AllLegs())
	got, err := b.c.Get(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, legs, got.AllLegs())
	assert.Equal(t, int64(0), b.balance("A"))
	assert.Equal(t, int64(90), b.balance("B"))
	assert.Equal(t, int64(10), b.balance("fee"))
	b.checkSettled(map[string]int64{"A": 100, "B": 0, "fee": 0})
}

// One leg that cannot apply rolls back every leg that did.
func TestTransferLegsRollBackEveryLeg(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	opening := map[string]int64{"A": 100, "B": 30, "C": 0}
	b.open(opening)
	b.seenThenDeleted(b.c, "ghost") // missing when its leg applies, not before the insert
	cases := []struct {
		legs []twopc.Leg
		want error
	}{
		{[]twopc.Leg{{Account: "A", Amount: -50}, {Account: "C", Amount: 40}, {Account: "ghost", Amount: 10}}, twopc.ErrAccountNotFound},
		{[]twopc.Leg{{Account: "A", Amount: -50}, {Account: "B", Amount: -50}, {Account: "C", Amount: 100}}, twopc.ErrInsufficientFunds},
	}
	for _, tc := range cases {
		txn, err := b.c.TransferLegs(ctx, tc.legs)
		require.ErrorIs(t, err, tc.want)
		assert.Equal(t, twopc.StateCanceled, b.txn(txn.ID).State)
	}
	b.checkSettled(opening)
}

// A multi-leg transfer's input is checked before anything is written.
func TestTransferLegsBadInput(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0, "C": 0})
	many := make([]twopc.Leg, twopc.MaxLegs+1)
	for i := range many {
		many[i] = twopc.Leg{Account: fmt.Sprint("x", i), Amount: 1}
	}
	many[0].Amount = -int64(twopc.MaxLegs)
	cases := []struct {
		name string
		legs []twopc.Leg
	}{
		{"none", nil},
		{"one leg", []twopc.Leg{{Account: "A", Amount: 0}}},
		{"sum not zero", []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 9}}},
		{"zero amount", []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 10}, {Account: "C", Amount: 0}}},
		{"same account twice", []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 5}, {Account: "B", Amount: 5}}},
		{"same account as the server sees it", []twopc.Leg{{Account: int32(7), Amount: -10}, {Account: "B", Amount: 5}, {Account: int64(7), Amount: 5}}},
		{"MinInt64", []twopc.Leg{{Account: "A", Amount: math.MinInt64}, {Account: "B", Amount: math.MaxInt64}, {Account: "C", Amount: 1}}},
		{"credits overflow", []twopc.Leg{{Account: "A", Amount: math.MaxInt64}, {Account: "B", Amount: 1}, {Account: "C", Amount: -1}}},
		{"bad id", []twopc.Leg{{Account: nil, Amount: -10}, {Account: "B", Amount: 10}}},
		{"too many legs", many},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			txn, err := b.c.TransferLegs(ctx, tc.legs)
			require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
			assert.Nil(t, txn)
		})
	}
	assert.Empty(t, b.txns(), "nothing written")
}

// A three-leg transfer killed before each of its operations is finished by
// recovery: the money moves exactly once, or not at all if no leg applied.
func TestTransferLegsCrashAtEveryStepThenRecover(t *testing.T) {
	for _, step := range transferSteps {
		t.Run(step.String(), func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t, twopc.WithStepHook(crashAt(step)), twopc.WithSyncSettle())
			opening := map[string]int64{"A": 100, "B": 0, "C": 0}
			b.open(opening)
			_, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -60}, {Account: "B", Amount: 50}, {Account: "C", Amount: 10}})
			require.ErrorIs(t, err, errCrash)
			b.recoverAll()
			b.checkSettled(opening)
			moved := step != twopc.StepInsert && step != twopc.StepApply
			want := map[bool][3]int64{true: {40, 50, 10}, false: {100, 0, 0}}[moved]
			assert.Equal(t, want, [3]int64{b.balance("A"), b.balance("B"), b.balance("C")})
		})
	}
}

// Keys and Reverse work on multi-leg transfers as on two-leg ones, and a
// two-leg TransferLegs is the same transfer as Transfer.
func TestTransferLegsKeyAndReverse(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	opening := map[string]int64{"A": 100, "B": 0, "C": 0}
	b.open(opening)
	legs := []twopc.Leg{{Account: "A", Amount: -30}, {Account: "B", Amount: 20}, {Account: "C", Amount: 10}}
	first, err := b.c.TransferLegs(ctx, legs, twopc.WithKey("split-1"))
	require.NoError(t, err)
	again, err := b.c.TransferLegs(ctx, legs, twopc.WithKey("split-1"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	_, err = b.c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -30}, {Account: "B", Amount: 30}}, twopc.WithKey("split-1"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict)
	rev, err := b.c.Reverse(ctx, first.ID)
	require.NoError(t, err)
	assert.Equal(t, []twopc.Leg{{Account: "A", Amount: 30}, {Account: "B", Amount: -20}, {Account: "C", Amount: -10}}, rev.AllLegs())
	assert.Equal(t, int64(100), b.balance("A"))

	two, err := b.c.Transfer(ctx, "A", "B", 5, twopc.WithKey("pair"))
	require.NoError(t, err)
	same, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -5}, {Account: "B", Amount: 5}}, twopc.WithKey("pair"))
	require.NoError(t, err)
	assert.Equal(t, two.ID, same.ID)
	b.checkSettled(opening)
	assert.Equal(t, int64(95), b.balance("A"))
}

// A recoverer not given a ledger that a stale transaction has a leg on
// leaves it alone, before any claim, and says why; a recoverer that has
// the ledger then finishes it at once, not a lease later.
func TestRecoveryLeavesUnknownLedgersToOthers(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	fees := b.db.Collection("fees")
	c := b.coordinator(twopc.WithLedger("fees", fees), twopc.WithStepHook(crashAt(twopc.StepCommit)))
	b.open(map[string]int64{"A": 100})
	l, err := c.Ledger("fees")
	require.NoError(t, err)
	require.NoError(t, l.OpenAccount(ctx, "fee", 0))
	txn, err := c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Ledger: "fees", Account: "fee", Amount: 10}})
	require.ErrorIs(t, err, errCrash)
	b.backdate(txn.ID, time.Hour)
	before := b.txn(txn.ID)

	_, err = twopc.NewRecoverer(b.coordinator(twopc.WithApplication("without-fees"))).RecoverOnce(ctx)
	require.ErrorIs(t, err, twopc.ErrUnknownLedger)
	after := b.txn(txn.ID)
	assert.Equal(t, before.Claim, after.Claim, "not taken over")
	assert.Equal(t, before.LastModified, after.LastModified)

	rep, err := twopc.NewRecoverer(b.coordinator(twopc.WithApplication("with-fees"), twopc.WithLedger("fees", fees))).RecoverOnce(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, rep.RolledForward)
	assert.Equal(t, int64(90), b.balance("A"))
}
