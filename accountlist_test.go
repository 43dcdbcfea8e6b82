package twopc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// pagedAccounts is every account of ledger q selects, page after page.
func pagedAccounts(t *testing.T, c *twopc.Coordinator, ledger string, q twopc.AccountQuery) []twopc.Account {
	t.Helper()
	var all []twopc.Account
	for range 100 {
		p, err := c.Accounts(testCtx(t), ledger, q)
		require.NoError(t, err)
		if q.Limit > 0 {
			require.LessOrEqual(t, len(p.Accounts), q.Limit)
		}
		all = append(all, p.Accounts...)
		if p.Next == "" {
			return all
		}
		q.After = p.Next
	}
	t.Fatal("pages never ended")
	return nil
}

// TestAccountsPages: a ledger's accounts, of ids of several types, some of
// an asset and one with limits, are listed in the server's order of ids by
// pages of every size, each once, tombstones left out; an asset keeps its
// own; another ledger lists its own.
func TestAccountsPages(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t, twopc.WithSyncSettle())
	objectID := bson.NewObjectID()
	doc := bson.D{{Key: "region", Value: "eu"}, {Key: "n", Value: int64(7)}}
	usd := twopc.AccountAsset("USD/2")
	require.NoError(t, b.c.OpenAccount(ctx, "bob", 50, usd))
	require.NoError(t, b.c.OpenAccount(ctx, int64(10), 10))
	require.NoError(t, b.c.OpenAccount(ctx, objectID, 0, usd))
	require.NoError(t, b.c.OpenAccount(ctx, "alice", 100, usd, twopc.AccountFloor(-20)))
	require.NoError(t, b.c.OpenAccount(ctx, 2.5, 25))
	require.NoError(t, b.c.OpenAccount(ctx, doc, 7, twopc.AccountAsset("EUR/2")))
	require.NoError(t, b.c.OpenAccount(ctx, int32(3), 3))
	require.NoError(t, b.c.OpenAccount(ctx, true, 1))
	_, err := b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: "ghost"}, {Key: "tombstone", Value: true},
		{Key: "fencedLegs", Value: bson.A{}}, {Key: "fencedBefore", Value: time.UnixMilli(0).UTC()}})
	require.NoError(t, err)
	_, err = b.c.Transfer(ctx, "alice", "bob", 30, twopc.WithAsset("USD/2"))
	require.NoError(t, err)
	hold, err := b.c.Hold(ctx, "alice", objectID, 5, twopc.WithAsset("USD/2"))
	require.NoError(t, err)

	ids := func(accts []twopc.Account) []any {
		out := []any{}
		for _, a := range accts {
			out = append(out, a.ID)
		}
		return out
	}
	want := []any{2.5, int32(3), int64(10), "alice", "bob", doc, objectID, true}
	for _, limit := range []int{1, 2, 3, 7, 8, 0} {
		all := pagedAccounts(t, b.c, "", twopc.AccountQuery{Limit: limit})
		assert.Equal(t, want, ids(all), "limit %d", limit)
	}
	all := pagedAccounts(t, b.c, "", twopc.AccountQuery{})
	alice, bob, held := all[3], all[4], all[6]
	assert.Equal(t, twopc.Account{ID: "alice", Balance: 65, Held: 5, PendingTransactions: []bson.ObjectID{hold.ID}, Asset: "USD/2",
		Limited: true, Floor: -20, Ceiling: twopc.MaxLimit}, alice)
	assert.Equal(t, int64(80), bob.Balance)
	assert.Equal(t, int64(5), held.PendingCredit)
	for _, limit := range []int{1, 2, 0} {
		assert.Equal(t, []any{"alice", "bob", objectID}, ids(pagedAccounts(t, b.c, "", twopc.AccountQuery{Asset: "USD/2", Limit: limit})))
	}
	assert.Equal(t, []any{doc}, ids(pagedAccounts(t, b.c, "", twopc.AccountQuery{Asset: "EUR/2"})))
	assert.Empty(t, pagedAccounts(t, b.c, "", twopc.AccountQuery{Asset: "JPY"}))

	other := b.db.Collection("accounts_other")
	c := b.coordinator(twopc.WithLedger("other", other))
	l, err := c.Ledger("other")
	require.NoError(t, err)
	require.NoError(t, l.OpenAccount(ctx, "alice", 1))
	assert.Equal(t, []any{"alice"}, ids(pagedAccounts(t, c, "other", twopc.AccountQuery{Limit: 1})))
	assert.Len(t, pagedAccounts(t, c, "", twopc.AccountQuery{Limit: 1}), len(want))

	// One listed, the next opened behind the page's place: not listed; one
	// ahead of it: listed.
	p, err := b.c.Accounts(ctx, "", twopc.AccountQuery{Limit: 4})
	require.NoError(t, err)
	require.NoError(t, b.c.OpenAccount(ctx, "aaron", 0))
	require.NoError(t, b.c.OpenAccount(ctx, "zoe", 0))
	rest := pagedAccounts(t, b.c, "", twopc.AccountQuery{Limit: 4, After: p.Next})
	assert.Equal(t, []any{"bob", "zoe", doc, objectID, true}, ids(rest))
}

