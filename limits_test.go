package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// limitsDoc is what an account document holds of its asset and limits.
type limitsDoc struct {
	Balance     int64  `bson:"balance"`
	Debit       int64  `bson:"pendingDebit"`
	Credit      int64  `bson:"pendingCredit"`
	Asset       string `bson:"asset"`
	Floor       *int64 `bson:"floor"`
	Ceiling     *int64 `bson:"ceiling"`
	FloorRoom   *int64 `bson:"floorRoom"`
	CeilingRoom *int64 `bson:"ceilingRoom"`
}

// roomsHold asserts account id's rooms are what its balance, its sums in
// flight and its limits make them.
func (b *bank) roomsHold(id string) {
	b.t.Helper()
	roomsHoldIn(b.t, b.db.Collection("accounts"), id)
}

// roomsHoldIn is roomsHold for account id of accounts.
func roomsHoldIn(t *testing.T, accounts *mongo.Collection, id string) {
	t.Helper()
	var d limitsDoc
	require.NoError(t, accounts.FindOne(testCtx(t), bson.D{{Key: "_id", Value: id}}).Decode(&d))
	require.NotNil(t, d.FloorRoom, "%s has limits", id)
	require.NotNil(t, d.Floor)
	ceiling := twopc.MaxLimit
	if d.Ceiling != nil {
		ceiling = *d.Ceiling
	}
	assert.Equal(t, d.Balance-*d.Floor, *d.FloorRoom, "%s: floorRoom is balance - floor", id)
	assert.Equal(t, ceiling-(d.Balance+d.Debit+d.Credit), *d.CeilingRoom, "%s: ceilingRoom is ceiling - what the balance reaches", id)
}

// Assets: a leg applies only to an account of its asset, checked by the
// server; an exchange is one transfer of legs summing to zero per asset.
func TestAssetsAreNeverMixed(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	require.NoError(t, b.c.OpenAccount(ctx, "alice", 1000, twopc.AccountAsset("USD/2")))
	require.NoError(t, b.c.OpenAccount(ctx, "desk-usd", 0, twopc.AccountAsset("USD/2")))
	require.NoError(t, b.c.OpenAccount(ctx, "desk-eur", 5000, twopc.AccountAsset("EUR/2")))
	require.NoError(t, b.c.OpenAccount(ctx, "bob", 0, twopc.AccountAsset("EUR/2")))
	require.NoError(t, b.c.OpenAccount(ctx, "plain", 100))
	before := b.accountStates()

	for _, tc := range []struct {
		name     string
		from, to string
		opts     []twopc.TransferOption
	}{
		{"USD to EUR", "alice", "bob", []twopc.TransferOption{twopc.WithAsset("USD/2")}},
		{"EUR to USD", "desk-eur", "desk-usd", []twopc.TransferOption{twopc.WithAsset("EUR/2")}},
		{"an asset to an account with none", "alice", "plain", []twopc.TransferOption{twopc.WithAsset("USD/2")}},
		{"no asset to an account with one", "plain", "alice", nil},
		{"the scale is part of the code", "alice", "desk-usd", []twopc.TransferOption{twopc.WithAsset("USD")}},
	} {
		// Known before the insert (the accounts' assets as last read or
		// written): refused with nothing written.
		for _, c := range []*twopc.Coordinator{b.c, b.coordinator()} {
			txn, err := c.Transfer(ctx, tc.from, tc.to, 10, tc.opts...)
			require.ErrorIsf(t, err, twopc.ErrAssetMismatch, tc.name)
			require.Nil(t, txn, tc.name)
		}
	}
	assert.Empty(t, b.txns(), "nothing written")
	assert.Equal(t, before, b.accountStates(), "nothing moved")

	// An account whose asset changed after the coordinator read it: the
	// server's own condition refuses the leg, after the insert.
	_, err := b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "desk-usd"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "asset", Value: "EUR/2"}}}})
	require.NoError(t, err)
	before = b.accountStates()
	txn, err := b.c.Transfer(ctx, "alice", "desk-usd", 10, twopc.WithAsset("USD/2"))
	require.ErrorIs(t, err, twopc.ErrAssetMismatch)
	require.NotNil(t, txn)
	got, err := b.c.Get(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateCanceled, got.State)
	assert.Equal(t, "asset_mismatch", got.Reason)
	assert.Equal(t, before, b.accountStates(), "nothing moved")
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "desk-usd"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "asset", Value: "USD/2"}}}})
	require.NoError(t, err)

	// The exchange: alice pays 100 USD to the desk, the desk pays bob 92
	// EUR, in one transfer.
	exchange := []twopc.Leg{
		{Account: "alice", Amount: -100, Asset: "USD/2"},
		{Account: "desk-usd", Amount: 100, Asset: "USD/2"},
		{Account: "desk-eur", Amount: -92, Asset: "EUR/2"},
		{Account: "bob", Amount: 92, Asset: "EUR/2"},
	}
	txn, err = b.c.TransferLegs(ctx, exchange)
	require.NoError(t, err)
	assert.Equal(t, int64(100), txn.Value, "Value: what the first leg's asset credits")
	assert.Equal(t, exchange, txn.AllLegs())
	for id, want := range map[string]int64{"alice": 900, "desk-usd": 100, "desk-eur": 4908, "bob": 92} {
		assert.Equal(t, want, b.balance(id), id)
	}
	a, err := b.c.Account(ctx, "bob")
	require.NoError(t, err)
	assert.Equal(t, "EUR/2", a.Asset)

	// A keyed repeat naming no asset takes the accounts' (before its legs
	// are compared with the key's): the same transfer. One naming
	// another asset is another transfer.
	first, err := b.c.Transfer(ctx, "alice", "desk-usd", 5, twopc.WithAsset("USD/2"), twopc.WithKey("k"))
	require.NoError(t, err)
	again, err := b.c.Transfer(ctx, "alice", "desk-usd", 5, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	_, err = b.c.TransferLegs(ctx, []twopc.Leg{{Account: "desk-eur", Amount: -5}, {Account: "bob", Amount: 5}}, twopc.WithKey("k"))
	require.ErrorIs(t, err, twopc.ErrKeyConflict)

	// Reverse moves the original's assets.
	rev, err := b.c.Reverse(ctx, txn.ID)
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, rev.State)
	assert.Equal(t, int64(1000-5), b.balance("alice"))
	assert.Equal(t, int64(0), b.balance("bob"))
	_, err = b.c.Reverse(ctx, txn.ID, twopc.WithAsset("EUR/2"), twopc.WithKey("other"))
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer, "a reversal moves the original's assets")
}

