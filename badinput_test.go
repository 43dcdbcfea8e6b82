package twopc_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestBadInput: every kind of bad input gives a clear error, matchable with
// errors.Is, never a panic; and either writes nothing or leaves a state
// that is final (canceled) or that recovery finishes.
func TestBadInput(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 100, "rich": math.MaxInt64, "full": math.MaxInt64 - 5})
	_, err := b.db.Collection("accounts").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "nobalance"}},
		bson.D{{Key: "_id", Value: "float"}, {Key: "balance", Value: 10.5}},
		bson.D{{Key: "_id", Value: "text"}, {Key: "balance", Value: "100"}},
		bson.D{{Key: "_id", Value: "int32"}, {Key: "balance", Value: int32(100)}},
	})
	require.NoError(t, err)

	const nothing, canceled, done = "writes nothing", "ends canceled", "ends done"
	cases := []struct {
		name     string
		src, dst any
		value    int64
		want     error // nil: the transfer goes through
		outcome  string
	}{
		{"zero value", "A", "B", 0, twopc.ErrInvalidTransfer, nothing},
		{"negative value", "A", "B", -5, twopc.ErrInvalidTransfer, nothing},
		{"MinInt64 value", "A", "B", math.MinInt64, twopc.ErrInvalidTransfer, nothing},
		{"same account", "A", "A", 1, twopc.ErrInvalidTransfer, nothing},
		{"same account as int32 and int64", int32(1), int64(1), 1, twopc.ErrInvalidTransfer, nothing},
		{"same account as int and float", int64(2), 2.0, 1, twopc.ErrInvalidTransfer, nothing},
		{"nil source", nil, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"nil destination", "A", nil, 1, twopc.ErrInvalidTransfer, nothing},
		{"empty string id", "", "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"invalid UTF-8 id", "\xa3", "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"invalid UTF-8 in a document id", bson.D{{Key: "k", Value: "\xff"}}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"array id", bson.A{"x"}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"null id", bson.Null{}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"regex id", bson.Regex{Pattern: "A"}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"undefined id", bson.Undefined{}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"MinKey id", bson.MinKey{}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"channel id", make(chan int), "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"func id", func() {}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"operator document id", bson.D{{Key: "$gt", Value: ""}}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"operator map id", map[string]any{"$ne": "A"}, "B", 1, twopc.ErrInvalidTransfer, nothing},
		{"value near MaxInt64, source too poor", "A", "B", math.MaxInt64, twopc.ErrInsufficientFunds, canceled},
		{"credit would overflow", "A", "full", 6, twopc.ErrBalanceOverflow, canceled},
		{"credit MaxInt64 to a non-empty account", "rich", "B", math.MaxInt64, twopc.ErrBalanceOverflow, canceled},
		{"credit exactly to MaxInt64", "A", "full", 5, nil, done},
		{"missing destination", "A", "nobody", 1, twopc.ErrAccountNotFound, nothing},
		{"missing source", "nobody", "A", 1, twopc.ErrAccountNotFound, nothing},
		{"account without balance", "A", "nobalance", 1, twopc.ErrInvalidAccount, canceled},
		{"account without balance as source", "nobalance", "A", 1, twopc.ErrInvalidAccount, canceled},
		{"float balance", "A", "float", 1, twopc.ErrInvalidAccount, canceled},
		{"float balance as source", "float", "A", 1, twopc.ErrInvalidAccount, canceled},
		{"string balance", "A", "text", 1, twopc.ErrInvalidAccount, canceled},
		{"int32 balance is an integer", "int32", "A", 1, nil, done},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(b.txns())
			var txn *twopc.Txn
			var err error
			require.NotPanics(t, func() { txn, err = b.c.Transfer(ctx, tc.src, tc.dst, tc.value) })
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
				assert.Regexp(t, `^twopc: `, err.Error())
			}
			switch tc.outcome {
			case nothing:
				assert.Nil(t, txn)
				assert.Len(t, b.txns(), before, "bad input wrote a transaction")
			case canceled:
				require.NotNil(t, txn)
				assert.Equal(t, twopc.StateCanceled, b.txn(txn.ID).State)
			case done:
				assert.Equal(t, twopc.StateDone, b.txn(txn.ID).State)
			}
		})
	}
	b.checkSettled(map[string]int64{"A": 100, "B": 100, "rich": math.MaxInt64, "full": math.MaxInt64 - 5, "int32": 100})
	assert.Equal(t, int64(math.MaxInt64), b.balance("full"))

	t.Run("cancel unknown id", func(t *testing.T) {
		txn, err := twopc.NewCanceler(b.c).Cancel(ctx, bson.NewObjectID())
		require.NoError(t, err, "an id never written gets a canceled placeholder")
		assert.Equal(t, twopc.StateCanceled, txn.State)
		_, err = twopc.NewCanceler(b.c).Cancel(ctx, bson.ObjectID{})
		require.ErrorIs(t, err, twopc.ErrTxnNotFound)
		_, err = b.c.Get(ctx, bson.NewObjectID())
		require.ErrorIs(t, err, twopc.ErrTxnNotFound)
	})

	t.Run("transaction edited into an unknown state", func(t *testing.T) {
		id := bson.NewObjectID()
		_, err := b.db.Collection("transactions").InsertOne(ctx, bson.D{
			{Key: "_id", Value: id}, {Key: "source", Value: "A"}, {Key: "destination", Value: "B"},
			{Key: "value", Value: int64(1)}, {Key: "state", Value: "committed"}, {Key: "lastModified", Value: bson.DateTime(0)},
		})
		require.NoError(t, err)
		_, err = twopc.NewCanceler(b.c).Cancel(ctx, id)
		require.ErrorIs(t, err, twopc.ErrUnknownState)
		txn, err := b.c.Get(ctx, id)
		require.ErrorIs(t, err, twopc.ErrUnknownState)
		assert.Equal(t, twopc.State("committed"), txn.State)
		assert.False(t, txn.State.Valid())
		rep, err := twopc.NewRecoverer(b.c).RecoverOnce(ctx)
		require.NoError(t, err, "recovery leaves it alone")
		assert.Zero(t, rep.Finished())
		assert.Equal(t, twopc.State("committed"), b.txn(id).State)
		_, err = b.c.Reverse(ctx, id)
		require.ErrorIs(t, err, twopc.ErrUnknownState)
	})

	t.Run("nil and odd arguments elsewhere", func(t *testing.T) {
		_, err := twopc.NewCoordinator(nil)
		require.Error(t, err)
		require.NotPanics(t, func() { _ = b.c.OpenAccount(ctx, nil, 1) })
		require.ErrorIs(t, b.c.OpenAccount(ctx, nil, 1), twopc.ErrInvalidAccountID)
		_, err = b.c.Balance(ctx, "nobody")
		require.ErrorIs(t, err, twopc.ErrAccountNotFound)
		_, err = b.c.Balance(ctx, "float")
		require.ErrorIs(t, err, twopc.ErrInvalidAccount)
		_, err = b.c.Transfer(ctx, "A", "B", 1, nil)
		require.NoError(t, err, "nil options are ignored")
		_, err = b.c.Transfer(ctx, "A", "B", 1, nil, twopc.WithKey(""))
		require.ErrorIs(t, err, twopc.ErrInvalidTransfer, "an empty key where one was asked for")
		canceledCtx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = b.c.Transfer(canceledCtx, "A", "B", 1)
		require.True(t, errors.Is(err, context.Canceled), "a canceled context says so: %v", err)
	})
}

