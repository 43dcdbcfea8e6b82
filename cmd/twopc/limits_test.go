package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestUnitScaled: amounts shown with their asset's scale.
func TestUnitScaled(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		code string
		plus bool
		want string
	}{
		{1250, "USD/2", false, "12.50 USD/2"},
		{-5, "USD/2", false, "-0.05 USD/2"},
		{5, "USD/2", true, "+0.05 USD/2"},
		{0, "BTC/8", false, "0.00000000 BTC/8"},
		{7, "PTS", true, "+7 PTS"},
		{7, "PTS/0", false, "7 PTS/0"},
		{-9223372036854775808, "X/18", false, "-9.223372036854775808 X/18"},
		{42, "", true, "+42"},
		{-42, "", false, "-42"},
	} {
		assert.Equal(t, tc.want, scaled(tc.n, tc.code, tc.plus), "%d %s", tc.n, tc.code)
	}
}

// TestAccountAndStatementShowAssets: account prints an account's asset and
// limits, statement and balance its amounts with the asset's scale.
func TestAccountAndStatementShowAssets(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.c.OpenAccount(f.ctx, "alice", 1250, twopc.AccountAsset("USD/2"), twopc.AccountFloor(-500), twopc.AccountCeiling(100000)))
	require.NoError(t, f.c.OpenAccount(f.ctx, "bob", 0, twopc.AccountAsset("USD/2")))
	txn, err := f.c.Transfer(f.ctx, "alice", "bob", 1500, twopc.WithAsset("USD/2"))
	require.NoError(t, err)
	require.NoError(t, f.c.Settle(f.ctx))

	r := f.run("account", "alice")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "balance -2.50 USD/2 (available)")
	assert.Contains(t, r.stdout, "asset USD/2")
	assert.Contains(t, r.stdout, "limits: floor -5.00 USD/2, ceiling 1000.00 USD/2; room above the floor 2.50 USD/2")
	var rep accountReport
	r = f.run("account", "alice", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	require.Len(t, rep.Accounts, 1)
	assert.Equal(t, "USD/2", rep.Accounts[0].Asset)
	assert.JSONEq(t, "-500", string(rep.Accounts[0].Floor))
	assert.JSONEq(t, "250", string(rep.Accounts[0].FloorRoom))

	// Entries are listed once a second old: commit it a minute earlier.
	_, err = f.db.Collection("transactions").UpdateOne(f.ctx, bson.D{{Key: "_id", Value: txn.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "committedAt", Value: time.Now().Add(-time.Minute)}}}})
	require.NoError(t, err)
	r = f.run("statement", "bob")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, txn.ID.Hex()+`\s+\+15.00 USD/2\s+15.00 USD/2`, r.stdout)
	r = f.run("balance", "alice")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, ": -2.50 USD/2\n")
	r = f.run("show", txn.ID.Hex())
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "amount -15.00 USD/2")
	assert.Contains(t, r.stdout, "amount +15.00 USD/2")
}