// Bad assets and limits are refused before anything is written.
func TestAssetsAndLimitsRefusedInput(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	for _, code := range []string{"", "usd", "US D", "USD/", "USD/19", "USD/02", "USD/-1", "USD/2/2", "ÉCU", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456"} {
		err := b.c.OpenAccount(ctx, "x", 0, twopc.AccountAsset(code))
		require.ErrorIsf(t, err, twopc.ErrInvalidAccount, "%q", code)
		_, err = b.c.Transfer(ctx, "a", "b", 1, twopc.WithAsset(code))
		require.ErrorIsf(t, err, twopc.ErrInvalidTransfer, "%q", code)
		if code != "" { // a leg of no asset names none
			_, err = b.c.TransferLegs(ctx, []twopc.Leg{{Account: "a", Amount: -1, Asset: code}, {Account: "b", Amount: 1, Asset: code}})
			require.ErrorIsf(t, err, twopc.ErrInvalidTransfer, "%q", code)
		}
	}
	for _, ok := range []string{"USD", "USD/0", "USD/18", "X_1/2", "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345/2"} {
		require.NoErrorf(t, b.c.OpenAccount(ctx, "ok-"+ok, 0, twopc.AccountAsset(ok)), "%q", ok)
	}
	require.ErrorIs(t, b.c.OpenAccount(ctx, "x", 5, twopc.AccountFloor(10)), twopc.ErrLimitExceeded)
	require.ErrorIs(t, b.c.OpenAccount(ctx, "x", 50, twopc.AccountCeiling(10)), twopc.ErrLimitExceeded)
	require.ErrorIs(t, b.c.OpenAccount(ctx, "x", 0, twopc.AccountFloor(10), twopc.AccountCeiling(5)), twopc.ErrInvalidAccount)
	require.ErrorIs(t, b.c.OpenAccount(ctx, "x", 0, twopc.AccountFloor(-twopc.MaxLimit-1)), twopc.ErrInvalidAccount)
	require.ErrorIs(t, b.c.OpenAccount(ctx, "x", 0, twopc.AccountCeiling(twopc.MaxLimit+1)), twopc.ErrInvalidAccount)
	require.ErrorIs(t, b.c.OpenAccount(ctx, "x", -1), twopc.ErrNegativeBalance)
	require.NoError(t, b.c.OpenAccount(ctx, "overdraft", -10, twopc.AccountFloor(-50)), "a negative opening within the floor")

	// Legs summing to zero only across assets.
	_, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "a", Amount: -100, Asset: "USD/2"}, {Account: "b", Amount: 100, Asset: "EUR/2"}})
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	_, err = b.c.TransferLegs(ctx, []twopc.Leg{{Account: "a", Amount: -100, Asset: "USD/2"}, {Account: "b", Amount: 100}}, twopc.WithAsset("EUR/2"))
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer, "WithAsset fills the legs naming none, and may not contradict one")
	require.Empty(t, b.txns(), "nothing written")
	_, err = b.c.TransferBatch(ctx, []twopc.TransferRequest{{Source: "a", Destination: "b", Value: 1, Asset: "usd"}})
	require.NoError(t, err)
	require.Empty(t, b.txns(), "nothing written")
	for _, id := range []string{"x"} {
		_, err := b.c.Account(ctx, id)
		require.ErrorIs(t, err, twopc.ErrAccountNotFound, "nothing written")
	}
}

