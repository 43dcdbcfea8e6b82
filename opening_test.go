package twopc_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// balanceBeforeFirst is account's BalanceAt a millisecond before its first
// entry, first: its opening balance, unless that time is before the
// opening OpenAccount recorded (a transfer committed within a millisecond
// of it), which BalanceAt refuses with ErrBeforeOpening; ok says which.
func balanceBeforeFirst(t *testing.T, c *twopc.Coordinator, account any, first twopc.Entry) (balance int64, ok bool) {
	t.Helper()
	ctx := testCtx(t)
	before := first.At.Add(-time.Millisecond)
	b, err := c.BalanceAt(ctx, "", account, before)
	opened, recorded, oerr := twopc.OpeningAt(ctx, c, "", account)
	require.NoError(t, oerr)
	if recorded && before.Before(opened) {
		require.ErrorIs(t, err, twopc.ErrBeforeOpening, "%v: %v is before its opening at %v", account, before, opened)
		return 0, false
	}
	require.NoError(t, err)
	return b, true
}

// TestBalanceAtBeforeOpening: BalanceAt of a time before OpenAccount
// opened the account is ErrBeforeOpening, naming both times, unless an
// entry is at or before it; from the opening on, the opening balance,
// then the entries. An account inserted by hand records no opening time:
// any time before its first entry is its opening balance.
func TestBalanceAtBeforeOpening(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	c := statementCoordinator(b)
	require.NoError(t, c.OpenAccount(ctx, "A", 1000))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	opened, ok, err := twopc.OpeningAt(ctx, c, "", "A")
	require.NoError(t, err)
	require.True(t, ok, "OpenAccount records when")

	for _, at := range []time.Time{opened.Add(-time.Millisecond), opened.Add(-time.Hour), {}} {
		_, err = c.BalanceAt(ctx, "", "A", at)
		require.ErrorIs(t, err, twopc.ErrBeforeOpening, "at %v", at)
	}
	_, err = c.BalanceAt(ctx, "", "A", opened.Add(-time.Millisecond))
	assert.ErrorContains(t, err, "before the account was opened at "+opened.UTC().Format(time.RFC3339Nano))
	bal, err := c.BalanceAt(ctx, "", "A", opened)
	require.NoError(t, err)
	assert.Equal(t, int64(1000), bal, "at its opening: the opening balance")

	txn, err := c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	es := fullStatement(t, c, "A", false)
	require.Len(t, es, 1)
	require.Equal(t, txn.ID, es[0].Txn)
	bal, err = c.BalanceAt(ctx, "", "A", es[0].At)
	require.NoError(t, err)
	assert.Equal(t, int64(900), bal)

	// An opening stamped after the first commit (a clock's correction
	// can put it there): an entry at or before the time shows the account
	// existed, and a time before every entry and the opening is refused.
	_, err = b.db.Collection(twopc.DefaultAccounts).UpdateOne(ctx, bson.D{{Key: "_id", Value: "A"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "opening.at", Value: es[0].At.Add(time.Second)}}}})
	require.NoError(t, err)
	bal, err = c.BalanceAt(ctx, "", "A", es[0].At)
	require.NoError(t, err)
	assert.Equal(t, int64(900), bal, "an entry before the opening's stamp")
	_, err = c.BalanceAt(ctx, "", "A", es[0].At.Add(-time.Millisecond))
	require.ErrorIs(t, err, twopc.ErrBeforeOpening)

	// Inserted by hand: no opening time, never refused.
	_, err = b.db.Collection(twopc.DefaultAccounts).InsertOne(ctx,
		bson.D{{Key: "_id", Value: "hand"}, {Key: "balance", Value: int64(500)}, {Key: "pendingTransactions", Value: bson.A{}}})
	require.NoError(t, err)
	_, ok, err = twopc.OpeningAt(ctx, c, "", "hand")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = c.Transfer(ctx, "hand", "B", 20)
	require.NoError(t, err)
	for _, at := range []time.Time{time.Now().Add(-time.Hour), {}} {
		bal, err = c.BalanceAt(ctx, "", "hand", at)
		require.NoError(t, err, "at %v", at)
		assert.Equal(t, int64(500), bal, "before its first entry: the opening balance derived")
	}
	_, ok, err = twopc.OpeningAt(ctx, c, "", "hand")
	require.NoError(t, err)
	assert.False(t, ok, "a derived opening records no time")
}
