package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// TestAccountsCommand: accounts lists a ledger's accounts in id order by
// pages (--limit, --after), of one asset (--asset), in another ledger
// (--ledger), tombstones left out; a bad query is a usage error, and an
// account the library cannot read stops it with exit status 1.
func TestAccountsCommand(t *testing.T) {
	f := newFixture(t)
	f.open(map[string]int64{"bob": 200, "alice": 100})
	require.NoError(t, f.c.OpenAccount(f.ctx, "carol", 300, twopc.AccountAsset("USD/2"), twopc.AccountFloor(-50)))
	require.NoError(t, f.c.OpenAccount(f.ctx, int64(7), 7))
	_, err := f.db.Collection(twopc.DefaultAccounts).InsertOne(f.ctx, bson.D{{Key: "_id", Value: "ghost"}, {Key: "tombstone", Value: true}})
	require.NoError(t, err)
	hold, err := f.c.Hold(f.ctx, "alice", "bob", 10)
	require.NoError(t, err)

	type item struct {
		ID                  any      `json:"id"`
		Balance             int64    `json:"balance"`
		Held                int64    `json:"held"`
		PendingCredit       int64    `json:"pendingCredit"`
		Asset               string   `json:"asset"`
		Floor               *int64   `json:"floor"`
		PendingTransactions []string `json:"pendingTransactions"`
	}
	var rep struct {
		Ledger   string `json:"ledger"`
		Accounts []item `json:"accounts"`
		Next     string `json:"next"`
	}
	r := f.run("accounts", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	assert.Equal(t, "default", rep.Ledger)
	assert.Empty(t, rep.Next)
	var ids []any
	for _, a := range rep.Accounts {
		ids = append(ids, a.ID)
	}
	assert.Equal(t, []any{float64(7), "alice", "bob", "carol"}, ids, "numbers first, no tombstone")
	assert.Equal(t, item{ID: "alice", Balance: 90, Held: 10, PendingTransactions: []string{hold.ID.Hex()}}, rep.Accounts[1])
	assert.Equal(t, int64(10), rep.Accounts[2].PendingCredit)
	require.NotNil(t, rep.Accounts[3].Floor)
	assert.Equal(t, int64(-50), *rep.Accounts[3].Floor)

	// By pages.
	var paged []any
	after := ""
	for range 10 {
		args := []string{"--limit", "1", "--json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		r = f.run("accounts", args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		rep.Next = ""
		r.decode(t, &rep)
		for _, a := range rep.Accounts {
			paged = append(paged, a.ID)
		}
		if after = rep.Next; after == "" {
			break
		}
	}
	assert.Equal(t, ids, paged)

	r = f.run("accounts", "--limit", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "Accounts of ledger default")
	assert.Regexp(t, `ID\s+BALANCE\s+HELD\s+PENDING CREDIT\s+LIMITS\s+IN FLIGHT`, r.stdout)
	assert.Regexp(t, `alice\s+90\s+10\s+0\s+-\s+1`, r.stdout)
	assert.Regexp(t, `More follow: --after \S+`, r.stdout)

	r = f.run("accounts", "--asset", "USD/2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `carol\s+3.00 USD/2\s+0.00 USD/2\s+0.00 USD/2\s+-0.50 USD/2 to none\s+0`, r.stdout)
	assert.NotContains(t, r.stdout, "alice")

	other := f.db.Collection("accounts_other")
	_, err = other.InsertOne(f.ctx, bson.D{{Key: "_id", Value: "zed"}, {Key: "balance", Value: int64(5)}})
	require.NoError(t, err)
	r = f.run("accounts", "--ledger", "other=accounts_other", "--ledger", "other", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	r.decode(t, &rep)
	assert.Equal(t, "other", rep.Ledger)
	require.Len(t, rep.Accounts, 1)
	assert.Equal(t, "zed", rep.Accounts[0].ID)

	r = f.run("accounts", "--asset", "usd")
	assert.Equal(t, exitUsage, r.code, r.stdout)
	r = f.run("accounts", "--after", "nonsense")
	assert.Equal(t, exitUsage, r.code, r.stdout)
	r = f.run("accounts", "--ledger", "nowhere")
	assert.Equal(t, exitUsage, r.code, r.stdout)

	_, err = f.db.Collection(twopc.DefaultAccounts).InsertOne(f.ctx, bson.D{{Key: "_id", Value: "dave"}, {Key: "balance", Value: 1.5}})
	require.NoError(t, err)
	r = f.run("accounts")
	assert.Equal(t, exitFailed, r.code, r.stdout)
	assert.Contains(t, r.stderr, "dave")
}