// Twenty debits race an account's floor, from four coordinators: it is
// never crossed, and exactly as many apply as fit.
func TestLimitsFloorRacedByDebits(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	require.NoError(t, b.c.OpenAccount(ctx, "A", 100, twopc.AccountFloor(-50)))
	b.open(map[string]int64{"B": 0})
	ok, refused := race(t, b, "A", "B", twopc.ErrInsufficientFunds)
	assert.Equal(t, 15, ok, "100 down to the floor of -50")
	assert.Equal(t, 5, refused)
	assert.Equal(t, int64(-50), b.balance("A"))
	b.roomsHold("A")
	a, err := b.c.Account(ctx, "A")
	require.NoError(t, err)
	assert.True(t, a.Limited)
	assert.Equal(t, int64(-50), a.Floor)
	assert.Equal(t, twopc.MaxLimit, a.Ceiling)
}

// Twenty credits race an account's ceiling: it is never crossed, counting
// what is in flight.
func TestLimitsCeilingRacedByCredits(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	require.NoError(t, b.c.OpenAccount(ctx, "A", 0, twopc.AccountCeiling(100)))
	b.open(map[string]int64{"B": 1000})
	ok, refused := race(t, b, "B", "A", twopc.ErrLimitExceeded)
	assert.Equal(t, 10, ok)
	assert.Equal(t, 10, refused)
	assert.Equal(t, int64(100), b.balance("A"))
	b.roomsHold("A")
}

// Holds count against a floor while held, and a ceiling counts what a
// hold would return if voided.
func TestLimitsCountHolds(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	require.NoError(t, b.c.OpenAccount(ctx, "A", 100, twopc.AccountCeiling(120)))
	b.open(map[string]int64{"B": 0, "C": 1000})
	hold, err := b.c.Hold(ctx, "A", "B", 80)
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "A", "B", 30)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds, "80 of the 100 are held")
	// The balance is 20 with 80 held: a credit of 30 fits the ceiling of
	// 120 only if the hold is not voided; it counts.
	_, err = b.c.Transfer(ctx, "C", "A", 30)
	require.ErrorIs(t, err, twopc.ErrLimitExceeded, "a voided hold would take it to 130")
	_, err = b.c.Transfer(ctx, "C", "A", 20)
	require.NoError(t, err)
	b.roomsHold("A")
	_, err = b.c.Capture(ctx, hold.ID, 50) // 30 returns
	require.NoError(t, err)
	assert.Equal(t, int64(70), b.balance("A"))
	b.roomsHold("A")
	_, err = b.c.Transfer(ctx, "A", "B", 70)
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "A", "B", 1)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	b.roomsHold("A")
}