// TestAccountsBadInput: bad input gives its named error and reads
// nothing; an account the library cannot read fails its page with
// ErrInvalidAccount.
func TestAccountsBadInput(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t)
	cc := &commandCounter{}
	db := mongotest.ConnectURI(t, b.server.URI, options.Client().SetMonitor(cc.monitor())).Database(b.db.Name())
	c, err := twopc.NewCoordinator(db, twopc.WithFrozenMark())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	b.open(map[string]int64{"A": 1, "B": 2, "C": 3})
	p, err := b.c.Accounts(ctx, "", twopc.AccountQuery{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, p.Next)
	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		ledger string
		q      twopc.AccountQuery
		want   error
	}{
		{"unknown ledger", ctx, "nowhere", twopc.AccountQuery{}, twopc.ErrUnknownLedger},
		{"negative limit", ctx, "", twopc.AccountQuery{Limit: -1}, twopc.ErrInvalidQuery},
		{"limit too large", ctx, "", twopc.AccountQuery{Limit: twopc.MaxAccountLimit + 1}, twopc.ErrInvalidQuery},
		{"bad asset", ctx, "", twopc.AccountQuery{Asset: "usd"}, twopc.ErrInvalidQuery},
		{"garbled token", ctx, "", twopc.AccountQuery{After: "!!"}, twopc.ErrInvalidQuery},
		{"token of bad BSON", ctx, "", twopc.AccountQuery{After: "eyJsIjoiIiwiaSI6IkFBQUEifQ"}, twopc.ErrInvalidQuery},
		{"another asset's token", ctx, "", twopc.AccountQuery{After: p.Next, Asset: "USD"}, twopc.ErrInvalidQuery},
		{"done context", done, "", twopc.AccountQuery{}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cc.total()
			var err error
			require.NotPanics(t, func() { _, err = c.Accounts(tc.ctx, tc.ledger, tc.q) })
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, before, cc.total(), "read nothing")
		})
	}
	other := b.coordinator(twopc.WithLedger("other", b.db.Collection("accounts_other")))
	_, err = other.Accounts(ctx, "other", twopc.AccountQuery{After: p.Next})
	require.ErrorIs(t, err, twopc.ErrInvalidQuery, "another ledger's token")

	_, err = b.db.Collection("accounts").InsertOne(ctx, bson.D{{Key: "_id", Value: "float"}, {Key: "balance", Value: 1.5}})
	require.NoError(t, err)
	_, err = c.Accounts(ctx, "", twopc.AccountQuery{})
	require.ErrorIs(t, err, twopc.ErrInvalidAccount)
	assert.Contains(t, err.Error(), "float")
	p, err = c.Accounts(ctx, "", twopc.AccountQuery{Limit: 3})
	require.NoError(t, err, "a page before it")
	assert.Len(t, p.Accounts, 3)
}
