package twopc_test

// Unknown ids write nothing: a transfer naming an id that has no account is
// refused with ErrAccountNotFound before its insert, with nothing written
// under that id, in the accounts or the log.

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// documentsUnder counts the account documents under id (a tombstone
// included).
func (b *bank) documentsUnder(id any) int64 {
	b.t.Helper()
	n, err := b.db.Collection("accounts").CountDocuments(testCtx(b.t), bson.D{{Key: "_id", Value: id}})
	require.NoError(b.t, err)
	return n
}

// TestUnknownAccountWritesNothing: a transfer to or from an id with no
// account, on a coordinator that never saw it, is refused with
// ErrAccountNotFound and no Txn; no document is written under the id and
// the log holds no transaction; the other account is as it was.
func TestUnknownAccountWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
	}{
		{"destination", "A", "ghost"},
		{"source", "ghost", "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			b := newBank(t)
			b.open(map[string]int64{"A": 100})
			c := b.coordinator(twopc.WithSyncSettle()) // has seen no account
			txn, err := c.Transfer(ctx, tc.src, tc.dst, 10)
			require.ErrorIs(t, err, twopc.ErrAccountNotFound)
			assert.Nil(t, txn, "nothing written: no transaction")
			assert.Zero(t, b.documentsUnder("ghost"), "no tombstone under the unknown id")
			assert.Empty(t, b.txns(), "nothing in the log")
			assert.Equal(t, int64(100), b.balance("A"))
			assert.Empty(t, b.account("A").Pending)
			assert.Empty(t, b.account("A").Fenced, "no fence on the known account either")

			// A tombstone counts as missing: a transfer to an id holding
			// only one is refused the same way, writing nothing more.
			_, err = b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: "ghost"}, {Key: "tombstone", Value: true}})
			require.NoError(t, err)
			_, err = c.Transfer(ctx, tc.src, tc.dst, 10)
			require.ErrorIs(t, err, twopc.ErrAccountNotFound)
			assert.Empty(t, b.txns(), "nothing in the log")

			// Hold and TransferLegs take the same path.
			_, err = c.Hold(ctx, tc.src, tc.dst, 10)
			require.ErrorIs(t, err, twopc.ErrAccountNotFound)
			_, err = c.TransferLegs(ctx, []twopc.Leg{{Account: tc.src, Amount: -10}, {Account: tc.dst, Amount: 10}})
			require.ErrorIs(t, err, twopc.ErrAccountNotFound)
			assert.Empty(t, b.txns(), "nothing in the log")
		})
	}
}

// TestUnknownAccountInABatch: in a TransferBatch only the transfers naming
// a missing account fail, each with its own ErrAccountNotFound; the others
// commit; nothing is written under the unknown ids.
func TestUnknownAccountInABatch(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	opening := map[string]int64{"A": 100, "B": 50}
	b.open(opening)
	c := b.coordinator(twopc.WithSyncSettle())
	res, err := c.TransferBatch(ctx, []twopc.TransferRequest{
		{Source: "A", Destination: "B", Value: 10},
		{Source: "A", Destination: "ghost", Value: 1},
		{Source: "ghost2", Destination: "B", Value: 1, Key: "g2"},
		{Source: "B", Destination: "A", Value: 5},
		{Legs: []twopc.Leg{{Account: "A", Amount: -3}, {Account: "B", Amount: 2}, {Account: "ghost3", Amount: 1}}},
	})
	require.NoError(t, err)
	for _, i := range []int{0, 3} {
		require.NoErrorf(t, res[i].Err, "transfer %d", i)
		assert.Equalf(t, twopc.StateDone, res[i].Txn.State, "transfer %d", i)
	}
	for _, i := range []int{1, 2, 4} {
		require.ErrorIsf(t, res[i].Err, twopc.ErrAccountNotFound, "transfer %d", i)
		assert.Nilf(t, res[i].Txn, "transfer %d", i)
	}
	for _, id := range []string{"ghost", "ghost2", "ghost3"} {
		assert.Zero(t, b.documentsUnder(id), id)
	}
	assert.Len(t, b.txns(), 2, "the two good transfers only")
	b.checkSettled(opening)
}