// SetLimits gives an account without limits its rooms from what it holds,
// moves a limited account's by the difference, and moves no money: a
// floor raised above the balance refuses debits and nothing else.
func TestLimitsSetLimits(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	require.NoError(t, b.c.SetLimits(ctx, "", "A", twopc.AccountFloor(-100)))
	b.roomsHold("A")
	_, err := b.c.Transfer(ctx, "A", "B", 150)
	require.NoError(t, err, "the overdraft the floor allows")
	_, err = b.c.Transfer(ctx, "A", "B", 51)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)

	require.NoError(t, b.c.SetLimits(ctx, "", "A", twopc.AccountFloor(0), twopc.AccountCeiling(10)))
	assert.Equal(t, int64(-50), b.balance("A"), "nothing moved")
	b.roomsHold("A")
	_, err = b.c.Transfer(ctx, "A", "B", 1)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds, "below its new floor")
	_, err = b.c.Transfer(ctx, "B", "A", 60)
	require.NoError(t, err, "up to its ceiling")
	_, err = b.c.Transfer(ctx, "B", "A", 1)
	require.ErrorIs(t, err, twopc.ErrLimitExceeded)
	b.roomsHold("A")

	require.ErrorIs(t, b.c.SetLimits(ctx, "", "A", twopc.AccountAsset("USD")), twopc.ErrAssetMismatch, "an asset never changes")
	require.ErrorIs(t, b.c.SetLimits(ctx, "", "A", twopc.AccountFloor(20)), twopc.ErrInvalidAccount, "floor above the ceiling")
	require.ErrorIs(t, b.c.SetLimits(ctx, "", "nobody", twopc.AccountFloor(0)), twopc.ErrAccountNotFound)
	require.ErrorIs(t, b.c.SetLimits(ctx, "tokyo", "A", twopc.AccountFloor(0)), twopc.ErrUnknownLedger)
	a, err := b.c.Account(ctx, "A")
	require.NoError(t, err)
	assert.Equal(t, twopc.Account{ID: "A", Balance: 10, Limited: true, Floor: 0, Ceiling: 10}, *a)
}

// A leg applied to an account without limits, then settled after
// SetLimits gave it limits, by a process that never read the account: the
// close written for an account without limits matches nothing, and is sent
// for both kinds; the rooms count the leg. The same for a rollback's undo.
func TestLimitsGivenBetweenApplyAndSettle(t *testing.T) {
	for _, rollBack := range []bool{false, true} {
		name := "settle"
		if rollBack {
			name = "undo"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t)
			b.open(map[string]int64{"A": 100, "B": 50, "C": 0})
			stop := twopc.StepSettle
			if rollBack {
				stop = twopc.StepUndo
			}
			c := b.coordinator(twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
				if s == stop {
					return errors.New("stopped here")
				}
				return nil
			}))
			legs := []twopc.Leg{{Account: "A", Amount: -30}, {Account: "B", Amount: 30}}
			if rollBack {
				// C cannot pay: A's and B's legs apply, then are undone.
				legs = []twopc.Leg{{Account: "A", Amount: -30}, {Account: "B", Amount: 31}, {Account: "C", Amount: -1}}
			}
			_, err := c.TransferLegs(ctx, legs)
			require.Error(t, err)
			if rollBack {
				assert.Equal(t, int64(70), b.balance("A"), "applied, not undone yet")
			}
			require.NoError(t, b.c.SetLimits(ctx, "", "A", twopc.AccountFloor(0), twopc.AccountCeiling(1000)))
			require.NoError(t, b.c.SetLimits(ctx, "", "B", twopc.AccountFloor(0), twopc.AccountCeiling(1000)))
			b.recoverAll()
			b.checkSettled(map[string]int64{"A": 100, "B": 50, "C": 0})
			b.roomsHold("A")
			b.roomsHold("B")
			if rollBack {
				assert.Equal(t, int64(100), b.balance("A"))
			} else {
				assert.Equal(t, int64(80), b.balance("B"))
			}
		})
	}
}