// Idempotency keys that are empty where one was asked for, not valid
// UTF-8, or longer than MaxKeyLen get ErrInvalidTransfer, from every call
// that takes one, and nothing is written.
func TestInvalidKeys(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 100, "B": 0})
	paid, err := b.c.Transfer(ctx, "A", "B", 1)
	require.NoError(t, err)
	for name, key := range map[string]string{
		"empty":     "",
		"not UTF-8": "k\xff",
		"too long":  strings.Repeat("k", twopc.MaxKeyLen+1),
	} {
		t.Run(name, func(t *testing.T) {
			txn, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey(key))
			require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
			assert.Nil(t, txn)
			txn, err = b.c.TransferLegs(ctx, []twopc.Leg{{Account: "A", Amount: -10}, {Account: "B", Amount: 10}}, twopc.WithKey(key))
			require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
			assert.Nil(t, txn)
			txn, err = b.c.Reverse(ctx, paid.ID, twopc.WithKey(key))
			require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
			assert.Nil(t, txn)
			if key != "" { // "" in a batch request means no key
				res, err := b.c.TransferBatch(ctx, []twopc.TransferRequest{{Source: "A", Destination: "B", Value: 10, Key: key}})
				require.NoError(t, err)
				require.ErrorIs(t, res[0].Err, twopc.ErrInvalidTransfer)
			}
			assert.Len(t, b.txns(), 1, "nothing written")
		})
	}
	// The longest key is taken, and its exact repeat is the same transfer.
	long := strings.Repeat("é", twopc.MaxKeyLen/2)
	first, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey(long))
	require.NoError(t, err)
	again, err := b.c.Transfer(ctx, "A", "B", 10, twopc.WithKey(long))
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)
	assert.Equal(t, long, b.txn(first.ID).Key, "stored as given")
	assert.Equal(t, int64(89), b.balance("A"))
}

