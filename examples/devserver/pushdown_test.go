package devserver_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/examples/devserver"
)

// TestIDFilterPushedDown: the dev server's FerretDB (patched, see
// examples/third_party/README.md) reads only the document of a filter's
// top-level _id (a string or an ObjectID), whatever the filter's other
// fields, as MongoDB uses the _id index for it; and the rest of the
// filter still decides whether that document matches.
func TestIDFilterPushedDown(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(4)}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: int32(5)}})
	ctx := t.Context()

	for _, filter := range []bson.D{
		{{Key: "_id", Value: "a"}},
		{{Key: "_id", Value: "a"}, {Key: "n", Value: bson.D{{Key: "$gt", Value: 0}}}},
		{{Key: "n", Value: int32(4)}, {Key: "_id", Value: "a"}},
	} {
		var plan bson.M
		require.NoError(t, coll.Database().RunCommand(ctx, bson.D{
			{Key: "explain", Value: bson.D{{Key: "find", Value: coll.Name()}, {Key: "filter", Value: filter}}},
		}).Decode(&plan))
		assert.Equal(t, true, plan["filterPushdown"], "filter %v", filter)
	}

	res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(5)}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
	require.NoError(t, err)
	assert.Equal(t, int64(0), res.MatchedCount, "the rest of the filter still decides")
	res, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(4)}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), res.ModifiedCount)
	del, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: int32(4)}})
	require.NoError(t, err)
	assert.Equal(t, int64(0), del.DeletedCount)
	n, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
}