// The audit checks each asset's total, and finds an account whose rooms a
// hand edit broke, or that SetLimits left outside its limits.
func TestLimitsAudit(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	require.NoError(t, b.c.OpenAccount(ctx, "alice", 1000, twopc.AccountAsset("USD/2"), twopc.AccountFloor(0)))
	require.NoError(t, b.c.OpenAccount(ctx, "desk-usd", 0, twopc.AccountAsset("USD/2")))
	require.NoError(t, b.c.OpenAccount(ctx, "desk-eur", 5000, twopc.AccountAsset("EUR/2"), twopc.AccountCeiling(9000)))
	require.NoError(t, b.c.OpenAccount(ctx, "bob", 0, twopc.AccountAsset("EUR/2")))
	_, err := b.c.TransferLegs(ctx, []twopc.Leg{
		{Account: "alice", Amount: -100, Asset: "USD/2"}, {Account: "desk-usd", Amount: 100, Asset: "USD/2"},
		{Account: "desk-eur", Amount: -92, Asset: "EUR/2"}, {Account: "bob", Amount: 92, Asset: "EUR/2"},
	})
	require.NoError(t, err)
	b.serverPastTxns()
	rep, err := b.c.Audit(ctx, twopc.WithExpectedAssetTotal("", "USD/2", 1000), twopc.WithExpectedAssetTotal("", "EUR/2", 5000),
		twopc.WithExpectedAssetTotal("", "", 0))
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Violations)
	require.Len(t, rep.Totals, 3)
	for _, tc := range rep.Totals {
		assert.True(t, tc.Decided && tc.OK && tc.ByAsset, "%+v", tc)
	}
	assert.Equal(t, map[string][]string{"": {"EUR/2", "USD/2"}}, rep.Assets, "the assets the ledger's total would add together")
	rep, err = b.c.Audit(ctx, twopc.WithExpectedAssetTotal("", "EUR/2", 4999))
	require.NoError(t, err)
	require.Len(t, rep.Violations, 1)
	assert.Equal(t, twopc.ViolationTotal, rep.Violations[0].Kind)

	// A hand edit of a limited account's balance leaves its rooms behind.
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "alice"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: int64(5)}}}})
	require.NoError(t, err)
	// SetLimits takes the floor above the desk's balance: allowed, and
	// reported.
	require.NoError(t, b.c.SetLimits(ctx, "", "desk-eur", twopc.AccountFloor(6000)))
	rep, err = b.c.Audit(ctx)
	require.NoError(t, err)
	kinds := map[string]any{}
	for _, v := range rep.Violations {
		kinds[v.Kind] = v.Account
	}
	assert.Equal(t, map[string]any{twopc.ViolationRooms: "alice", twopc.ViolationOutsideLimits: "desk-eur"}, kinds, "%v", rep.Violations)
}

// SetLimits' writes delivered again late, even after the limits were set
// back to what the first one found, change nothing; so do the writes of
// transfers on accounts with limits (every one delivered again).
func TestLimitsWritesDeliveredLate(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	require.NoError(t, c.OpenAccount(ctx, "A", 100, twopc.AccountFloor(-50), twopc.AccountCeiling(500)))
	b.open(map[string]int64{"B": 100})
	require.NoError(t, c.SetLimits(ctx, "", "B", twopc.AccountFloor(-10))) // B gains limits
	require.NoError(t, c.SetLimits(ctx, "", "A", twopc.AccountFloor(0)))
	require.NoError(t, c.SetLimits(ctx, "", "A", twopc.AccountFloor(-50))) // back to what the first found
	for _, v := range []int64{30, 60} {
		_, err := c.Transfer(ctx, "A", "B", v)
		require.NoError(t, err)
	}
	hold, err := c.Hold(ctx, "B", "A", 40)
	require.NoError(t, err)
	_, err = c.Capture(ctx, hold.ID, 25)
	require.NoError(t, err)
	b.seenThenDeleted(c, "nobody") // missing when the legs apply (its tombstone refuses the opening delivered again)
	_, err = c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -5}, {Account: "B", Amount: 100}, {Account: "nobody", Amount: -95}})
	require.ErrorIs(t, err, twopc.ErrAccountNotFound) // rolled back: its undos too
	before := b.accountStates()
	limits := map[string]limitsDoc{"A": b.limitsOf("A"), "B": b.limitsOf("B")}

	// First the write that took A's floor to 0, alone: it finds the floor
	// it required (-50) again.
	var late []bson.Raw
	for _, cmd := range rec.recorded() {
		if u, ok := cmd.Lookup("updates").ArrayOK(); ok {
			vals, _ := u.Values()
			for _, v := range vals {
				if f, ok := v.Document().Lookup("u", "$set", "floor").AsInt64OK(); ok && f == 0 {
					late = append(late, cmd)
				}
			}
		}
	}
	require.Len(t, late, 1)
	resendAll(t, b.db, late)
	assert.Equal(t, limits["A"], b.limitsOf("A"), "SetLimits delivered late changed the limits")
	resendAll(t, b.db, rec.recorded())
	b.recoverAll()
	assert.Equal(t, before, b.accountStates(), "a late write moved money")
	for id, want := range limits {
		got := b.limitsOf(id)
		assert.Equal(t, want, got, "%s: a late write changed its limits", id)
		b.roomsHold(id)
	}
	a, err := c.Account(ctx, "A")
	require.NoError(t, err)
	assert.Equal(t, int64(-50), a.Floor)
}