// Opening accounts: an id that is taken gives ErrAccountExists and the
// account keeps its balance; a balance below zero gives
// ErrNegativeBalance and writes nothing; a bad id, in OpenAccount, Account
// or Balance, says the account id is invalid (not "invalid transfer"),
// while a transfer with one is both. Before: a raw E11000, a negative
// account opened, and "invalid transfer" for an account call.
func TestOpenAccountErrors(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	require.NoError(t, b.c.OpenAccount(ctx, "A", 100))
	err := b.c.OpenAccount(ctx, "A", 5)
	require.ErrorIs(t, err, twopc.ErrAccountExists)
	assert.NotContains(t, err.Error(), "E11000")
	assert.Equal(t, int64(100), b.balance("A"), "the existing account untouched")

	err = b.c.OpenAccount(ctx, "N", -1)
	require.ErrorIs(t, err, twopc.ErrNegativeBalance)
	_, err = b.c.Account(ctx, "N")
	require.ErrorIs(t, err, twopc.ErrAccountNotFound, "nothing written")

	for _, call := range []func() error{
		func() error { return b.c.OpenAccount(ctx, nil, 1) },
		func() error { _, err := b.c.Balance(ctx, []int{1}); return err },
		func() error { _, err := b.c.Account(ctx, ""); return err },
	} {
		err := call()
		require.ErrorIs(t, err, twopc.ErrInvalidAccountID)
		assert.NotErrorIs(t, err, twopc.ErrInvalidTransfer)
		assert.NotContains(t, err.Error(), "transfer")
	}
	_, err = b.c.Transfer(ctx, nil, "A", 1)
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	require.ErrorIs(t, err, twopc.ErrInvalidAccountID)
}

// Errors a caller meets carry "twopc:" once (they wrapped the sentinel's
// own prefix before).
func TestErrorsCarryOnePrefix(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	b.open(map[string]int64{"A": 10, "B": 0})
	_, err := b.c.Transfer(ctx, "A", "B", 50)
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	assert.Equal(t, 1, strings.Count(err.Error(), "twopc:"), err.Error())
	paid, err := b.c.Transfer(ctx, "A", "B", 5)
	require.NoError(t, err)
	_, err = twopc.NewCanceler(b.c).Cancel(ctx, paid.ID)
	require.ErrorIs(t, err, twopc.ErrNotCancelable)
	assert.Equal(t, 1, strings.Count(err.Error(), "twopc:"), err.Error())
	_, err = b.c.TransferLegs(ctx, []twopc.Leg{{Ledger: "nowhere", Account: "A", Amount: -1}, {Account: "B", Amount: 1}})
	require.ErrorIs(t, err, twopc.ErrInvalidTransfer)
	assert.Equal(t, 1, strings.Count(err.Error(), "twopc:"), err.Error())
}
