package devserver_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/examples/devserver"
)

// The manual's words the tests below check: "the modification of each
// document is atomic, but the operation as a whole is not atomic … other
// operations may interleave", and an update or delete of many documents
// applies its filter to each document as it writes it.
const manualAtomicity = "https://www.mongodb.com/docs/manual/core/write-operations-atomicity/"

// TestUpdateManyRechecksEachDocument: an updateMany reads the documents its
// filter matches, and another client's write lands before it writes them;
// the document that write made stop matching is not touched, and n counts
// only the documents still matching when their turn came.
func TestUpdateManyRechecksEachDocument(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(1)}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: int32(1)}},
		bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: int32(1)}})
	other := collection(t, connect(t, s.URI()))
	interleaved := false
	devserver.SetBetween(s, func(stmt, doc int) {
		if doc == 0 && !interleaved { // the _ids read, no document written yet
			interleaved = true
			_, err := other.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: int32(2)}}}})
			require.NoError(t, err)
		}
	})
	res, err := coll.UpdateMany(t.Context(), bson.D{{Key: "n", Value: int32(1)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: int32(1)}}}})
	require.NoError(t, err)
	require.True(t, interleaved)
	assert.EqualValues(t, 2, res.MatchedCount, manualAtomicity)
	assert.EqualValues(t, 2, res.ModifiedCount, manualAtomicity)
	assert.Equal(t, int32(2), field(t, coll, "b", "n"))
	n, err := coll.CountDocuments(t.Context(), bson.D{{Key: "m", Value: int32(1)}})
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "b, changed in between, is not updated")
}

// TestDeleteManyRechecksEachDocument: the same for a delete of limit 0.
func TestDeleteManyRechecksEachDocument(t *testing.T) {
	s := startServer(t, devserver.Config{})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(1)}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: int32(1)}},
		bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: int32(1)}})
	other := collection(t, connect(t, s.URI()))
	interleaved := false
	devserver.SetBetween(s, func(stmt, doc int) {
		if doc == 0 && !interleaved {
			interleaved = true
			_, err := other.UpdateOne(t.Context(), bson.D{{Key: "_id", Value: "b"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: int32(2)}}}})
			require.NoError(t, err)
		}
	})
	res, err := coll.DeleteMany(t.Context(), bson.D{{Key: "n", Value: int32(1)}})
	require.NoError(t, err)
	require.True(t, interleaved)
	assert.EqualValues(t, 2, res.DeletedCount, manualAtomicity)
	left, err := coll.CountDocuments(t.Context(), bson.D{})
	require.NoError(t, err)
	assert.EqualValues(t, 1, left, "b, changed in between, is not deleted")
}

// TestUpdateManyCountsAsMongoDB: run a document at a time, an updateMany
// still answers n (matched) and nModified (changed) for the whole
// statement, and an upsert that matches nothing inserts ("If upsert: true
// and no documents match the filter, db.collection.updateMany() creates a
// new document", manual, updateMany).
func TestUpdateManyCountsAsMongoDB(t *testing.T) {
	s := startServer(t, devserver.Config{StatementPause: 1000})
	coll := collection(t, connect(t, s.URI()),
		bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int32(1)}},
		bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: int32(1)}, {Key: "m", Value: int32(1)}},
		bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: int32(1)}})
	res, err := coll.UpdateMany(t.Context(), bson.D{{Key: "n", Value: int32(1)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: int32(1)}}}})
	require.NoError(t, err)
	assert.EqualValues(t, 3, res.MatchedCount, manualUpdateOutput)
	assert.EqualValues(t, 2, res.ModifiedCount, manualUpdateOutput)

	res, err = coll.UpdateMany(t.Context(), bson.D{{Key: "_id", Value: "z"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "m", Value: int32(2)}}}}, options.UpdateMany().SetUpsert(true))
	require.NoError(t, err)
	assert.EqualValues(t, 0, res.MatchedCount)
	assert.EqualValues(t, 1, res.UpsertedCount)
	assert.Equal(t, int32(2), field(t, coll, "z", "m"))
}
