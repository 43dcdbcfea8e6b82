package twopc_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// isFerretDB reports whether db's server is FerretDB (buildInfo names it).
func isFerretDB(t *testing.T, db *mongo.Database) bool {
	t.Helper()
	var info struct {
		FerretDB string `bson:"ferretdbVersion"`
	}
	require.NoError(t, db.RunCommand(testCtx(t), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info))
	return info.FerretDB != ""
}

// indexNames lists the names of coll's indexes.
func indexNames(t *testing.T, coll *mongo.Collection) []string {
	t.Helper()
	cur, err := coll.Indexes().List(testCtx(t))
	require.NoError(t, err)
	var all []struct {
		Name string `bson:"name"`
	}
	require.NoError(t, cur.All(testCtx(t), &all))
	names := make([]string, len(all))
	for i, ix := range all {
		names[i] = ix.Name
	}
	return names
}

// EnsureIndexes makes the indexes the protocol reads by, and no other
// (no index for a field only earlier development versions wrote), and is
// idempotent (FerretDB v1 drops the connection when one createIndexes
// names several existing indexes, so the second call used to fail there).
func TestEnsureIndexesIdempotent(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t) // calls EnsureIndexes
	require.NoError(t, b.c.EnsureIndexes(ctx), "a second time")
	assert.ElementsMatch(t, []string{"_id_", "state_1_lastModified_1", "state_1_created_1", "accounts_1_committedAt_1"},
		indexNames(t, b.db.Collection("transactions")))
	assert.ElementsMatch(t, []string{"_id_", "key_1_at_-1"}, indexNames(t, b.db.Collection("transactions_checkpoints")))
}
