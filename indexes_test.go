package twopc_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
)

// fencesIndex is fence removal's index as listIndexes shows it.
type fencesIndex struct {
	Name    string   `bson:"name"`
	Key     bson.Raw `bson:"key"`
	Sparse  bool     `bson:"sparse"`
	Partial bson.Raw `bson:"partialFilterExpression"`
}

func listFencesIndex(t *testing.T, coll *mongo.Collection) fencesIndex {
	t.Helper()
	cur, err := coll.Indexes().List(testCtx(t))
	require.NoError(t, err)
	var all []fencesIndex
	require.NoError(t, cur.All(testCtx(t), &all))
	for _, ix := range all {
		if ix.Name == "fences_1_lastModified_1" {
			return ix
		}
	}
	t.Fatalf("no fences index among %v", all)
	return fencesIndex{}
}

// isFerretDB reports whether db's server is FerretDB (buildInfo names it).
func isFerretDB(t *testing.T, db *mongo.Database) bool {
	t.Helper()
	var info struct {
		FerretDB string `bson:"ferretdbVersion"`
	}
	require.NoError(t, db.RunCommand(testCtx(t), bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info))
	return info.FerretDB != ""
}

// EnsureIndexes makes fence removal's index partial where the server has
// partial indexes (MongoDB) and sparse where it refuses them (the dev
// server, FerretDB), and is idempotent either way (FerretDB v1 drops the
// connection when one createIndexes names several existing indexes, so
// the second call used to fail there); an index of the same name from an
// earlier version (sparse) is kept.
func TestEnsureIndexesPartialWhereTheServerHasThem(t *testing.T) {
	ctx := testCtx(t)
	b := newBank(t) // calls EnsureIndexes
	require.NoError(t, b.c.EnsureIndexes(ctx), "a second time")
	ix := listFencesIndex(t, b.db.Collection("transactions"))
	if isFerretDB(t, b.db) {
		// FerretDB v1 refuses partial indexes; it takes the sparse
		// option but does not list it.
		assert.Empty(t, ix.Partial, "no partial indexes on FerretDB")
	} else {
		assert.False(t, ix.Sparse)
		assert.Equal(t, true, ix.Partial.Lookup("fences").Boolean(), "partial on {fences: true}")
	}

	// An earlier version's sparse index under the same name is kept.
	other := b.db.Client().Database(b.db.Name() + "_old")
	t.Cleanup(func() { _ = other.Drop(ctx) })
	_, err := other.Collection("transactions").Indexes().CreateOne(ctx, mongo.IndexModel{
		Keys:    bson.D{{Key: "fences", Value: 1}, {Key: "lastModified", Value: 1}},
		Options: options.Index().SetSparse(true),
	})
	require.NoError(t, err)
	c, err := twopc.NewCoordinator(other)
	require.NoError(t, err)
	require.NoError(t, c.EnsureIndexes(ctx))
	assert.Empty(t, listFencesIndex(t, other.Collection("transactions")).Partial, "the earlier index kept")
}
