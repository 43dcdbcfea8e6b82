package devserver_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

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

// TestIndexFilterPushedDown: the dev server's FerretDB (patched, see
// examples/third_party/README.md) reads a filter whose top-level field is
// the first key of one of the collection's indexes, and is equal there to
// a string or a boolean (or $in of those), by that index, as MongoDB reads
// it by an index scan: the library's recovery and low-water-mark reads of
// the transactions collection. The rest of the filter still decides, and
// a document whose field holds an array with one of the values, which
// MongoDB's equality matches, is still found. Stock FerretDB v1.24 scanned
// the table for every such filter.
func TestIndexFilterPushedDown(t *testing.T) {
	s := startServer(t, devserver.Config{})
	client := connect(t, s.URI())
	ctx := t.Context()
	states := []string{"done", "canceled", "pending", "initial", "canceling", "applied"}
	var docs []any
	for i := range 300 {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("t%03d", i)}, {Key: "state", Value: states[i%len(states)]},
			{Key: "created", Value: time.Unix(int64(i), 0)}, {Key: "fences", Value: i%7 == 0}})
	}
	docs = append(docs,
		bson.D{{Key: "_id", Value: "array"}, {Key: "state", Value: bson.A{"x", "pending"}}, {Key: "created", Value: time.Unix(1000, 0)}},
		bson.D{{Key: "_id", Value: "number"}, {Key: "state", Value: int32(1)}, {Key: "created", Value: time.Unix(1001, 0)}},
		bson.D{{Key: "_id", Value: "missing"}, {Key: "created", Value: time.Unix(1002, 0)}},
		bson.D{{Key: "_id", Value: "escaped"}, {Key: "state", Value: "a<b&\"c\""}, {Key: "created", Value: time.Unix(1003, 0)}},
		bson.D{{Key: "_id", Value: "accented"}, {Key: "state", Value: "réglé"}, {Key: "created", Value: time.Unix(1004, 0)}},
		bson.D{{Key: "_id", Value: "null"}, {Key: "state", Value: nil}, {Key: "created", Value: time.Unix(1005, 0)}},
		bson.D{{Key: "_id", Value: "nullInArray"}, {Key: "state", Value: bson.A{nil, "y"}}, {Key: "created", Value: time.Unix(1006, 0)}})
	indexed := collection(t, client, docs...)
	plain := client.Database("devserver").Collection(t.Name() + "_plain")
	_, err := plain.InsertMany(ctx, docs)
	require.NoError(t, err)
	_, err = indexed.Indexes().CreateMany(ctx, []mongo.IndexModel{
		{Keys: bson.D{{Key: "state", Value: 1}, {Key: "lastModified", Value: 1}}, Options: options.Index().SetName("state_1_lastModified_1")},
		{Keys: bson.D{{Key: "state", Value: 1}, {Key: "created", Value: 1}}, Options: options.Index().SetName("state_1_created_1")},
		{Keys: bson.D{{Key: "fences", Value: 1}, {Key: "lastModified", Value: 1}}, Options: options.Index().SetName("fences_1_lastModified_1").SetSparse(true)},
	})
	require.NoError(t, err)

	in := func(vs ...any) bson.D { return bson.D{{Key: "$in", Value: bson.A(vs)}} }
	for _, tc := range []struct {
		filter bson.D
		sort   bson.D
		want   bool
	}{
		// The low-water mark's read (one document, the oldest).
		{bson.D{{Key: "state", Value: in("initial", "pending", "canceling")}, {Key: "created", Value: bson.D{{Key: "$type", Value: "date"}}}}, bson.D{{Key: "created", Value: 1}}, true},
		// Recovery's scans.
		{bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "string"}}}, {Key: "state", Value: "pending"}, {Key: "created", Value: bson.D{{Key: "$lt", Value: time.Unix(200, 0)}}}}, bson.D{{Key: "created", Value: 1}}, true},
		{bson.D{{Key: "fences", Value: true}}, nil, true},
		{bson.D{{Key: "state", Value: "applied"}}, nil, true},
		// Not an equality on an index's first key: scanned.
		{bson.D{{Key: "created", Value: bson.D{{Key: "$lt", Value: time.Unix(10, 0)}}}}, nil, false},
		{bson.D{{Key: "state", Value: bson.D{{Key: "$ne", Value: "done"}}}}, nil, false},
		{bson.D{{Key: "state", Value: int32(1)}}, nil, false},
		// A string whose JSON has escapes is scanned: SQLite and the
		// server may escape it differently, and an index read would miss it.
		{bson.D{{Key: "state", Value: "a<b&\"c\""}}, nil, false},
		{bson.D{{Key: "state", Value: "réglé"}}, nil, true},
		// {field: null} matches a document without the field, one where it
		// is null, and one where it is an array holding null ("Query for
		// Null or Missing Fields", MongoDB manual): read by the index
		// (the change feed's search for events not yet numbered).
		{bson.D{{Key: "state", Value: nil}}, nil, true},
		{bson.D{{Key: "state", Value: nil}, {Key: "created", Value: bson.D{{Key: "$type", Value: "date"}}}}, nil, true},
	} {
		var plan bson.M
		require.NoError(t, indexed.Database().RunCommand(ctx, bson.D{
			{Key: "explain", Value: bson.D{{Key: "find", Value: indexed.Name()}, {Key: "filter", Value: tc.filter}}},
		}).Decode(&plan))
		steps := fmt.Sprint(plan["queryPlanner"])
		if tc.want {
			assert.Regexp(t, `SEARCH \S+ USING INDEX`, steps, "filter %v", tc.filter)
			assert.NotContains(t, steps, "SCAN", "filter %v", tc.filter)
		} else {
			assert.Contains(t, steps, "SCAN", "filter %v", tc.filter)
		}
		// The same documents as from the collection with no index.
		ids := func(coll *mongo.Collection) []string {
			cur, err := coll.Find(ctx, tc.filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
			require.NoError(t, err)
			var got []struct {
				ID string `bson:"_id"`
			}
			require.NoError(t, cur.All(ctx, &got))
			out := make([]string, len(got))
			for i, g := range got {
				out[i] = g.ID
			}
			return out
		}
		want := ids(plain)
		assert.Equal(t, want, ids(indexed), "filter %v", tc.filter)
		assert.NotEmpty(t, want, "filter %v matches something", tc.filter)
	}
	// An array holding the value is found, as MongoDB's equality finds it.
	n, err := indexed.CountDocuments(ctx, bson.D{{Key: "state", Value: "pending"}})
	require.NoError(t, err)
	assert.EqualValues(t, 51, n, "50 pending and the array")
	// {state: null}: the missing field, the null and the array holding
	// null, as MongoDB matches them.
	var nulls []struct {
		ID string `bson:"_id"`
	}
	cur, err := indexed.Find(ctx, bson.D{{Key: "state", Value: nil}}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	require.NoError(t, err)
	require.NoError(t, cur.All(ctx, &nulls))
	assert.Equal(t, []struct {
		ID string `bson:"_id"`
	}{{"missing"}, {"null"}, {"nullInArray"}}, nulls)
}