// TestUnknownAccountKeyedThenOpened: a keyed transfer refused for a missing
// account records nothing, so the same key succeeds once the account
// exists; and a repeat of it then returns that transaction.
func TestUnknownAccountKeyedThenOpened(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100})
	c := b.coordinator(twopc.WithSyncSettle())
	_, err := c.Transfer(ctx, "A", "late", 10, twopc.WithKey("k"))
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
	_, err = c.GetByKey(ctx, "k")
	require.ErrorIs(t, err, twopc.ErrTxnNotFound, "the key recorded nothing")

	require.NoError(t, b.c.OpenAccount(ctx, "late", 0))
	txn, err := c.Transfer(ctx, "A", "late", 10, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, twopc.StateDone, txn.State)
	again, err := c.Transfer(ctx, "A", "late", 10, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, txn.ID, again.ID, "the key's transaction")
	assert.Equal(t, int64(90), b.balance("A"))
	assert.Equal(t, int64(10), b.balance("late"))

	// The account deleted by hand: a repeat with the key still returns
	// the key's transaction, not a refusal.
	_, err = b.db.Collection("accounts").DeleteOne(ctx, bson.D{{Key: "_id", Value: "late"}})
	require.NoError(t, err)
	other := b.coordinator(twopc.WithSyncSettle()) // has not seen late
	again, err = other.Transfer(ctx, "A", "late", 10, twopc.WithKey("k"))
	require.NoError(t, err)
	assert.Equal(t, txn.ID, again.ID, "the key's transaction")
	assert.Zero(t, b.documentsUnder("late"))
}

// TestUnknownAccountDeletedAfterSeen: an account the coordinator read, then
// deleted by hand: the next transfer to it is refused cleanly (its
// rollback may leave a tombstone: the stated bound), the other account's
// money is unchanged, and a transfer after that writes nothing more.
func TestUnknownAccountDeletedAfterSeen(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100, "B": 0})
	c := b.coordinator(twopc.WithSyncSettle())
	_, err := c.Transfer(ctx, "A", "B", 10) // c sees both
	require.NoError(t, err)
	_, err = b.db.Collection("accounts").DeleteOne(ctx, bson.D{{Key: "_id", Value: "B"}})
	require.NoError(t, err)

	_, err = c.Transfer(ctx, "A", "B", 10)
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
	require.NoError(t, c.Settle(ctx))
	assert.Equal(t, int64(90), b.balance("A"), "the refused debit undone")
	assert.Empty(t, b.account("A").Pending)
	assert.LessOrEqual(t, b.documentsUnder("B"), int64(1), "at most the tombstone")
	logged := len(b.txns())

	_, err = c.Transfer(ctx, "A", "B", 10)
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
	assert.Len(t, b.txns(), logged, "now known missing: nothing more in the log")
	assert.Equal(t, int64(90), b.balance("A"))
}

// TestUnknownAccountIDsMatchAsTheServerDoes: an account whose _id is the
// double 7 is the account int32(7) and int64(7) name: the existence read
// matches what it returns to what was asked by the server's equality.
func TestUnknownAccountIDsMatchAsTheServerDoes(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	b.open(map[string]int64{"A": 100})
	_, err := b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: 7.0}, {Key: "balance", Value: int64(0)}, {Key: "pendingTransactions", Value: bson.A{}}})
	require.NoError(t, err)
	c := b.coordinator(twopc.WithSyncSettle())
	_, err = c.Transfer(ctx, "A", int32(7), 10)
	require.NoError(t, err)
	c = b.coordinator(twopc.WithSyncSettle())
	_, err = c.Transfer(ctx, "A", int64(7), 5)
	require.NoError(t, err)
	assert.Equal(t, int64(15), b.balance(7.0))
}