func (b *bank) limitsOf(id string) limitsDoc {
	b.t.Helper()
	var d limitsDoc
	require.NoError(b.t, b.db.Collection("accounts").FindOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}}).Decode(&d))
	return d
}

// An exchange across the two banks' deployments, each holding one side:
// alice's dollars and the desk's at Shanghai, the desk's euros and bob's
// at Beijing, whose deployment stops at each step of the transfer and
// starts again. The exchange happens whole or not at all, each asset's
// total is kept, and alice's floor is never crossed.
func TestLimitsExchangeAcrossDeploymentsWithRestart(t *testing.T) {
	ownServers(t)
	for _, step := range []twopc.Step{twopc.StepApply, twopc.StepCommit, twopc.StepSettle} {
		t.Run(step.String(), func(t *testing.T) {
			ownServers(t)
			ctx := testCtx(t)
			bk := newBanksStoppingAt(t, step)
			sh, err := bk.c.Ledger("shanghai")
			require.NoError(t, err)
			bj, err := bk.c.Ledger("beijing")
			require.NoError(t, err)
			require.NoError(t, sh.OpenAccount(ctx, "alice", 50, twopc.AccountAsset("USD/2"), twopc.AccountFloor(-60)))
			require.NoError(t, sh.OpenAccount(ctx, "desk", 0, twopc.AccountAsset("USD/2")))
			require.NoError(t, bj.OpenAccount(ctx, "desk", 1000, twopc.AccountAsset("EUR/2")))
			require.NoError(t, bj.OpenAccount(ctx, "bob", 0, twopc.AccountAsset("EUR/2"), twopc.AccountCeiling(500)))
			exchange := []twopc.Leg{
				{Ledger: "shanghai", Account: "alice", Amount: -100, Asset: "USD/2"},
				{Ledger: "shanghai", Account: "desk", Amount: 100, Asset: "USD/2"},
				{Ledger: "beijing", Account: "desk", Amount: -92, Asset: "EUR/2"},
				{Ledger: "beijing", Account: "bob", Amount: 92, Asset: "EUR/2"},
			}
			_, err = bk.c.TransferLegs(ctx, exchange)
			if step != twopc.StepCommit {
				require.Error(t, err, "beijing is down")
			}
			bk.restart(1)
			bk.recoverAll()
			bk.check(map[string]map[string]int64{"shanghai": {"alice": 50, "desk": 0}, "beijing": {"desk": 1000, "bob": 0}})
			moved := bk.balance("beijing", "bob") == 92
			want := map[[2]string]int64{{"shanghai", "alice"}: 50, {"shanghai", "desk"}: 0, {"beijing", "desk"}: 1000, {"beijing", "bob"}: 0}
			if moved {
				want = map[[2]string]int64{{"shanghai", "alice"}: -50, {"shanghai", "desk"}: 100, {"beijing", "desk"}: 908, {"beijing", "bob"}: 92}
			}
			for k, v := range want {
				assert.Equal(t, v, bk.balance(k[0], k[1]), "%v (the exchange moved: %v)", k, moved)
			}
			if step != twopc.StepApply {
				assert.True(t, moved, "past its commit point, it moves")
			}
			// Past alice's floor now: refused, nothing moved.
			_, err = bk.c.TransferLegs(ctx, exchange)
			if moved {
				require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
			}
			rep, err := bk.c.Audit(ctx, twopc.WithExpectedAssetTotal("shanghai", "USD/2", 50), twopc.WithExpectedAssetTotal("beijing", "EUR/2", 1000))
			require.NoError(t, err)
			assert.True(t, rep.OK(), "%v", rep.Violations)
		})
	}
}

