package twopc_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// TestShardedKeysRefused shards, through the router, an accounts
// collection on {owner: 1} and a log on {_id: 1}, keys the protocol does
// not rest on (PROTOCOL.md, Scale-out), and checks that OpenAccount and
// EnsureIndexes refuse them with ErrShardKey (naming both) before they
// write or make any index, and that a transfer between accounts another
// program inserted is refused with it and writes nothing; accounts
// sharded on {_id: 1} and a log on {_id: "hashed"} are allowed. It runs
// only in the GitHub workflow's sharded job.
func TestShardedKeysRefused(t *testing.T) {
	mongotest.RequireSharded(t)
	ctx := shardedCtx(t)
	db := mongotest.NewDatabase(t)
	admin := db.Client().Database("admin")
	shard := func(coll string, key bson.D) {
		t.Helper()
		require.NoError(t, admin.RunCommand(ctx, bson.D{
			{Key: "shardCollection", Value: db.Name() + "." + coll}, {Key: "key", Value: key},
		}).Err(), "shardCollection %s", coll)
	}
	shard("accts_owner", bson.D{{Key: "owner", Value: 1}})
	shard("txns_ranged", bson.D{{Key: "_id", Value: 1}})
	shard("accts_ranged", bson.D{{Key: "_id", Value: 1}})
	shard("txns_hashed", bson.D{{Key: "_id", Value: "hashed"}})

	bad, err := twopc.NewCoordinator(db, twopc.WithCollections("accts_owner", "txns_ranged"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = bad.Close(ctx) })
	err = bad.OpenAccount(ctx, "A", 100)
	require.ErrorIs(t, err, twopc.ErrShardKey)
	n, err := db.Collection("accts_owner").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Zero(t, n, "a refused OpenAccount wrote the account")
	// The accounts, as another program would insert them.
	_, err = db.Collection("accts_owner").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "A"}, {Key: "balance", Value: int64(100)}, {Key: "pendingTransactions", Value: bson.A{}}},
		bson.D{{Key: "_id", Value: "B"}, {Key: "balance", Value: int64(0)}, {Key: "pendingTransactions", Value: bson.A{}}},
	})
	require.NoError(t, err)

	err = bad.EnsureIndexes(ctx)
	require.ErrorIs(t, err, twopc.ErrShardKey)
	assert.Contains(t, err.Error(), db.Name()+".accts_owner is sharded on {owner: 1}")
	assert.Contains(t, err.Error(), db.Name()+".txns_ranged is sharded on {_id: 1}")
	names := indexNames(t, db.Collection("txns_ranged"))
	assert.NotContains(t, names, "state_1_created_1", "an index made despite the refused key")

	txn, err := bad.Transfer(ctx, "A", "B", 10)
	require.ErrorIs(t, err, twopc.ErrShardKey)
	assert.Nil(t, txn)
	n, err = db.Collection("txns_ranged").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Zero(t, n, "a refused transfer wrote to the log")
	bal, err := bad.Balance(ctx, "A")
	require.NoError(t, err)
	assert.Equal(t, int64(100), bal)

	good, err := twopc.NewCoordinator(db, twopc.WithCollections("accts_ranged", "txns_hashed"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = good.Close(ctx) })
	require.NoError(t, good.EnsureIndexes(ctx))
	require.NoError(t, good.OpenAccount(ctx, "A", 100))
	require.NoError(t, good.OpenAccount(ctx, "B", 0))
	_, err = good.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err)
}

// TestShardKeysUnreachableArchive gives a coordinator an archive in a
// deployment that cannot be reached: its shard key cannot be read, and
// that holds up only what needs the archive (history passes, its
// readers), never a transfer, nor a ledger's account.
func TestShardKeysUnreachableArchive(t *testing.T) {
	ctx := testCtx(t)
	db := mongotest.NewDatabase(t)
	nowhere := mongotest.ConnectURI(t, "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=300&connectTimeoutMS=300")
	c, err := twopc.NewCoordinator(db, twopc.WithHistory(time.Hour, nowhere.Database("archive").Collection("txns")))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(ctx) })
	require.NoError(t, c.OpenAccount(ctx, "A", 100))
	require.NoError(t, c.OpenAccount(ctx, "B", 0))
	_, err = c.Transfer(ctx, "A", "B", 10)
	require.NoError(t, err, "a transfer held up by the archive's deployment")
	require.NoError(t, c.Settle(ctx))
	bal, err := c.Balance(ctx, "B")
	require.NoError(t, err)
	assert.Equal(t, int64(10), bal)
	// EnsureIndexes needs every collection: it says which it could not read.
	err = c.EnsureIndexes(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shard keys")
}
