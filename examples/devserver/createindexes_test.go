package devserver_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc/examples/devserver"
)

// manualCreateIndexes is where MongoDB documents createIndexes: an index
// whose specification is identical to an existing one's is not created
// again, and the reply carries a note when some of those asked for
// existed ("all indexes already exist" when none was created, "index
// already exists" otherwise, as mongod's create_indexes.cpp writes them)
// (Output: numIndexesBefore, numIndexesAfter, note).
const manualCreateIndexes = "https://www.mongodb.com/docs/manual/reference/command/createIndexes/#output"

// TestCreateIndexesSomeExisting sends createIndexes commands naming
// several indexes, some or all of which exist with the same
// specification: the command succeeds, creates exactly the new ones, and
// counts them, with a note when some existed. FerretDB v1.24 dropped the existing ones from its list by
// their index in the original list, which earlier drops had shifted: a
// command of three existing indexes panicked and closed the connection,
// and one of two existing indexes then a new one did not create the new
// one (examples/third_party/README.md).
func TestCreateIndexesSomeExisting(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}})
	ctx := t.Context()
	spec := func(names ...string) bson.A {
		out := bson.A{}
		for _, n := range names {
			out = append(out, bson.D{{Key: "key", Value: bson.D{{Key: n, Value: 1}}}, {Key: "name", Value: n + "_1"}})
		}
		return out
	}
	create := func(names ...string) bson.M {
		t.Helper()
		var reply bson.M
		err := coll.Database().RunCommand(ctx, bson.D{{Key: "createIndexes", Value: coll.Name()}, {Key: "indexes", Value: spec(names...)}}).Decode(&reply)
		require.NoError(t, err, "createIndexes %v (%s)", names, manualCreateIndexes)
		return reply
	}
	indexes := func() []string {
		t.Helper()
		specs, err := coll.Indexes().ListSpecifications(ctx)
		require.NoError(t, err)
		var out []string
		for _, s := range specs {
			out = append(out, s.Name)
		}
		return out
	}

	r := create("a", "b", "c")
	assert.EqualValues(t, 1, r["numIndexesBefore"], "%s", manualCreateIndexes)
	assert.EqualValues(t, 4, r["numIndexesAfter"], "%s", manualCreateIndexes)
	assert.NotContains(t, r, "note", "none existed (%s)", manualCreateIndexes)

	r = create("a", "b", "c")
	assert.EqualValues(t, 4, r["numIndexesBefore"], "%s", manualCreateIndexes)
	assert.EqualValues(t, 4, r["numIndexesAfter"], "%s", manualCreateIndexes)
	assert.Equal(t, "all indexes already exist", r["note"], "%s", manualCreateIndexes)

	r = create("a", "b", "d")
	assert.EqualValues(t, 4, r["numIndexesBefore"], "%s", manualCreateIndexes)
	assert.EqualValues(t, 5, r["numIndexesAfter"], "%s", manualCreateIndexes)
	assert.Equal(t, "index already exists", r["note"], "some existed (%s)", manualCreateIndexes)

	r = create("e", "c", "a", "f")
	assert.EqualValues(t, 5, r["numIndexesBefore"], "%s", manualCreateIndexes)
	assert.EqualValues(t, 7, r["numIndexesAfter"], "%s", manualCreateIndexes)

	assert.ElementsMatch(t, []string{"_id_", "a_1", "b_1", "c_1", "d_1", "e_1", "f_1"}, indexes(), "%s", manualCreateIndexes)

	// On a collection the command creates, the _id index it asks for is
	// the one every collection has.
	var fresh bson.M
	require.NoError(t, coll.Database().RunCommand(ctx, bson.D{{Key: "createIndexes", Value: "fresh"}, {Key: "indexes", Value: bson.A{
		bson.D{{Key: "key", Value: bson.D{{Key: "_id", Value: 1}}}, {Key: "name", Value: "_id_"}},
		bson.D{{Key: "key", Value: bson.D{{Key: "a", Value: 1}}}, {Key: "name", Value: "a_1"}},
	}}}).Decode(&fresh))
	assert.EqualValues(t, 1, fresh["numIndexesBefore"], "%s", manualCreateIndexes)
	assert.EqualValues(t, 2, fresh["numIndexesAfter"], "%s", manualCreateIndexes)
	assert.Equal(t, true, fresh["createdCollectionAutomatically"], "%s", manualCreateIndexes)
	specs, err := coll.Database().Collection("fresh").Indexes().ListSpecifications(ctx)
	require.NoError(t, err)
	assert.Len(t, specs, 2, "%s", manualCreateIndexes)
	// The connection is still good: a read on it answers.
	n, err := coll.CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
}