// SetLimits refuses, writing nothing, what its rooms could not hold: an
// account beyond MaxLimit now, or one whose legs in flight could take it
// there once they settle or are undone (here a debit in flight whose undo
// would push a converted floorRoom past int64, and a balance below
// -MaxLimit under WithAllowNegative); limits with no floor or ceiling;
// and rooms a hand edit made non-integer. The transfers in flight then
// finish as they would have.
func TestLimitsSetLimitsRefusesWhatDoesNotFit(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithAllowNegative(), twopc.WithSyncSettle())
	b.open(map[string]int64{"big": math.MaxInt64 - 10, "A": 1<<62 + 1000, "low": 0, "C": 0, "D": 0, "plain": 5})
	_, err := b.c.Transfer(ctx, "low", "C", 1<<62+10) // low: below -MaxLimit
	require.NoError(t, err)
	stopAt := b.coordinator(twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepUndo {
			return errors.New("stopped before undoing")
		}
		return nil
	}))
	_, err = stopAt.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -2000}, {Account: "C", Amount: 2001}, {Account: "D", Amount: -1}})
	require.Error(t, err) // A's 2000 in flight, to be undone
	before := b.accountStates()

	require.ErrorIs(t, b.c.SetLimits(ctx, "", "big", twopc.AccountFloor(0)), twopc.ErrInvalidAccount)
	require.ErrorIs(t, b.c.SetLimits(ctx, "", "A", twopc.AccountFloor(-twopc.MaxLimit)), twopc.ErrInvalidAccount)
	require.ErrorIs(t, b.c.SetLimits(ctx, "", "low", twopc.AccountFloor(-twopc.MaxLimit)), twopc.ErrInvalidAccount)
	require.ErrorIs(t, b.c.SetLimits(ctx, "", "plain"), twopc.ErrInvalidAccount, "no limit given")
	require.ErrorIs(t, b.c.SetLimits(ctx, "", "plain", twopc.AccountAsset("USD")), twopc.ErrAssetMismatch)
	assert.Equal(t, before, b.accountStates(), "nothing written")
	for _, id := range []string{"big", "A", "low", "plain"} {
		assert.Nil(t, b.limitsOf(id).FloorRoom, "%s: no limits", id)
	}
	b.recoverAll()
	assert.Equal(t, int64(1<<62+1000), b.balance("A"), "the rollback finished")

	require.NoError(t, b.c.OpenAccount(ctx, "E", 100, twopc.AccountFloor(0)))
	_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "E"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "floorRoom", Value: 100.0}}}})
	require.NoError(t, err)
	require.ErrorIs(t, b.c.SetLimits(ctx, "", "E", twopc.AccountFloor(-10)), twopc.ErrInvalidAccount, "a room that is not an integer, at once")
}

// The audit counts an account whose asset is malformed in its ledger's
// total and in no asset's, and reports it.
func TestLimitsAuditMalformedAsset(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"plain": 10})
	require.NoError(t, b.c.OpenAccount(ctx, "usd", 100, twopc.AccountAsset("USD")))
	_, err := b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: "usd"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "asset", Value: int64(7)}}}})
	require.NoError(t, err)
	rep, err := b.c.Audit(ctx, twopc.WithExpectedAssetTotal("", "", 10), twopc.WithExpectedTotal("", 110))
	require.NoError(t, err)
	require.Len(t, rep.Totals, 2)
	for _, tc := range rep.Totals {
		assert.True(t, tc.OK, "%+v", tc)
	}
	require.Len(t, rep.Violations, 1)
	assert.Equal(t, twopc.ViolationMalformed, rep.Violations[0].Kind)
	assert.Equal(t, map[string][]string{"": {""}}, rep.Assets, "the malformed asset is named in none")
}

