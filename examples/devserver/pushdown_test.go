package devserver_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/examples/devserver"
)

// TestIDFilterPushedDown: the dev server's FerretDB (patched, see
// examples/third_party/README.md) reads only the documents of a filter's
// top-level _id (a string or an ObjectID), _id $in list of those, or $or
// each of whose clauses names one, whatever the filter's other fields, as
// MongoDB uses the _id index for them; and the rest of the filter still
// decides whether those documents match. Stock FerretDB v1.24 asked SQLite
// for them by an expression other than its _id index's, so even a filter
// of _id alone scanned the table.
func TestIDFilterPushedDown(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(4)}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: int32(5)}})
	ctx := t.Context()

	in := func(ids ...any) bson.D { return bson.D{{Key: "$in", Value: bson.A(ids)}} }
	for _, tc := range []struct {
		filter bson.D
		want   bool
	}{
		{bson.D{{Key: "_id", Value: "a"}}, true},
		{bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: bson.D{{Key: "$gt", Value: 0}}}}, true},
		{bson.D{{Key: "n", Value: int32(4)}, {Key: "_id", Value: "a"}}, true},
		// A settle batch's and a group commit's filters: MongoDB reads
		// them by the _id index too.
		{bson.D{{Key: "_id", Value: in("a", "b")}, {Key: "n", Value: int32(4)}}, true},
		{bson.D{{Key: "n", Value: int32(4)}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "_id", Value: "a"}, {Key: "m", Value: 1}}, bson.D{{Key: "_id", Value: "b"}}}}}, true},
		{bson.D{{Key: "$or", Value: bson.A{bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "n", Value: int32(5)}}}}}, false},
		{bson.D{{Key: "_id", Value: in("a", int32(1))}}, false},
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"a"}}, {Key: "$ne", Value: "b"}}}}, false},
		{bson.D{{Key: "n", Value: int32(4)}}, false},
	} {
		var plan bson.M
		require.NoError(t, coll.Database().RunCommand(ctx, bson.D{
			{Key: "explain", Value: bson.D{{Key: "find", Value: coll.Name()}, {Key: "filter", Value: tc.filter}}},
		}).Decode(&plan))
		assert.Equal(t, tc.want, plan["filterPushdown"], "filter %v", tc.filter)
		// And SQLite reads those documents by the _id index, as MongoDB
		// does (an IXSCAN of _id_), rather than scanning the table.
		steps := fmt.Sprint(plan["queryPlanner"])
		if tc.want {
			assert.Regexp(t, `SEARCH \S+ USING INDEX \S+__id_ `, steps, "filter %v", tc.filter)
			assert.NotContains(t, steps, "SCAN", "filter %v", tc.filter)
		} else {
			assert.Contains(t, steps, "SCAN", "filter %v", tc.filter)
		}
	}

	// The rest of the filter still decides, for a list of _ids too.
	many, err := coll.UpdateMany(ctx, bson.D{{Key: "_id", Value: in("a", "b", "c")}, {Key: "n", Value: int32(5)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: 1}}}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), many.ModifiedCount, "b alone has n 5")
	many, err = coll.UpdateMany(ctx, bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "_id", Value: "a"}, {Key: "m", Value: 1}}, bson.D{{Key: "_id", Value: "b"}, {Key: "m", Value: 1}}}}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "m", Value: ""}}}})
	require.NoError(t, err)
	assert.Equal(t, int64(1), many.ModifiedCount, "b alone has m 1")

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