// A fresh process settling legs on accounts with limits that it has never
// read: its first statements, written for accounts without, match
// nothing; it reads those accounts once and closes each leg for its kind,
// and sends no more than one statement a leg beyond the first try.
func TestLimitsSettleUnknownKind(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	const n = 20
	for i := range n {
		require.NoError(t, b.c.OpenAccount(ctx, fmt.Sprintf("src%d", i), 100, twopc.AccountFloor(0)))
		require.NoError(t, b.c.OpenAccount(ctx, fmt.Sprintf("dst%d", i), 0, twopc.AccountCeiling(1000)))
	}
	c := b.coordinator(twopc.WithSyncSettle(), twopc.WithStepHook(func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepSettle {
			return errors.New("stopped before settling")
		}
		return nil
	}))
	for i := range n {
		_, err := c.Transfer(ctx, fmt.Sprintf("src%d", i), fmt.Sprintf("dst%d", i), 10)
		require.Error(t, err)
	}
	var mu sync.Mutex
	stmts := 0
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName == "update" && e.DatabaseName == b.db.Name() {
			if coll, _ := e.Command.Lookup("update").StringValueOK(); coll == "accounts" {
				vals, _ := e.Command.Lookup("updates").Array().Values()
				mu.Lock()
				stmts += len(vals)
				mu.Unlock()
			}
		}
	}}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(mon)).Database(b.db.Name())
	rc, err := twopc.NewCoordinator(db, twopc.WithApplication("fresh-recoverer"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close(context.Background()) })
	rep, err := twopc.NewRecoverer(rc).RecoverOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, rep.Settled)
	mu.Lock()
	assert.LessOrEqual(t, stmts, 2*(2*n), "a statement a leg, then one a leg for its kind")
	mu.Unlock()
	for i := range n {
		assert.Equal(t, int64(10), b.balance(fmt.Sprintf("dst%d", i)))
		b.roomsHold(fmt.Sprintf("src%d", i))
		b.roomsHold(fmt.Sprintf("dst%d", i))
	}
}

// SetLimits gives limits to accounts without them while transfers run
// through them from four coordinators: each call succeeds or says
// ErrInProgress, and once the transfers stop, the rooms of every account
// it converted are exactly what its balance and limits make them, and the
// money is all there.
func TestLimitsSetLimitsWhileTransfersRun(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 1_000_000, "B": 1_000_000})
	stop := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var moved atomic.Int64
	cs := []*twopc.Coordinator{b.c, b.coordinator(twopc.WithSyncSettle()), b.coordinator(twopc.WithSyncSettle()), b.coordinator(twopc.WithSyncSettle())}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[i%len(cs)]
			src, dst := "A", "B"
			if i%2 == 1 {
				src, dst = "B", "A"
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Transfer(ctx, src, dst, 1+int64(i)); err == nil {
					if moved.Add(1) == 40 {
						once.Do(func() { close(started) })
					}
				}
			}
		}()
	}
	<-started
	converted := map[string]bool{}
	for _, id := range []string{"A", "B"} {
		err := b.c.SetLimits(ctx, "", id, twopc.AccountFloor(-5000), twopc.AccountCeiling(3_000_000))
		if err == nil {
			converted[id] = true
			continue
		}
		require.ErrorIs(t, err, twopc.ErrInProgress)
	}
	before := moved.Load()
	close(stop)
	wg.Wait()
	t.Logf("SetLimits converted %d of 2 accounts while %d transfers ran (%d before it)", len(converted), moved.Load(), before)
	b.recoverAll()
	b.checkSettled(map[string]int64{"A": 1_000_000, "B": 1_000_000})
	assert.Equal(t, int64(2_000_000), b.balance("A")+b.balance("B"))
	for id := range converted {
		b.roomsHold(id)
	}
}

// race makes 20 transfers of 10 from src to dst at once, from four
// coordinators on b, and counts those that committed and those refused
// with refusal; any other outcome fails the test.
func race(t *testing.T, b *bank, src, dst string, refusal error) (ok, refused int) {
	t.Helper()
	ctx := testCtx(t)
	cs := []*twopc.Coordinator{b.c}
	for range 3 {
		cs = append(cs, b.coordinator(twopc.WithSyncSettle()))
	}
	var oks, refusals atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cs[i%len(cs)].Transfer(ctx, src, dst, 10)
			switch {
			case err == nil:
				oks.Add(1)
			case errors.Is(err, refusal):
				refusals.Add(1)
			default:
				t.Errorf("transfer %d from %s to %s: %v", i, src, dst, err)
			}
		}()
	}
	wg.Wait()
	return int(oks.Load()), int(refusals.Load())
}
